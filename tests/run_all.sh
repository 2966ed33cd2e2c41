#!/usr/bin/env bash
# The whole test suite: installs what a fresh Debian 12 machine lacks, builds everything
# with Bazel (offline) and runs every test. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh || exit 1

log=$(mktemp)
bazel test //... 2>&1 | tee "$log" | grep -E "^//|^INFO: Build|^ERROR|Executed" 
status=${PIPESTATUS[0]}
passed=$(grep -cE "^//.* PASSED" "$log")
failed=$(grep -cE "^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)" "$log")
if [[ $status -ne 0 && $failed -eq 0 ]]; then
  grep -E "ERROR" "$log" | head -20
  failed=1
fi
rm -f "$log"
echo "tests: $passed passed, $failed failed"
exit "$status"
