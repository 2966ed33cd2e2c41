#!/usr/bin/env bash
# The main job (for now): a planning report for the reference refits. Installs what a
# fresh Debian 12 machine lacks, builds refitctl and the planner benchmark, then plans
# DeepSeek-V3, Qwen3-235B and the mini model side by side with gather-and-broadcast and
# verifies the mini refit byte by byte.
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh
bazel build //client:refitctl //planner:bench >/dev/null 2>&1 || bazel build //client:refitctl //planner:bench

echo "== Reference refits: reshard vs lower bound vs gather-and-broadcast =="
./bazel-bin/planner/bench
echo
echo "== DeepSeek-V3, PP16 x EP16 -> TP32 x DP8 on DGX H100 (coverage-verified) =="
./bazel-bin/client/refitctl plan --refit dsv3-h100 --verify=coverage
echo
echo "== mini (dsv3-mini, PP2 x EP2 -> TP2 x DP2), every destination byte checked =="
./bazel-bin/client/refitctl plan --refit mini --verify=bytes
