#!/bin/bash
# gpu_bundle.sh [BUILD_DIR] : packs what bench/gpu_check.sh runs into .bundle/gpu.tgz (git-ignored)
# for the GPU machine: cuda_test, dense_test, dlrm and gather_bench with the shared libraries they need
# (/work/shared/tools/device-bundle.sh). The unpacked bundle is larger than the 64 MiB a device
# call carries (OpenBLAS alone is 35 MB), the archive is not. Then, in one device call:
#   run(command="mkdir -p /tmp/b && tar xzf .bundle/gpu.tgz -C /tmp/b &&
#                bash bench/gpu_check.sh /tmp/b/gpu", carry=[".bundle"], timeout_s=540)
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
for b in tests/cuda_test tests/dense_test bin/dlrm bin/gather_bench; do
  [[ -x "$build/$b" ]] || { echo "gpu_bundle: $build/$b missing (a CUDA build: make build)" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
bash /work/shared/tools/device-bundle.sh "$stage/gpu" "$build/tests/cuda_test" \
  "$build/tests/dense_test" "$build/bin/dlrm" "$build/bin/gather_bench" > /dev/null
mkdir -p .bundle
tar czf .bundle/gpu.tgz -C "$stage" gpu
ls -l .bundle/gpu.tgz | awk '{print "gpu_bundle: .bundle/gpu.tgz, " $5 " bytes"}'
