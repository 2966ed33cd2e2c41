#!/usr/bin/env bash
# Builds the fuzz targets with clang, libFuzzer, ASan and UBSan (in a Bazel output base of
# their own, so the ordinary gcc build's cache stays) and fuzzes each for SECONDS (default
# 600), all at once, starting from the committed seed corpus. Findings and the grown
# corpus go to OUT (default /tmp/refit-fuzz). Exit status: the number of targets that
# found a crash.
#   tests/fuzz/run_fuzzers.sh [SECONDS] [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-600}
out=${2:-/tmp/refit-fuzz}
targets=(layout_fuzzer model_fuzzer registration_fuzzer)
command -v clang++ > /dev/null || { echo "run_fuzzers.sh: needs clang (apt install clang)" >&2; exit 2; }
mkdir -p "$out"
binaries=()
for target in "${targets[@]}"; do binaries+=("//tests/fuzz:${target}_libfuzzer"); done
CC=clang CXX=clang++ bazel --output_base="$HOME/.cache/refit-fuzz-bazel" build --config=fuzz \
  --symlink_prefix=bazel-fuzz- "${binaries[@]}" 2>&1 | tail -3
pids=()
for target in "${targets[@]}"; do
  mkdir -p "$out/$target/corpus" "$out/$target/findings"
  cp -n tests/fuzz/corpus/$target/* "$out/$target/corpus/" 2>/dev/null || true
  (cd "$out/$target/findings" &&
   "$OLDPWD/bazel-fuzz-bin/tests/fuzz/${target}_libfuzzer" -max_total_time="$seconds" \
     -max_len=8192 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 "$out/$target/corpus" \
     > "$out/$target.log" 2>&1) &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  if wait "${pids[$i]}"; then
    echo "${targets[$i]}: $(grep -E '^stat::number_of_executed_units' "$out/${targets[$i]}.log" |
      awk '{print $2}') runs in ${seconds} s, no crash ($(ls "$out/${targets[$i]}/corpus" | wc -l) inputs in the corpus)"
  else
    echo "${targets[$i]}: FOUND A CRASH, see $out/${targets[$i]}.log and $out/${targets[$i]}/findings"
    failed=$((failed + 1))
  fi
done
exit $failed
