#!/bin/bash
# gpu_profile.sh BUNDLE_DIR OUT_CSV SHAPE BATCH [dlrm bench flags...] : the GPU time of each kernel
# of one training step, by Nsight Compute (ncu, which times each kernel alone, serialised), on the
# GPU machine. Runs `dlrm bench --device cuda --steps 2 --rounds 1` under ncu, keeps the raw CSV in
# OUT_CSV, and prints, for the median full step (a step runs from one pooled gather to the last
# sparse-optimizer kernel before the next), the microseconds of each kernel name and their sum.
set -euo pipefail
bundle=${1:?usage: gpu_profile.sh BUNDLE_DIR OUT_CSV SHAPE BATCH [flags...]}
csv=$2 shape=$3 batch=$4
shift 4
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
"$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$csv" \
  "$bundle/bin/dlrm" bench --device cuda --shape "$shape" --batch-size "$batch" --steps 2 \
  --rounds 1 "$@" > /dev/null
python3 - "$csv" "$shape" "$batch" <<'PY'
import csv, sys, statistics, collections
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = name.split("<")[0].split("(")[0].split("::")[-1]
    return name.removeprefix("void ")[:70]
ks = [(short(r["Kernel Name"]), float(r["Metric Value"].replace(",", ""))
       * scale[r["Metric Unit"]]) for r in rows]
starts = [i for i, (n, _) in enumerate(ks) if "PooledGather" in n or "HotColdGather" in n]
steps = []
for a, b in zip(starts, starts[1:] + [len(ks)]):
    seg = ks[a:b]
    last = max((i for i, (n, _) in enumerate(seg) if "Optimizer" in n and "Sparse" in n), default=len(seg) - 1)
    steps.append(seg[: last + 1])
if not steps:
    print("no step found among", len(ks), "kernels"); sys.exit(1)
totals = [sum(t for _, t in s) for s in steps]
med = steps[sorted(range(len(steps)), key=lambda i: totals[i])[len(steps) // 2]]
agg = collections.OrderedDict()
for n, t in med:
    c, s = agg.get(n, (0, 0.0)); agg[n] = (c + 1, s + t)
print(f"profile {sys.argv[2]} batch {sys.argv[3]}: {len(ks)} kernels, {len(steps)} steps, "
      f"step kernel sums (us) {[round(t) for t in totals]}")
for n, (c, s) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"  {s:9.1f} us  x{c:<3d} {n}")
PY
