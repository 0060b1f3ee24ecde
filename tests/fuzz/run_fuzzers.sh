#!/usr/bin/env bash
# `make fuzz`: builds the fuzz preset (clang-14, libFuzzer, ASan + UBSan; build-fuzz/) and runs
# every fuzz target for FUZZ_SECONDS (default 600) on a copy of its seed corpus, which grows with
# what libFuzzer finds. A crash stops with the reproducer path (libFuzzer's crash-* file).
#   tests/fuzz/run_fuzzers.sh [SECONDS_PER_TARGET]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${1:-${FUZZ_SECONDS:-600}}
jobs=${JOBS:-$(nproc)}
targets=(criteo_line job_spec lookup_wire load_job binary_reader rpc)
cd "$root"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs" --target "${targets[@]/#/fuzz_}"
# UBSan reports are findings too: without halt_on_error they are printed and the run goes on.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
work=$(mktemp -d /tmp/dlrm-fuzz-XXXXXX)
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  cp "$here/corpus/$t/"* "$work/$t/"
  echo "== fuzz_$t for ${seconds}s (corpus $work/$t)" >&2
  (cd "$work" && "$root/build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" \
      -rss_limit_mb=2048 -print_final_stats=1 "$work/$t")
done
echo "fuzz: every target ran ${seconds}s without a finding; corpora in $work" >&2
