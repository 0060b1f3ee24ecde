#!/usr/bin/env bash
# make demo's job with tables.dtype fp32, fp16 and bf16, hot rows off (--no-hot-rows) and on
# with a fixed 4 MiB hot budget (training.hot_budget: 4MiB in place of the job's `auto`, so the
# hot set and the PS traffic do not move with the planner), ROUNDS rounds interleaved; one JSON
# line per run: samples/s, held-out AUC and the job's counted bytes per sample; then one summary
# line (bench dtype_demo_summary) with, per hot-rows arm and half dtype, the ratios
# docs/BENCHMARKS.md ("Half-precision rows") quotes, computed from this invocation's runs:
# fp32's PS lookup + push bytes / this dtype's, every byte of the job fp32 / this, the hot-row
# exchange bytes fp32 / this, median samples/s over fp32's, and mean AUC minus fp32's.
# Needs make demo's data (BUILD_DIR/demo/train.bin).
#   bench/dtype_demo.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
rounds=${2:-3}
demo="$build/demo"
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$demo/train.bin" ] || { echo "dtype_demo: run make demo first ($demo/train.bin)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$demo/train.bin" "$work/train.bin"
for d in fp32 fp16 bf16; do
  sed -e "s/^  max_rows: 100000$/  max_rows: 100000\n  dtype: $d/" \
    -e "s/^  hot_budget: .*/  hot_budget: 4MiB/" "$here/../examples/demo-job.yaml" \
    > "$work/job_$d.yaml"
  grep -q "dtype: $d" "$work/job_$d.yaml" || { echo "dtype_demo: cannot set dtype" >&2; exit 1; }
  grep -q "^  hot_budget: 4MiB$" "$work/job_$d.yaml" ||
    { echo "dtype_demo: cannot set hot_budget" >&2; exit 1; }
done
for r in $(seq "$rounds"); do
  for flags in --no-hot-rows ""; do
    for d in fp32 fp16 bf16; do
      # shellcheck disable=SC2086  # flags is one word or none
      "$build/bin/dlrm" local --config "$work/job_$d.yaml" --ps 2 --workers 2 $flags \
        --no-progress --metrics-out "$work/m.json" > "$work/log" 2>&1 ||
        { echo "dtype_demo: $d $flags failed" >&2; tail -5 "$work/log" >&2; exit 1; }
      python3 - "$work/m.json" "$r" "$d" "$flags" <<'PY' | tee -a "$work/runs.jsonl"
import json, sys
m = json.load(open(sys.argv[1]))
print(json.dumps({"bench": "dtype_demo", "round": int(sys.argv[2]), "dtype": sys.argv[3],
                  "hot_rows": "off" if sys.argv[4] else "on",
                  "samples_per_sec": round(m["samples_per_sec"]), "auc": round(m["auc"], 5),
                  "network_bytes_per_sample": round(m["network_bytes_per_sample"], 1),
                  "ps_bytes_per_sample": round(m["network_ps_lookup_bytes_per_sample"]
                                               + m["network_ps_push_bytes_per_sample"], 1),
                  "hot_sync_bytes_per_sample": round(m["network_hot_sync_bytes_per_sample"], 1)}))
PY
    done
  done
done
python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
out = {"bench": "dtype_demo_summary", "rounds": max(r["round"] for r in runs), "hot_budget": "4MiB"}
for hot in ("off", "on"):
    by = {d: [r for r in runs if r["hot_rows"] == hot and r["dtype"] == d]
          for d in ("fp32", "fp16", "bf16")}
    f32 = by["fp32"]
    mean = lambda rs, k: statistics.mean(r[k] for r in rs)
    arm = {"fp32_ps_bytes_per_sample": mean(f32, "ps_bytes_per_sample"),
           "fp32_network_bytes_per_sample": mean(f32, "network_bytes_per_sample")}
    for d in ("fp16", "bf16"):
        rs = by[d]
        ratio = lambda k: (round(mean(f32, k) / mean(rs, k), 3) if mean(rs, k) > 0 else None)
        arm[d] = {
            "ps_bytes_fp32_over_this": ratio("ps_bytes_per_sample"),
            "network_bytes_fp32_over_this": ratio("network_bytes_per_sample"),
            "hot_sync_bytes_fp32_over_this": ratio("hot_sync_bytes_per_sample"),
            "samples_per_sec_median_over_fp32": round(
                statistics.median(r["samples_per_sec"] for r in rs)
                / statistics.median(r["samples_per_sec"] for r in f32), 3),
            "auc_mean_minus_fp32": round(mean(rs, "auc") - mean(f32, "auc"), 5)}
    out["hot_rows_" + hot] = arm
print(json.dumps(out))
PY
