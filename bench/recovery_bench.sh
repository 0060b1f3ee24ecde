#!/usr/bin/env bash
# Recovery time after a `kill -9` of a parameter server, broken down (docs/BENCHMARKS.md).
#
# `dlrm local` (2 parameter servers, 2 workers, the default 14 s lease) runs a 2-epoch job with a
# checkpoint every 20 steps; once the first checkpoint is committed one parameter server is
# killed. `dlrm local` restarts it, as Kubernetes would restart the pod. From the job's recovery
# record (dlrmctl -o json) and rank 0's log it prints one JSON line:
#   detect_s    kill -> job RECOVERING (the lease running out, or a peer's report)
#   restart_s   RECOVERING -> RUNNING again (replacement registered, survivors heard from)
#   load_s      RUNNING again -> rank 0 has rolled back (rows and dense state loaded)
#   total_s     kill -> rolled back
#   steps_lost  steps trained after the checkpoint the job rolled back to: rank 0's step when
#               its run ended ("run ended at step N" in its log) minus the step it resumed at
#   step_at_loss  the coordinator's latest progress report before the loss (reports lag: a
#               fast job may be well past it)
# and the run's AUC against an undisturbed run of the same job in the same invocation, whose
# checkpoints give the training stall per checkpoint against the write it does not wait for:
# stall_over_write = (wait for the previous write + cut) / write, summed over its checkpoints,
# with the parts as previous_write_wait_s_mean, cut_s_mean, write_s_mean and cut_over_write
# (small tables here: 26 tables capped at 1000 rows).
#   bench/recovery_bench.sh [BUILD_DIR]
set -euo pipefail
build=$(realpath "${1:-build}")
bin="$build/bin"
work=$(mktemp -d /tmp/dlrm-recovery-bench-XXXXXX)
trap 'rm -rf "$work"; pkill -P $$ 2>/dev/null || true' EXIT
cd "$work"
"$bin/dlrm" gen-data --out train.tsv --rows 64000 --max-rows 1000 --seed 21 >/dev/null 2>&1
spec() {
  cat > "$1.yaml" <<EOF
name: $1
model: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}
tables:
  cardinalities: [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                  3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                  142572]
  max_rows: 1000
optimizer:
  dense: {type: adam, learning_rate: 0.003}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
training: {batch_size: 512, epochs: 2, seed: 11, staleness: 0, hot_budget: 0}
data: {train: [$work/train.tsv], eval_fraction: 0.1}
checkpoint: {dir: $work/$1-ckpt, every_steps: 20, keep_last: 2}
EOF
}
local_args() {
  echo local -c "$1.yaml" --ps 2 --workers 2 --no-progress --worker-threads 1 \
    --data-dir "$work/$1-cluster" --metrics-out "$work/$1.json"
}

spec undisturbed
"$bin/dlrm" $(local_args undisturbed) >/dev/null 2>&1

spec killed
"$bin/dlrm" $(local_args killed) >/dev/null 2>"$work/killed.err" &
local_pid=$!
# Two committed checkpoints and a second more: mid-epoch, with progress reported since.
until [ "$(ls "$work"/killed-ckpt/*/MANIFEST.json 2>/dev/null | wc -l)" -ge 2 ]; do sleep 0.02; done
sleep 1
victim=$(pgrep -P "$local_pid" -f " ps --coordinator" | head -1)
kill_ms=$(date +%s%3N)
kill -9 "$victim"
address="127.0.0.1:$(cat "$work/killed-cluster/coordinator.port")"
job_json="$work/job.json"
# Poll the job until dlrm local ends; keep the last answer (the recovery record stays in it).
while kill -0 "$local_pid" 2>/dev/null; do
  "$bin/dlrmctl" --coordinator "$address" --tls-dir "$work/killed-cluster/tls/admin" \
    status job-1 -o json >"$job_json.tmp" 2>/dev/null &&
    mv "$job_json.tmp" "$job_json"
  sleep 0.5
done
wait "$local_pid"

python3 - "$job_json" "$kill_ms" "$work" <<'EOF'
import json, re, sys, datetime
job = json.load(open(sys.argv[1]))
kill_ms = int(sys.argv[2])
work = sys.argv[3]
rec = job["recovery_history"][0]
started, resumed = int(rec["started_ms"]), int(rec["resumed_ms"])
# Rank 0 logs "resumed from <dir> at step <n>" once the rows and dense state are loaded; the log's
# clock is local time of day in milliseconds.
day = datetime.datetime.fromtimestamp(kill_ms / 1000).replace(hour=0, minute=0, second=0,
                                                            microsecond=0)
loaded_ms, resumed_step, ended_step = None, None, None
for name in ("worker-0", "worker-1"):
    for line in open(f"{work}/killed-cluster/logs/{name}.log"):
        m = re.search(r"rank 0: run ended at step (\d+)", line)
        if m and ended_step is None:
            ended_step = int(m.group(1))  # the run the loss ended
        m = re.match(r"I (\d+):(\d+):(\d+)\.(\d+) .*rank 0: resumed from .* at step (\d+)", line)
        if m:
            h, mi, s, ms, step = map(int, m.groups())
            t = day + datetime.timedelta(hours=h, minutes=mi, seconds=s, milliseconds=ms)
            loaded_ms, resumed_step = int(t.timestamp() * 1000), step
# The undisturbed run's checkpoints: rank 0 logs how long training waited for the previous
# write and for each cut, and how long the parameter servers' background write took.
waits, cuts, writes = [], [], []
for name in ("worker-0", "worker-1"):
    for line in open(f"{work}/undisturbed-cluster/logs/{name}.log"):
        m = re.search(r"training waited ([0-9.e-]+) s for the previous write and ([0-9.e-]+) s "
                      r"for the cut, the write took ([0-9.e-]+) s", line)
        if m:
            waits.append(float(m.group(1)))
            cuts.append(float(m.group(2)))
            writes.append(float(m.group(3)))
undisturbed = json.load(open(f"{work}/undisturbed.json"))
killed = json.load(open(f"{work}/killed.json"))
print(json.dumps({
    "bench": "recovery_kill9_ps",
    "lease_s": 14,
    "detect_s": round((started - kill_ms) / 1000, 2),
    "restart_s": round((resumed - started) / 1000, 2),
    "load_s": round((loaded_ms - resumed) / 1000, 2) if loaded_ms else None,
    "total_s": round((loaded_ms - kill_ms) / 1000, 2) if loaded_ms else None,
    "step_at_loss": int(rec.get("step_at_loss", 0)),
    "resumed_step": resumed_step,
    "steps_lost": ended_step - resumed_step if None not in (ended_step, resumed_step) else None,
    "auc": killed["auc"],
    "auc_undisturbed": undisturbed["auc"],
    "checkpoints": len(cuts),
    "previous_write_wait_s_mean": round(sum(waits) / len(waits), 3) if waits else None,
    "cut_s_mean": round(sum(cuts) / len(cuts), 3) if cuts else None,
    "write_s_mean": round(sum(writes) / len(writes), 3) if writes else None,
    "stall_over_write": round((sum(waits) + sum(cuts)) / sum(writes), 3)
    if writes and sum(writes) > 0 else None,
    "cut_over_write": round(sum(cuts) / sum(writes), 3) if writes and sum(writes) > 0 else None,
    "reason": rec["reason"],
}))
EOF
