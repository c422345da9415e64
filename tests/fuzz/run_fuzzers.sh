#!/usr/bin/env bash
# Runs each libFuzzer harness of FUZZ_DIR for SECONDS (`make fuzz` calls this after building and
# seeding). Per harness: the growing corpus is FUZZ_DIR/corpus/<h>/ (seeded from
# FUZZ_DIR/seeds/<h>/), crashes, leaks, timeouts and OOMs go to FUZZ_DIR/crashes/<h>/, the log
# to FUZZ_DIR/logs/<h>.log. Exits 1 when any harness found something.
# usage: tests/fuzz/run_fuzzers.sh FUZZ_DIR SECONDS [HARNESS...]   (default: all)
# FUZZ_PARALLEL=N runs N harnesses at once (default 1; each libFuzzer process uses one core).
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="${1:?usage: run_fuzzers.sh FUZZ_DIR SECONDS [HARNESS...]}"
secs="${2:?usage: run_fuzzers.sh FUZZ_DIR SECONDS [HARNESS...]}"
shift 2
harnesses=("$@")
[ ${#harnesses[@]} -eq 0 ] &&
  harnesses=(onnx_importer engine_blob engine_blob_resigned policy tensor_proto build_spec)
parallel="${FUZZ_PARALLEL:-1}"
mkdir -p "$dir/logs"

run_one() {
  local h="$1" bin="$dir/tests/fuzz/fuzz_$1" dict=()
  case "$h" in
    onnx_importer) dict=(-dict="$root/tests/fuzz/dicts/onnx.dict") ;;
    policy | build_spec) dict=(-dict="$root/tests/fuzz/dicts/policy.dict") ;;
  esac
  mkdir -p "$dir/corpus/$h" "$dir/crashes/$h" "$dir/seeds/$h"
  touch "$dir/logs/$h.start"
  local start=$SECONDS
  # UBSan halts on its first report (the build also has -fno-sanitize-recover); ASan's leak
  # checker runs after each input (libFuzzer's -detect_leaks, on by default).
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ASAN_OPTIONS=symbolize=1 \
    "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$dir/crashes/$h/" "${dict[@]}" "$dir/corpus/$h" "$dir/seeds/$h" \
    > "$dir/logs/$h.log" 2>&1
  echo $? > "$dir/logs/$h.rc"
  echo $((SECONDS - start)) > "$dir/logs/$h.secs"
}

if [ ! -x "$dir/tests/fuzz/fuzz_${harnesses[0]}" ]; then
  echo "run_fuzzers: no fuzz binaries in $dir (build the kiln_fuzzers target first)" >&2
  exit 2
fi

running=0
for h in "${harnesses[@]}"; do
  echo "run_fuzzers: $h for ${secs}s"
  run_one "$h" &
  running=$((running + 1))
  if [ "$running" -ge "$parallel" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=0
printf '%-22s %-6s %12s %8s %s\n' harness result execs seconds findings
for h in "${harnesses[@]}"; do
  rc=$(cat "$dir/logs/$h.rc" 2> /dev/null || echo 99)
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$dir/logs/$h.log" | awk '{print $2}')
  took=$(cat "$dir/logs/$h.secs" 2> /dev/null)
  new=$(find "$dir/crashes/$h" -type f -newer "$dir/logs/$h.start" | tr '\n' ' ')
  result=ok
  if [ "$rc" != 0 ] || [ -n "$new" ]; then
    result=FAILED
    failed=1
  fi
  printf '%-22s %-6s %12s %8s %s\n' "$h" "$result" "${execs:-?}" "${took:-?}" "${new:--}"
done
if [ "$failed" != 0 ]; then
  echo "run_fuzzers: findings above; stacks in $dir/logs/<harness>.log. Reproduce with" \
    "$dir/tests/fuzz/fuzz_<harness> FILE; once fixed, keep FILE in tests/fuzz/regressions/<harness>/"
fi
exit "$failed"
