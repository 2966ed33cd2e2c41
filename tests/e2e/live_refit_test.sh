#!/usr/bin/env bash
# Bazel test: the live refit of the mini model, both strategies, real processes.
set -euo pipefail
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini 3 reshard
tests/e2e/with_binaries.sh tests/e2e/live_refit.sh mini 2 gather_broadcast
