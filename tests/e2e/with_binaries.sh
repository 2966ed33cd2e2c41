#!/usr/bin/env bash
# Bazel test wrapper: gathers the binaries the end-to-end scripts start into one folder
# and runs SCRIPT with that folder as its first argument.
#   with_binaries.sh SCRIPT [ARGS...]
set -euo pipefail
bin=$(mktemp -d /tmp/refit-bin-XXXXXX)
trap 'rm -rf "$bin"' EXIT
cp refitd/refitd coordinator/refit-coordinator client/refit-synthetic-ranks client/refitctl "$bin/"
script=$1
shift
"$script" "$bin" "$@"
