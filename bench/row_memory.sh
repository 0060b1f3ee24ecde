#!/bin/bash
# Stored bytes per row by tables.dtype, each dtype in its own process (bench/row_memory_bench.cc),
# then the fp32/half ratios of one run. Usage: bench/row_memory.sh [BUILD_DIR] [ROWS] [DIM]
set -euo pipefail
build=${1:-build}
rows=${2:-2000000}
dim=${3:-16}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for tier in memory rocksdb; do
  for dtype in fp32 fp16 bf16; do
    "$build/bin/row_memory_bench" --dtype "$dtype" --rows "$rows" --dim "$dim" --tier "$tier" |
      tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
by = {(r["tier"], r["dtype"]): r for r in runs}
summary = {"bench": "row_memory_summary"}
for half in ("fp16", "bf16"):
    m32, m16 = by[("memory", "fp32")], by[("memory", half)]
    summary[f"rss_rows_per_gib_ratio_{half}_over_fp32"] = round(
        m32["rss_bytes_per_row"] / m16["rss_bytes_per_row"], 3)
    summary[f"sst_bytes_ratio_fp32_over_{half}"] = round(
        by[("rocksdb", "fp32")]["sst_bytes_per_row"] / by[("rocksdb", half)]["sst_bytes_per_row"], 3)
print(json.dumps(summary))
PY
