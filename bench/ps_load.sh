#!/usr/bin/env bash
# One parameter server under load, with mutual TLS and then in plaintext (issue 11;
# docs/BENCHMARKS.md "Parameter server under load").
#
# Makes a CA and certificates (`dlrm certs --host 127.0.0.1`), starts a `dlrm coordinator` and
# one `dlrm ps` on loopback with TLS, runs ps_load_bench against the PS (--clients clients, each
# with its own connection, presenting the worker certificate, for --seconds; the bench submits
# its job to the coordinator as the admin and its clients join it as the job's workers, so every
# call carries the coordinator's grants as a worker's does), stops both, starts
# them again with --insecure (plaintext) and runs the same load. Prints the two JSON objects of
# ps_load_bench and a last JSON line: the ratios TLS / plaintext of calls_per_sec, p50 and p99,
# and whether the PS's RSS stayed flat (end within 10% of middle) in each run. Exits 1 when a call
# of either run failed.
#   bench/ps_load.sh [BUILD_DIR] [--seconds 60] [--clients 64] [ps_load_bench flags...]
set -euo pipefail
build=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  build=$1
  shift
fi
build=$(realpath "$build")
bin="$build/bin"
seconds=60
clients=64
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done
for b in dlrm ps_load_bench; do
  if [ ! -x "$bin/$b" ]; then
    echo "ps_load.sh: no $bin/$b (build the targets dlrm and ps_load_bench)" >&2
    exit 1
  fi
done

work=$(mktemp -d /tmp/dlrm-ps-load-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

"$bin/dlrm" certs --out "$work/certs" --host 127.0.0.1 >/dev/null 2>&1

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# run_once tls|plain: a fresh coordinator and PS, the load, both stopped; prints the bench's JSON.
run_once() {
  local mode=$1 dir="$work/$1"
  mkdir -p "$dir"
  local coord_sec=(--insecure) ps_sec=(--insecure) client_sec=(--insecure)
  if [ "$mode" = tls ]; then
    coord_sec=(--tls-dir "$work/certs/coordinator")
    ps_sec=(--tls-dir "$work/certs/ps")
    client_sec=(--tls-dir "$work/certs/worker" --admin-tls-dir "$work/certs/admin")
  fi
  "$bin/dlrm" coordinator --listen 127.0.0.1:0 --data-dir "$dir/coordinator" \
    --port-file "$dir/coordinator.port" --metrics-port -1 "${coord_sec[@]}" \
    >"$dir/coordinator.log" 2>&1 &
  local coord_pid=$!
  pids+=("$coord_pid")
  for _ in $(seq 300); do [ -s "$dir/coordinator.port" ] && break; sleep 0.1; done
  [ -s "$dir/coordinator.port" ] || { echo "ps_load.sh: coordinator did not start" >&2; exit 1; }
  local ps_port
  ps_port=$(free_port)
  "$bin/dlrm" ps --coordinator "127.0.0.1:$(cat "$dir/coordinator.port")" \
    --listen "127.0.0.1:$ps_port" --data-dir "$dir/ps" --metrics-port -1 "${ps_sec[@]}" \
    >"$dir/ps.log" 2>&1 &
  local ps_pid=$!
  pids+=("$ps_pid")
  local rc=0
  # ps_load_bench waits (up to 60 s) for the PS to answer its LoadJob.
  # In the background and waited for, so that a signal to this script ends it at once (trap).
  "$bin/ps_load_bench" --coordinator "127.0.0.1:$(cat "$dir/coordinator.port")" \
    --ps "127.0.0.1:$ps_port" --ps-pid "$ps_pid" --clients "$clients" \
    --seconds "$seconds" "${client_sec[@]}" "${extra[@]}" >"$dir/result.json" \
    2>"$dir/bench.err" &
  local bench_pid=$!
  pids+=("$bench_pid")
  wait "$bench_pid" || rc=$?
  kill "$ps_pid" "$coord_pid" 2>/dev/null || true
  wait "$ps_pid" 2>/dev/null || true
  wait "$coord_pid" 2>/dev/null || true
  pids=()
  if [ ! -s "$dir/result.json" ]; then
    echo "ps_load.sh: ps_load_bench ($mode) failed (exit $rc):" >&2
    cat "$dir/bench.err" >&2
    tail -20 "$dir/ps.log" >&2
    exit 1
  fi
  [ "$rc" = 0 ] || echo "ps_load.sh: the $mode run had errors" >&2
  # The first errors of each kind, connection errors of the untimed first calls included.
  grep "^ps_load_bench:" "$dir/bench.err" | sed "s/^/[$mode] /" >&2 || true
  cat "$dir/result.json"
}

run_once tls
run_once plain

python3 - "$work/tls/result.json" "$work/plain/result.json" <<'EOF'
import json, sys
tls, plain = (json.load(open(p)) for p in sys.argv[1:3])
def ratio(key):
    return round(tls[key] / plain[key], 3) if plain[key] else None
def flat(run):
    rss = run["rss_mib"]
    if rss["middle"] is None or rss["end"] is None:
        return None
    return abs(rss["end"] - rss["middle"]) <= 0.10 * rss["middle"]
print(json.dumps({
    "benchmark": "ps_load_tls_over_plain",
    "clients": tls["clients"],
    "seconds": tls["seconds"],
    "errors": {"tls": tls["errors"], "plain": plain["errors"]},
    "connect_errors": {"tls": tls["connect_errors"], "plain": plain["connect_errors"]},
    "tls_over_plain": {k: ratio(k) for k in ("calls_per_sec", "p50_ms", "p99_ms")},
    "rss_flat": {"tls": flat(tls), "plain": flat(plain)},
    "rss_end_over_middle": {
        name: (round(run["rss_mib"]["end"] / run["rss_mib"]["middle"], 3)
               if run["rss_mib"]["middle"] else None)
        for name, run in (("tls", tls), ("plain", plain))},
}))
# A failed call makes the figures wrong: say so in the exit status (ctest ps_load_smoke).
sys.exit(1 if any(run["errors"] or run["connect_errors"] for run in (tls, plain)) else 0)
EOF
