#!/usr/bin/env bash
# The demo behind `make demo`: generate Criteo-like data with a planted signal, convert it to the
# binary format, and train the demo job on a local cluster (a coordinator, 2 parameter servers
# and 2 workers as processes on loopback), printing progress and the final AUC.
#   examples/demo.sh BUILD_DIR DEMO_DIR
set -euo pipefail
build=${1:-build}
demo=${2:-$build/demo}
dlrm="$build/bin/dlrm"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$demo"

if [ ! -f "$demo/train.bin" ]; then
  echo "== generating 400,000 samples of synthetic Criteo data (Zipf ids, planted signal)"
  "$dlrm" gen-data --out "$demo/train.tsv" --rows 400000 --max-rows 100000 --seed 7
  echo "== converting to the binary format"
  "$dlrm" convert --out "$demo/train.bin" "$demo/train.tsv"
fi
cp "$here/demo-job.yaml" "$demo/job.yaml"

echo "== training on a local cluster (dlrm local --config $demo/job.yaml --ps 2 --workers 2)"
"$dlrm" local --config "$demo/job.yaml" --ps 2 --workers 2 --metrics-out "$demo/metrics.json"
echo "== metrics written to $demo/metrics.json:"
cat "$demo/metrics.json"
