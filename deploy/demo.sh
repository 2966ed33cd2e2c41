#!/usr/bin/env bash
# The main job: a planning report for the reference refits, then a live refit on this
# machine. Installs what a fresh Debian 12 machine lacks, builds everything, plans
# DeepSeek-V3, Qwen3-235B and the mini model side by side with gather-and-broadcast, then
# starts a coordinator, two refitd daemons (trainer node, inference node) and synthetic
# ranks holding dsv3-mini (PP2 x EP2 -> TP2 x DP2) in shared memory, and runs refit epochs
# with both strategies and into FP8 inference ranks, every destination byte checked after
# each.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh
targets=(//client:refitctl //planner:bench //transport:bench //refitd:refitd
         //coordinator:refit-coordinator //client:refit-synthetic-ranks)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"

echo "== Reference refits: reshard vs lower bound vs gather-and-broadcast =="
./bazel-bin/planner/bench
echo
echo "== DeepSeek-V3, PP16 x EP16 -> TP32 x DP8 on DGX H100 (coverage-verified) =="
./bazel-bin/client/refitctl plan --refit dsv3-h100 --verify=coverage
echo
echo "== mini (dsv3-mini, PP2 x EP2 -> TP2 x DP2), every destination byte checked =="
./bazel-bin/client/refitctl plan --refit mini --verify=bytes
echo
echo "== DeepSeek-V3 into FP8 inference (128 x 128 block scales), PP16 x EP16 -> TP16 x DP16 =="
./bazel-bin/client/refitctl plan --model deepseek-v3 --src-parallel pp=16,ep=16 \
  --dst-parallel tp=16,dp=16 --dst-quantization block_fp8 | grep -E "^(network bytes|predicted|quantization)"
echo
echo "== Live refit of dsv3-mini: coordinator, 2 refitd, synthetic ranks, UCX between nodes =="
bin=$(mktemp -d /tmp/refit-demo-XXXXXX)
trap 'rm -rf "$bin"' EXIT
cp bazel-bin/refitd/refitd bazel-bin/coordinator/refit-coordinator \
  bazel-bin/client/refit-synthetic-ranks bazel-bin/client/refitctl "$bin/"
./tests/e2e/live_refit.sh "$bin" mini 3 reshard
./tests/e2e/live_refit.sh "$bin" mini 2 gather_broadcast
./tests/e2e/live_refit.sh "$bin" mini 2 reshard block_fp8
echo
echo "== Data plane: the same plan between shared-memory segments =="
./bazel-bin/transport/bench mini
