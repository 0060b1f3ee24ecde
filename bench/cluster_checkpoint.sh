#!/usr/bin/env bash
# Training stall per checkpoint of a cluster job against the write it does not wait for
# (docs/BENCHMARKS.md "Checkpoints"), at the issue's size: `dlrm local` with 2 parameter servers
# and 2 workers trains kaggle-shape tables capped at 1,000,000 rows (dim 16, row-wise Adagrad,
# no hot rows, so every row lives on the servers) on 400,000 generated samples (Zipf 1.05),
# batch 4096, one epoch, with a checkpoint every 20 steps (full_every 4) and the final one.
# Rank 0 logs each checkpoint: step, full or incremental, bytes, how long training waited for
# the previous checkpoint's write to finish, how long it waited for the cut (drain, barriers, the
# servers' snapshots, dense.bin) and how long the write took.
# Prints one JSON line: every checkpoint, and the training stall per checkpoint (mean wait for the
# previous write + mean cut) over the mean full write (stall_over_full_write), with its parts
# (previous_write_wait_s_mean, cut_s_mean, full_write_s_mean, cut_over_full_write). Exits 1 when
# rank 0's log holds no checkpoint line (the log format changed, or no checkpoint was taken).
#   bench/cluster_checkpoint.sh [BUILD_DIR] [SAMPLES]
set -euo pipefail
build=$(realpath "${1:-build}")
samples=${2:-400000}
bin="$build/bin"
work=$(mktemp -d /tmp/dlrm-cluster-checkpoint-XXXXXX)
trap 'rm -rf "$work"; pkill -P $$ 2>/dev/null || true' EXIT
"$bin/dlrm" gen-data --out "$work/train.bin" --format binary --rows "$samples" \
  --max-rows 1000000 --zipf 1.05 --seed 7 >/dev/null 2>&1
cat >"$work/job.yaml" <<EOF
name: cluster-checkpoint
model: {dense_features: 13, bottom_mlp: [512, 256, 64, 16], top_mlp: [512, 256, 1],
        embedding_dim: 16, pooling: sum}
tables:
  cardinalities: [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                  3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                  142572]
  max_rows: 1000000
optimizer:
  dense: {type: adam, learning_rate: 0.001}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
training: {batch_size: 4096, epochs: 1, seed: 42, staleness: 1, hot_budget: 0}
data: {train: [$work/train.bin], eval_fraction: 0.05}
checkpoint: {dir: $work/ckpt, every_steps: 20, keep_last: 10, full_every: 4}
EOF
"$bin/dlrm" local -c "$work/job.yaml" --ps 2 --workers 2 --no-progress --worker-threads 1 \
  --data-dir "$work/cluster" --metrics-out "$work/metrics.json" >"$work/local.log" 2>&1 \
  || { tail -20 "$work/local.log" >&2; exit 1; }
python3 - "$work" <<'EOF'
import json, re, sys
work = sys.argv[1]
rows = []
# worker/cluster_checkpointer.cc: "checkpoint DIR: step S, full|incremental on P, B bytes;
# training waited W s for the previous write and C s for the cut, the write took T s"
line_re = re.compile(r"step (\d+), (full|incremental)\b.*?, (\d+) bytes; training waited "
                     r"([0-9.e+-]+) s for the previous write and ([0-9.e+-]+) s for the cut, "
                     r"the write took ([0-9.e+-]+) s")
for name in ("worker-0", "worker-1"):
    for line in open(f"{work}/cluster/logs/{name}.log"):
        m = line_re.search(line)
        if m:
            rows.append({"step": int(m.group(1)), "kind": m.group(2), "bytes": int(m.group(3)),
                         "previous_write_wait_s": float(m.group(4)), "cut_s": float(m.group(5)),
                         "write_s": float(m.group(6))})
full = [r for r in rows if r["kind"] == "full"]
if not rows or not full:
    seen = [l.strip() for n in ("worker-0", "worker-1")
            for l in open(f"{work}/cluster/logs/{n}.log") if "checkpoint" in l][-3:]
    sys.exit(f"cluster_checkpoint: FAILED: no {'full ' if rows else ''}checkpoint line of the "
             "expected form in the workers' logs (the log format changed, or no checkpoint was "
             "taken); their last lines naming a checkpoint:\n  " + "\n  ".join(seen or ["(none)"]))
mean = lambda xs: sum(xs) / len(xs)
wait = mean([r["previous_write_wait_s"] for r in rows])
cut = mean([r["cut_s"] for r in rows])
full_write = mean([r["write_s"] for r in full])
if full_write <= 0:
    sys.exit("cluster_checkpoint: the full writes took no measurable time")
metrics = json.load(open(f"{work}/metrics.json"))
print(json.dumps({"bench": "cluster_checkpoint", "checkpoints": rows,
                  "previous_write_wait_s_mean": round(wait, 6), "cut_s_mean": round(cut, 3),
                  "full_write_s_mean": round(full_write, 3),
                  "stall_over_full_write": round((wait + cut) / full_write, 3),
                  "cut_over_full_write": round(cut / full_write, 3),
                  "auc": metrics.get("auc"), "samples_per_sec": metrics.get("samples_per_sec")}))
EOF
