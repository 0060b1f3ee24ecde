#!/usr/bin/env bash
# make demo's job (examples/demo-job.yaml on `dlrm local --ps 2 --workers 2`) seven ways,
# interleaved round by round (each round in another order): the demo's hot_budget (auto, the
# planner's choice), a fixed `hot_budget: 4MiB`, --no-hot-rows, the demo's hot_budget with
# --sync-hot-exchange (the hot rows' exchange on the compute thread), the demo with
# --sync-dense-allreduce (the dense allreduce after the backward, not during it), and the demo
# with `hot_sync_dtype: fp8` (the hot rows' gradients in FP8 with a scale a row), and the demo with
# --ring-collectives (every collective around Gloo's ring, no direct exchange).
# One JSON line per run (samples/s, AUC, hot-set size, bytes per sample by purpose as the job
# counted them), then one line of medians and ratios. docs/BENCHMARKS.md, "Hot rows on loopback".
#   bench/hot_rows_demo.sh [BUILD_DIR] [ROUNDS]      (default: build, 3)
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
dlrm="$build/bin/dlrm"
work=$(mktemp -d /tmp/dlrm-hot-demo-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$dlrm" gen-data --out "$work/train.tsv" --rows 400000 --max-rows 100000 --seed 7 >/dev/null
"$dlrm" convert --out "$work/train.bin" "$work/train.tsv" >/dev/null
cp "$here/examples/demo-job.yaml" "$work/job.yaml"
sed 's/^\(  hot_budget:\).*/\1 4MiB/' "$work/job.yaml" >"$work/job_4mib.yaml"
sed 's/^\(  hot_budget:.*\)$/\1\n  hot_sync_dtype: fp8/' "$work/job.yaml" >"$work/job_fp8.yaml"
grep -q '^  hot_sync_dtype: fp8$' "$work/job_fp8.yaml"
variants=("demo|job.yaml|" "4mib|job_4mib.yaml|" "off|job.yaml|--no-hot-rows"
  "sync|job.yaml|--sync-hot-exchange" "syncdense|job.yaml|--sync-dense-allreduce"
  "fp8|job_fp8.yaml|" "ring|job.yaml|--ring-collectives")
for ((r = 1; r <= rounds; r++)); do
  # Each round starts one variant later: the first runs of a round were the slowest here.
  for ((v = 0; v < ${#variants[@]}; v++)); do
    run=${variants[$(((v + r - 1) % ${#variants[@]}))]}
    IFS='|' read -r name config flag <<<"$run"
    rm -f "$work/m.json"
    # shellcheck disable=SC2086
    "$dlrm" local --config "$work/$config" --ps 2 --workers 2 $flag --no-progress \
      --metrics-out "$work/m.json" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    python3 - "$work/m.json" "$name" "$r" <<'PY' | tee -a "$work/runs.jsonl"
import json, sys
m, name, r = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
part = lambda p: round(m.get(f"network_{p}_bytes_per_sample", 0), 1)
print(json.dumps({"bench": "hot_rows_demo", "hot": name, "round": r,
                  "samples_per_sec": round(m["samples_per_sec"]), "auc": round(m["auc"], 5),
                  "hot_rows": m.get("hot_rows", 0), "hot_migrations": m.get("hot_migrations", 0),
                  "network_bytes_per_sample": round(m["network_bytes_per_sample"], 1),
                  "ps": round(part("ps_lookup") + part("ps_push"), 1), "hot_sync": part("hot_sync"),
                  "hot_migration": part("hot_migration"),
                  "dense_allreduce": part("dense_allreduce"), "control": part("control")}))
PY
  done
done
python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda h, k: statistics.median(r[k] for r in runs if r["hot"] == h)
out = {"bench": "hot_rows_demo_summary", "rounds": max(r["round"] for r in runs)}
for h in ("demo", "4mib", "sync", "syncdense", "fp8", "ring"):
    out[h] = {"samples_per_sec_ratio_on_over_off": round(med(h, "samples_per_sec") / med("off", "samples_per_sec"), 3),
              "network_bytes_ratio_off_over_on": round(med("off", "network_bytes_per_sample") / med(h, "network_bytes_per_sample"), 3),
              "auc_on_minus_off": round(med(h, "auc") - med("off", "auc"), 5)}
out["demo_over_sync_samples_per_sec"] = round(
    med("demo", "samples_per_sec") / med("sync", "samples_per_sec"), 3)
out["demo_over_syncdense_samples_per_sec"] = round(
    med("demo", "samples_per_sec") / med("syncdense", "samples_per_sec"), 3)
out["demo_over_ring_samples_per_sec"] = round(
    med("demo", "samples_per_sec") / med("ring", "samples_per_sec"), 3)
out["fp8_over_demo_samples_per_sec"] = round(
    med("fp8", "samples_per_sec") / med("demo", "samples_per_sec"), 3)
print(json.dumps(out))
PY
