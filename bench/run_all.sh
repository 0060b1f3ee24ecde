#!/usr/bin/env bash
# `make bench`: every benchmark, one JSON object per line (docs/BENCHMARKS.md explains each).
# Takes about 10 minutes on a 2-core machine and needs about 3 GB of memory.
#   bench/run_all.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
bin="$build/bin"
run() {
  echo "== $*" >&2
  "$@"
}
run "$bin/dlrm" bench --shape kaggle-shape
run "$bin/dlrm" bench --shape model1 --steps 5 --rounds 2
run "$bin/ps_lookup_bench" --dedup 0   # the issue's request shape: 2048 x 26 ids
run "$bin/ps_lookup_bench"             # deduplicated, as the trainer sends them
run "$bin/pipeline_bench"
run "$bin/hot_traffic_bench"
run "$bin/checkpoint_bench"
run "$(dirname "$0")/recovery_bench.sh" "$build"
run "$(dirname "$0")/startup_time.sh" "$build"
run "$(dirname "$0")/cluster_checkpoint.sh" "$build"
run "$(dirname "$0")/local_vs_train.sh" "$build"
run "$(dirname "$0")/row_memory.sh" "$build" 1000000 16
# The GPU tables' host layout of a batch's bags (host code: runs without a GPU).
run "$bin/fuse_bags_bench" --shape kaggle-shape --batch-size 16384
run "$bin/fuse_bags_bench" --shape model1 --batch-size 2048
run "$bin/fuse_bags_bench" --shape mlperf-dcnv2 --batch-size 16384
