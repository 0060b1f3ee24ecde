#!/bin/bash
# gpu_check.sh BUNDLE_DIR : runs the CUDA tests of a device bundle on the GPU machine and prints a
# short summary. Make the bundle on the build machine with
#   /work/shared/tools/device-bundle.sh BUNDLE_DIR build/tests/cuda_test
# Exit status: non-zero when a test failed, or when every test skipped (no GPU visible).
set -uo pipefail
bundle=${1:?usage: gpu_check.sh BUNDLE_DIR}
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null ||
  echo "(no nvidia-smi)"
log=$(mktemp)
start=$(date +%s)
"$bundle/bin/cuda_test" > "$log" 2>&1
rc=$?
# Failures with their first assertion messages, then gtest's own totals.
grep -E -B6 '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" | grep -v -E '^\[ RUN|^--$' | head -60
count() { grep -E "^\[  $1 *\] [0-9]+ tests?" "$log" | grep -oE '[0-9]+' | head -1; }
passed=$(count PASSED); skipped=$(count SKIPPED); failed=$(count FAILED)
echo "cuda_test: passed=${passed:-0} skipped=${skipped:-0} failed=${failed:-0}" \
  "exit=$rc time=$(( $(date +%s) - start ))s"
if [[ $rc -ne 0 && -z "$failed" ]]; then tail -20 "$log"; fi  # crashed: show how
if [[ $rc -eq 0 && "${passed:-0}" -eq 0 ]]; then
  echo "cuda_test: nothing ran on a GPU (all skipped): is a device visible?"
  rc=1
fi
rm -f "$log"
exit $rc
