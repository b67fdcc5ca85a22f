#!/usr/bin/env bash
# Runs fjit's fuzzers (tests/fuzz/CMakeLists.txt) for a while each.
#   tests/fuzz/run.sh BUILD_DIR SECONDS [FUZZER...]     (default: every fuzzer)
# Each starts from its committed seeds (tests/fuzz/corpus/<name>/) and the inputs earlier runs
# in BUILD_DIR found (BUILD_DIR/corpus/<name>/, where new ones go). An input that crashes,
# leaks, hits undefined behaviour or breaks a harness's check is saved as
# BUILD_DIR/artifacts/<name>-crash-<sha1>; replay it with `BUILD_DIR/<name>_fuzzer FILE`.
# Exits non-zero when any fuzzer found something.
set -uo pipefail
build=${1:?usage: run.sh BUILD_DIR SECONDS [FUZZER...]}
seconds=${2:?usage: run.sh BUILD_DIR SECONDS [FUZZER...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
fuzzers=("$@")
[ ${#fuzzers[@]} -eq 0 ] && fuzzers=(safetensors checkpoint_json idx command_line)
status=0
for name in "${fuzzers[@]}"; do
  name=${name%_fuzzer}
  dict=()
  case $name in
    safetensors|checkpoint_json) dict=(-dict="$here/checkpoint.dict") ;;
    command_line) dict=(-dict="$here/command_line.dict") ;;
  esac
  mkdir -p "$build/corpus/$name" "$build/artifacts"
  echo "== ${name}_fuzzer for ${seconds}s"
  if ! "$build/${name}_fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" "${dict[@]}" \
      "$build/corpus/$name" "$here/corpus/$name" > "$build/$name.log" 2>&1; then
    status=1
    echo "${name}_fuzzer FOUND A PROBLEM (log: $build/$name.log):"
    grep -E "ERROR|fjit fuzz|SUMMARY|runtime error|Test unit written" "$build/$name.log" | head -20
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$build/$name.log" | tr '\n' ' '
  echo
done
exit $status
