#!/usr/bin/env bash
# Bazel test: each fault of faults.sh in turn (processes killed or stopped mid-epoch),
# with recovery and a checked refit after each.
set -euo pipefail
for fault in source-daemon destination-daemon trainer-ranks trainer-refitting coordinator daemon-stop; do
  tests/e2e/with_binaries.sh tests/e2e/faults.sh "$fault"
done
