#!/usr/bin/env bash
# `dlrm local` with 1 parameter server and 1 worker against `dlrm train` on kaggle-shape
# (DESIGN.md "Benchmark shapes": 26 tables at the Criteo Kaggle cardinalities, dim 16, bottom MLP
# 13-512-256-64-16, top MLP 367-512-256-1, batch 2048) on generated data, measured in one run.
# Prints one JSON object: both runs' samples/s and their ratio (target >= 0.5).
#
#   bench/local_vs_train.sh [BUILD_DIR] [ROWS] [EPOCHS]
set -euo pipefail
build=${1:-build}
rows=${2:-200000}
epochs=${3:-1}
dlrm="$build/bin/dlrm"
work=$(mktemp -d /tmp/dlrm-bench-local-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$dlrm" gen-data --out "$work/train.bin" --format binary --rows "$rows" --seed 7 2>/dev/null
cat > "$work/job.yaml" <<YAML
name: kaggle-shape-bench
model:
  dense_features: 13
  bottom_mlp: [512, 256, 64, 16]
  top_mlp: [512, 256, 1]
  embedding_dim: 16
  pooling: sum
tables:
  cardinalities: [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                  3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                  142572]
optimizer:
  dense: {type: adam, learning_rate: 0.001}
  sparse: {type: rowwise_adagrad, learning_rate: 0.05}
training: {batch_size: 2048, epochs: $epochs, seed: 42, staleness: 1, device: cpu}
data: {train: [train.bin], eval_fraction: 0.05}
YAML

"$dlrm" train --config "$work/job.yaml" --metrics-out "$work/train.json" --no-progress \
  > "$work/train.out" 2> "$work/train.err"
"$dlrm" local --config "$work/job.yaml" --ps 1 --workers 1 --memory-budget 8GiB \
  --metrics-out "$work/local.json" --no-progress > "$work/local.out" 2> "$work/local.err"

python3 - "$work/train.json" "$work/local.json" "$rows" "$epochs" <<'PY'
import json, sys
train = json.load(open(sys.argv[1]))
local = json.load(open(sys.argv[2]))
print(json.dumps({
    "shape": "kaggle-shape", "rows": int(sys.argv[3]), "epochs": int(sys.argv[4]),
    "train_samples_per_sec": round(train["samples_per_sec"], 1),
    "local_samples_per_sec": round(local["samples_per_sec"], 1),
    "ratio": round(local["samples_per_sec"] / train["samples_per_sec"], 3),
    "train_auc": round(train["auc"], 4), "local_auc": round(local["auc"], 4),
}))
PY
