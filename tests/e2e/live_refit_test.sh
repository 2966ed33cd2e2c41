#!/usr/bin/env bash
# Bazel test: the live refit of the mini model, both strategies, real processes.
set -euo pipefail
bin=$(mktemp -d /tmp/refit-bin-XXXXXX)
trap 'rm -rf "$bin"' EXIT
cp daemon/refitd daemon/refit-coordinator client/refit-synthetic-ranks client/refitctl "$bin/"
tests/e2e/live_refit.sh "$bin" mini 3 reshard
tests/e2e/live_refit.sh "$bin" mini 2 gather_broadcast
