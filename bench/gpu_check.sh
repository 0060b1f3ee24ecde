#!/bin/bash
# gpu_check.sh BUNDLE_DIR : the whole GPU check in one run on the GPU machine: the CUDA tests,
# then the GPU benchmarks (gather/scatter vs device copy; the full training step vs its GEMM-only
# bound for kaggle-shape at batch 2048 and 16384, model1, and mlperf-dcnv2 (DLRM-DCNv2, multi-hot)
# at batch 16384 in fp32 and bf16, all tables on the GPU; and
# kaggle-shape with the tables in the store and GPU hot rows), each in its own time box, and a
# compact summary. The whole script stays under about 8.7 minutes.
# Make the bundle on the build machine (a CUDA build: make build) with bench/gpu_bundle.sh, which
# also gives the one device command that unpacks it and runs this script.
# Every benchmark prints one JSON line (kept verbatim under "json:" for docs/BENCHMARKS.md).
# GPU_CHECK_LOGS=DIR keeps each step's whole output as DIR/NAME.log (for a device call's $OUT).
# Exit status: non-zero when a test failed, when every test skipped (no GPU visible), or when a
# benchmark failed or ran out of its time box.
set -uo pipefail
bundle=${1:?usage: gpu_check.sh BUNDLE_DIR}
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null ||
  echo "(no nvidia-smi)"
# The machine reaches nothing outside itself: NCCL's bootstrap must use loopback.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
script_start=$(date +%s)
status=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
logs_dir=${GPU_CHECK_LOGS:-}
[[ -n "$logs_dir" ]] && mkdir -p "$logs_dir"
# keep_log NAME: copies the step's output to GPU_CHECK_LOGS, when it is set.
keep_log() { if [[ -n "$logs_dir" ]]; then cp "$log" "$logs_dir/$1.log"; fi; }

# --- tests ---
# run_tests NAME SECONDS COMMAND...: a gtest binary in its time box; prints its failures and totals.
run_tests() {
  local name=$1 box=$2; shift 2
  local start=$(date +%s)
  timeout "$box" "$@" > "$log" 2>&1
  local rc=$?
  keep_log "$name"
  # Failures with their first assertion messages, then gtest's own totals.
  grep -E -B6 '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log" | grep -v -E '^\[ RUN|^--$' | head -60
  count() { grep -E "^\[  $1 *\] [0-9]+ tests?" "$log" | grep -oE '[0-9]+' | head -1; }
  local passed skipped failed
  passed=$(count PASSED); skipped=$(count SKIPPED); failed=$(count FAILED)
  echo "$name: passed=${passed:-0} skipped=${skipped:-0} failed=${failed:-0}" \
    "exit=$rc time=$(( $(date +%s) - start ))s"
  if [[ $rc -ne 0 && -z "$failed" ]]; then tail -20 "$log"; fi  # crashed or timed out: show how
  if [[ $rc -eq 0 && "${passed:-0}" -eq 0 ]]; then
    echo "$name: nothing ran on a GPU (all skipped): is a device visible?"
    rc=1
  fi
  [[ $rc -ne 0 ]] && status=1
}
run_tests cuda_test 120 "$bundle/bin/cuda_test"
# The dense backend's typed tests (MLP, model, ops) have CUDA instantiations in dense_test.
run_tests dense_test-cuda 60 "$bundle/bin/dense_test" --gtest_filter='*Cuda*'

# --- benchmarks ---
# field NAME JSON: the value of the first scalar field NAME of a one-line JSON object (the
# bench's "pool" is compute_ms_mean's: the host time before a step's first kernel, mostly).
field() { grep -oE "\"$1\":[^,}]*" <<< "$2" | head -1 | cut -d: -f2; }
# bench NAME SECONDS COMMAND...: runs one benchmark in its time box, prints its JSON line.
bench() {
  local name=$1 box=$2; shift 2
  local elapsed=$(( $(date +%s) - script_start ))
  if (( elapsed + box > 520 )); then
    echo "$name: skipped (the script has run ${elapsed}s; its budget is about 520s)"
    status=1
    return
  fi
  local t0=$(date +%s)
  timeout "$box" "$@" > "$log" 2>&1
  local brc=$?
  keep_log "$name"
  local json
  json=$(grep -E '^\{' "$log" | tail -1)
  if [[ $brc -ne 0 || -z "$json" ]]; then
    echo "$name: FAILED exit=$brc (124 = over its ${box}s box) time=$(( $(date +%s) - t0 ))s"
    tail -5 "$log"
    status=1
    return
  fi
  BENCH_JSON=$json
  echo "json: {\"bench\":\"$name\",\"result\":$json}"
  echo "$name: time=$(( $(date +%s) - t0 ))s"
}

BENCH_JSON=""
bench gather 40 "$bundle/bin/gather_bench" --rows 10131227 --dim 16 --batch 16384 \
  --ids-per-bag 64 --iterations 20
if [[ -n "$BENCH_JSON" ]]; then
  echo "  gather: $(field gather_gbps "$BENCH_JSON") GB/s, ratio to copy" \
    "$(field gather_ratio "$BENCH_JSON") (target >= 0.7); scatter ratio" \
    "$(field scatter_ratio "$BENCH_JSON"); copy $(field copy_gbps "$BENCH_JSON") GB/s"
fi
for args in "kaggle-shape 2048 fp32" "kaggle-shape 16384 fp32" "model1 2048 fp32" \
  "mlperf-dcnv2 16384 fp32" "mlperf-dcnv2 16384 bf16"; do
  set -- $args
  BENCH_JSON=""
  bench "train-$1-b$2-$3" 75 "$bundle/bin/dlrm" bench --device cuda --shape "$1" \
    --batch-size "$2" --math-mode "$3" --steps 10 --rounds 3
  if [[ -n "$BENCH_JSON" ]]; then
    echo "  $1 batch $2 $3: step $(field step_ms_median "$BENCH_JSON") ms, GEMM-only" \
      "$(field gemm_only_ms_median "$BENCH_JSON") ms, ratio $(field ratio "$BENCH_JSON")" \
      "(target >= 0.3 at 16384), host pool $(field pool "$BENCH_JSON") ms," \
      "tables on GPU: $(field tables_on_gpu "$BENCH_JSON")"
  fi
done
# A GPU worker whose tables stay in the (host) store, as with parameter servers: the batch's cold
# rows are uploaded each step, 256 MiB of hot rows live in GPU memory.
BENCH_JSON=""
bench "train-kaggle-shape-b16384-hot-rows" 60 "$bundle/bin/dlrm" bench --device cuda \
  --shape kaggle-shape --batch-size 16384 --steps 10 --rounds 3 --gpu-table-budget 0 \
  --hot-budget 268435456
if [[ -n "$BENCH_JSON" ]]; then
  echo "  kaggle-shape batch 16384, tables in the store: step $(field step_ms_median "$BENCH_JSON")" \
    "ms, ratio $(field ratio "$BENCH_JSON"), hot rows on GPU: $(field hot_rows_on_gpu "$BENCH_JSON")," \
    "hit rate $(field hot_hit_rate "$BENCH_JSON")"
fi
echo "gpu_check: total $(( $(date +%s) - script_start ))s, status $status"
exit $status
