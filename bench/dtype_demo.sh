#!/usr/bin/env bash
# make demo's job with tables.dtype fp32, fp16 and bf16 (the only change), hot rows off
# (--no-hot-rows) and on (the job's 4 MiB), ROUNDS rounds interleaved; one JSON line per run:
# samples/s, held-out AUC and the job's counted bytes per sample (docs/BENCHMARKS.md,
# "Half-precision rows"). Needs make demo's data (BUILD_DIR/demo/train.bin).
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
  sed "s/^  max_rows: 100000$/  max_rows: 100000\n  dtype: $d/" "$here/../examples/demo-job.yaml" \
    > "$work/job_$d.yaml"
  grep -q "dtype: $d" "$work/job_$d.yaml" || { echo "dtype_demo: cannot set dtype" >&2; exit 1; }
done
for r in $(seq "$rounds"); do
  for flags in --no-hot-rows ""; do
    for d in fp32 fp16 bf16; do
      # shellcheck disable=SC2086  # flags is one word or none
      "$build/bin/dlrm" local --config "$work/job_$d.yaml" --ps 2 --workers 2 $flags \
        --no-progress --metrics-out "$work/m.json" > "$work/log" 2>&1 ||
        { echo "dtype_demo: $d $flags failed" >&2; tail -5 "$work/log" >&2; exit 1; }
      python3 - "$work/m.json" "$r" "$d" "$flags" <<'PY'
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
