#!/usr/bin/env bash
# Chaos soak of a local cluster (tests/soak/chaos_soak.py does the work; see its header).
#   tests/soak/chaos_soak.sh [--build-dir build] [--seconds 600] [--seed N] [--keep]
# SOAK_SECONDS and SOAK_SEED in the environment set the defaults of --seconds and --seed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec python3 -B "$here/chaos_soak.py" "$@"
