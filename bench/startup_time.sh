#!/usr/bin/env bash
# Start-up time of the shipped binary: `dlrm --help` as built (cuBLAS opened only when a CUDA
# backend starts, dense/cuda/cublas_loader.h) against the same binary with cuBLAS loaded at start
# (LD_PRELOAD of libcublas: what linking it did), alternated, RUNS times each. Prints JSON with the
# medians and their ratio. cuBLAS is looked for under CUDA_HOME (default /usr/local/cuda); on a
# machine without it (CPU only) there is nothing to compare: it says it is skipped, prints no
# JSON, and exits 0 (so `make bench` goes on).
#   bench/startup_time.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-10}
cuda=${CUDA_HOME:-/usr/local/cuda}
cublas=$(ls "$cuda"/lib*/libcublas.so.[0-9]* 2>/dev/null | head -1 || true)
if [[ -z "$cublas" ]]; then
  echo "startup_time: skipped: no libcublas under $cuda (a CPU-only machine has no cuBLAS to" \
    "load at start)" >&2
  exit 0
fi
python3 - "$build/bin/dlrm" "$cublas" "$runs" <<'PY'
import json, os, statistics, subprocess, sys, time
dlrm, cublas, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def once(env):
    t = time.perf_counter()
    subprocess.run([dlrm, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, check=True)
    return time.perf_counter() - t
plain, preloaded = [], []
with_cublas = dict(os.environ, LD_PRELOAD=cublas)
for _ in range(runs):
    plain.append(once(dict(os.environ)))
    preloaded.append(once(with_cublas))
a, b = statistics.median(plain), statistics.median(preloaded)
print(json.dumps({"bench": "startup", "runs": runs, "help_s_median": round(a, 3),
                  "help_with_cublas_at_start_s_median": round(b, 3),
                  "cublas_at_start_over_as_built": round(b / a, 2), "cublas": cublas}))
PY
