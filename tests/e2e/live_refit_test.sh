#!/usr/bin/env bash
# Bazel test: live refits of the mini model with real processes: one trainer node and one
# inference node with both strategies, then two of each (four daemons), then into FP8
# inference ranks.
set -euo pipefail
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini 3 reshard
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini 2 gather_broadcast
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini4 2 reshard
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini 2 reshard block_fp8
# FSDP2 trainers (3 ranks: their rows cut blocks): those tensors are quantized on arrival.
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini-fsdp 2 reshard block_fp8
