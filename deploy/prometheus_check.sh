#!/usr/bin/env bash
# Runs a real Prometheus against a `dlrm local --metrics` cluster (2 parameter servers, 2
# workers, a tiny job) through the repo's `dlrm-local` scrape job, and checks:
#   - the repo's dlrm-local targets, moved to the base port used here, are the ones dlrm local
#     printed;
#   - Prometheus sees every target up, loads and evaluates alerts.yml without errors, has no
#     alert pending or firing against the healthy cluster, and stores the coordinator's
#     dlrm_members (2 ps, 2 workers);
#   - `promtool check metrics` on each target's /metrics, `promtool check rules alerts.yml`,
#     `promtool test rules alerts_test.yml`;
#   - every dlrm_ metric and label that alerts.yml and the Grafana dashboard query is in those
#     scrapes, and docs/DEPLOY.md's metrics table lists exactly the exported metric families,
#     each with the type, the labels and the roles (coordinator, ps, worker) that serve it
#     (deploy/prometheus/check_names.py). The job writes checkpoints, so that rank 0's
#     dlrm_checkpoint* metrics are exported too.
#
#   deploy/prometheus_check.sh [BIN_DIR]    BIN_DIR holds dlrm (default: build/bin)
#   PROMETHEUS=, PROMTOOL=/path/to/binary pick the binaries (default: from PATH).
#
# Says SKIP and exits 0 when dlrm, prometheus, promtool or python3's yaml module is missing
# (Debian: apt-get install prometheus python3-yaml; deploy/install-deps.sh installs both).
# Everything listens on 127.0.0.1 on ports checked free; the cluster, Prometheus and the temp
# folder are removed on exit, also on Ctrl-C. Takes about 15 s. ctest runs it as
# prometheus_check (tests/deploy/CMakeLists.txt).
#
# Why a derived config: Debian's prometheus is built without Kubernetes service discovery, so it
# rejects deploy/prometheus/prometheus.yml (its `dlrm` job uses kubernetes_sd_configs). The check
# keeps only the repo's dlrm-local job as written, moves its ports from the repo's base (9100,
# the coordinator's) to a free base, and sets 1 s scrape and evaluation intervals.
#
# promtool check metrics exits 1 on a parse error and 3 on lint problems only (e.g. a counter
# without _total, a metric without HELP; promtool 2.42). A parse error, or a scrape that is empty
# or has no dlrm_ series, is a FAIL; lint problems are printed as WARN and do not fail the check.
# shellcheck disable=SC2317  # cleanup, derive_config, check_metrics, api: run via trap or run
set -euo pipefail
dlrm="${1:-$(dirname "$0")/../build/bin}/dlrm"
case "$dlrm" in /*) ;; *) dlrm="$(pwd)/$dlrm" ;; esac
cd "$(dirname "$0")/.."
repo="$(pwd)"
prometheus="$(command -v "${PROMETHEUS:-prometheus}" || true)"
promtool="$(command -v "${PROMTOOL:-promtool}" || true)"

skip() { echo "SKIP  prometheus check ($1)"; echo "0 passed, 0 failed"; exit 0; }
[ -x "$dlrm" ] || skip "no $dlrm"
[ -n "$prometheus" ] || skip "no prometheus: apt-get install prometheus"
[ -n "$promtool" ] || skip "no promtool: apt-get install prometheus"
python3 -c 'import yaml' 2>/dev/null || skip "python3 has no PyYAML: apt-get install python3-yaml"

tmp="$(mktemp -d)"
cluster_pid=""
prom_pid=""
# stop PID SIGNAL SECONDS: signal PID, wait for it, then SIGKILL it. dlrm local stops its
# children on SIGINT; were it SIGKILLed, they get SIGTERM (PR_SET_PDEATHSIG in local_cluster.cc).
stop() {
  local pid="$1" sig="$2" secs="$3" i
  kill -"$sig" "$pid" 2>/dev/null || return 0
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  [ -z "$prom_pid" ] || stop "$prom_pid" TERM 5
  [ -z "$cluster_pid" ] || stop "$cluster_pid" INT 10
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=deploy/check_lib.sh
. deploy/check_lib.sh
finish() {
  if [ "${lint_targets:-0}" -ne 0 ]; then
    echo "WARN  promtool check metrics found lint problems on $lint_targets target(s) (above)"
  fi
  echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit
}
# fatal WHAT FILE...: a step the rest depends on failed: FAIL with the files' tails, stop.
fatal() {
  local what="$1" f; shift
  echo "FAIL  $what"; failed=$((failed + 1))
  for f in "$@"; do [ -f "$f" ] && { echo "      -- $f"; tail -n 20 "$f" | sed 's/^/      /'; }; done
  finish
}

run "promtool check rules alerts.yml" "$promtool" check rules deploy/prometheus/alerts.yml
run "promtool test rules alerts_test.yml" "$promtool" test rules deploy/prometheus/alerts_test.yml

# The job: the tiny spec from DEPLOY.md's local-cluster example, 4000 rows.
mkdir -p "$tmp/job"
"$dlrm" gen-data --out "$tmp/job/train.tsv" --rows 4000 --max-rows 1000 --seed 3 \
  >"$tmp/gen.log" 2>&1 || fatal "dlrm gen-data" "$tmp/gen.log"
cat >"$tmp/job/job.yaml" <<'EOF'
name: prom-check
model: {dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}
tables:
  cardinalities: [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
  max_rows: 1000
training: {batch_size: 256, epochs: 1, seed: 5}
data: {train: [train.tsv], eval_fraction: 0.1}
checkpoint: {dir: ckpt, every_steps: 5}
EOF

# free_ports: "BASE PROM": BASE..BASE+4 (metrics of 1 coordinator, 2 ps, 2 workers) and PROM free
# on 127.0.0.1, below Linux's ephemeral range (32768-) so that port-0 listeners do not take them.
free_ports() {
  python3 - <<'EOF'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    base, prom = random.randrange(20000, 32000), random.randrange(20000, 32000)
    if all(free(p) for p in range(base, base + 5)) and prom not in range(base, base + 5) \
            and free(prom):
        print(base, prom)
        break
EOF
}

# Start the cluster in its own session (Ctrl-C reaches this script, whose trap stops the cluster);
# it prints `coordinator: HOST:PORT` on stdout once the job is done and it keeps running. Another
# process may take a port between the check and the bind: then retry with other ports.
started=0
for attempt in 1 2 3; do
  read -r base prom_port < <(free_ports)
  # A fresh folder each time: a coordinator started on an old one recovers the members of the
  # failed attempt, and the job then fails on their dead addresses.
  cluster_dir="$tmp/cluster-$attempt"
  : >"$tmp/cluster.out"
  setsid "$dlrm" local --config "$tmp/job/job.yaml" --ps 2 --workers 2 --metrics \
    --metrics-base-port "$base" --keep-running --no-progress --data-dir "$cluster_dir" \
    >"$tmp/cluster.out" 2>"$tmp/cluster.err" &
  cluster_pid=$!
  for ((i = 0; i < 600; i++)); do
    if grep -q '^coordinator: ' "$tmp/cluster.out"; then started=1; break; fi
    kill -0 "$cluster_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ "$started" = 1 ] && break
  stop "$cluster_pid" INT 10
  cluster_pid=""
  grep -q 'metrics endpoint cannot listen' "$tmp/cluster.err" || break
done
[ "$started" = 1 ] || fatal "dlrm local --metrics (2 ps, 2 workers) runs the job and stays up" \
  "$tmp/cluster.err" "$tmp/cluster.out" "$cluster_dir/logs/coordinator.log"
# dlrm local prints the job's summary on stdout only when the job succeeded.
summary="$(grep -v '^coordinator: ' "$tmp/cluster.out" | head -n 1)"
[ -n "$summary" ] || fatal "dlrm local --metrics (2 ps, 2 workers): the job succeeded" \
  "$tmp/cluster.err"
echo "PASS  dlrm local --metrics (2 ps, 2 workers) runs the job and stays up" \
  "($(grep '^coordinator: ' "$tmp/cluster.out"), metrics base port $base)"
echo "      $summary"
passed=$((passed + 1))

# The repo's dlrm-local job with its ports moved to $base, written as the whole config; the
# targets dlrm local printed go to targets.json for the checks below.
derive_config() {
  python3 - "$repo/deploy/prometheus/prometheus.yml" "$repo/deploy/prometheus/alerts.yml" \
    "$base" "$tmp/cluster.err" "$tmp/prometheus.yml" "$tmp/targets.json" <<'EOF'
import json, sys, yaml
repo_cfg, alerts, base, printed_log, out_cfg, out_targets = sys.argv[1:]
jobs = [j for j in yaml.safe_load(open(repo_cfg))["scrape_configs"]
        if j["job_name"] == "dlrm-local"]
if len(jobs) != 1:
    sys.exit(f"{repo_cfg}: {len(jobs)} jobs named dlrm-local, want 1")
job = jobs[0]
coord = [t for sc in job["static_configs"] if sc.get("labels", {}).get("component") == "coordinator"
         for t in sc["targets"]]
if len(coord) != 1:
    sys.exit(f"{repo_cfg}: dlrm-local has {len(coord)} coordinator targets, want 1")
repo_base = int(coord[0].rsplit(":", 1)[1])
for sc in job["static_configs"]:
    sc["targets"] = [f"{h}:{int(p) - repo_base + int(base)}"
                     for h, p in (t.rsplit(":", 1) for t in sc["targets"])]

lines = open(printed_log).read().splitlines()
head = "metrics: scrape targets (static_configs of a Prometheus job):"
if head not in lines:
    sys.exit(f"dlrm local printed no line {head!r}")
block = []
for line in lines[lines.index(head) + 1:]:
    if not line.startswith("  "):
        break
    block.append(line)
printed = yaml.safe_load("\n".join(block))

def by_component(static_configs):
    out = {}
    for sc in static_configs:
        out.setdefault(sc["labels"]["component"], []).extend(sc["targets"])
    return {c: sorted(t) for c, t in out.items()}
want, got = by_component(printed), by_component(job["static_configs"])
print(f"dlrm local printed: {want}")
print(f"repo dlrm-local job, base {repo_base} -> {base}: {got}")
if want != got:
    sys.exit("they differ")
yaml.safe_dump({"global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                           "evaluation_interval": "1s"},
                "rule_files": [alerts], "scrape_configs": [job]},
               open(out_cfg, "w"), sort_keys=False)
json.dump(want, open(out_targets, "w"))
EOF
}
SHOW=1 run "repo's dlrm-local targets (moved to base $base) are the ones dlrm local printed" \
  derive_config
[ -f "$tmp/targets.json" ] || finish
run "promtool check config (derived: dlrm-local job only)" \
  "$promtool" check config "$tmp/prometheus.yml"

# promtool check metrics on every target's /metrics.
check_metrics() {
  local component="$1" target="$2" rc=0
  python3 -c 'import sys, urllib.request
sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=5).read())' \
    "http://$target/metrics" >"$tmp/scrape" || return 1
  if ! grep -q '^# TYPE dlrm_' "$tmp/scrape"; then
    echo "no dlrm_ metric in the scrape ($(wc -l <"$tmp/scrape") lines)"; return 1
  fi
  echo "$(grep -c '^# TYPE ' "$tmp/scrape") metric families, $(grep -c '^[^#]' "$tmp/scrape") samples"
  cp "$tmp/scrape" "$tmp/scrapes/$component@$target.txt"
  "$promtool" check metrics <"$tmp/scrape" >"$tmp/lint" 2>&1 || rc=$?
  cat "$tmp/lint"
  if [ "$rc" = 3 ] && ! grep -q 'error while linting' "$tmp/lint"; then
    echo "WARN: lint problems only (above): not a failure"
    lint_targets=$((lint_targets + 1))
    return 0
  fi
  [ "$rc" = 0 ]
}
lint_targets=0
mkdir -p "$tmp/scrapes"
while read -r component target; do
  SHOW=1 run "promtool check metrics: $component $target" check_metrics "$component" "$target"
done < <(python3 -c 'import json, sys
for c, ts in json.load(open(sys.argv[1])).items():
    for t in ts: print(c, t)' "$tmp/targets.json")
names_ok() {
  local -a scrapes=()
  local f
  # ROLE=FILE: the role is the target's component (the file is COMPONENT@TARGET.txt).
  for f in "$tmp"/scrapes/*.txt; do scrapes+=(--scrape "$(basename "$f" | cut -d@ -f1)=$f"); done
  python3 deploy/prometheus/check_names.py "${scrapes[@]}"
}
SHOW=1 run "metrics that alerts.yml, the dashboard and DEPLOY.md name are the exported ones (DEPLOY.md: with their type, labels, roles)" \
  names_ok

# Prometheus itself.
"$prometheus" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!

# The HTTP API checks; MODE: targets | rules | alerts | members. Each polls for at most 30 s.
cat >"$tmp/api.py" <<'EOF'
import json, sys, time, urllib.request
mode, url, targets_file = sys.argv[1:]
want = json.load(open(targets_file))
deadline = time.time() + 30

def get(path):
    return json.load(urllib.request.urlopen(url + path, timeout=2))["data"]

def poll(step):
    last = None
    while True:
        try:
            done, last = step()
            if done:
                print(last)
                return
        except (OSError, ValueError, KeyError) as e:
            last = f"{url}: {e}"
        if time.time() > deadline:
            sys.exit(f"after 30 s: {last}")
        time.sleep(0.3)

def targets():
    ts = [t for t in get("/api/v1/targets?state=active")["activeTargets"]
          if t["labels"].get("job") == "dlrm-local"]
    seen = {}
    for t in ts:
        seen.setdefault(t["labels"].get("component"), []).append(t["labels"]["instance"])
    rows = [f'{t["labels"].get("component", "?"):12} {t["labels"]["instance"]:22} {t["health"]:8}'
            f' {t["lastError"]}' for t in ts]
    table = "\n".join(sorted(rows))
    if {c: sorted(i) for c, i in seen.items()} != want:
        return False, f"targets differ from {want}:\n{table}"
    if any(t["health"] != "up" for t in ts):
        return False, f"not all up:\n{table}"
    return True, table

first = {}
def rules():
    groups = get("/api/v1/rules")["groups"]
    evals = {g["name"]: g.get("lastEvaluation") for g in groups}
    if not first:
        first.update(evals)
    rs = [r for g in groups for r in g["rules"]]
    # Done once every group was evaluated after the targets were up.
    done = bool(rs) and all(evals[g] != first[g] for g in evals) and all(
        r["health"] != "unknown" for r in rs)
    bad = [f'{r["name"]}: {r["health"]} {r.get("lastError", "")}' for r in rs
           if r["health"] != "ok"]
    if done and bad:
        sys.exit("\n".join(bad))
    return done, f"{len(rs)} rules in {len(groups)} groups evaluated, health ok" if done else \
        "not evaluated yet: " + "; ".join(bad)

def alerts():
    active = get("/api/v1/alerts")["alerts"]
    if active:
        sys.exit("\n".join(f'{a["labels"]["alertname"]} {a["state"]} {a["labels"]}'
                           for a in active))
    return True, "none pending or firing"

def members():
    rs = get("/api/v1/query?query=dlrm_members")["result"]
    got = {r["metric"].get("role"): float(r["value"][1]) for r in rs}
    want_members = {"ps": float(len(want["ps"])), "worker": float(len(want["worker"]))}
    return got == want_members, f"dlrm_members by role: {got} (want {want_members})"

poll({"targets": targets, "rules": rules, "alerts": alerts, "members": members}[mode])
EOF
api() { python3 "$tmp/api.py" "$1" "http://127.0.0.1:$prom_port" "$tmp/targets.json"; }
failed_before="$failed"
SHOW=1 run "prometheus (127.0.0.1:$prom_port) sees every dlrm-local target up" api targets
if [ "$failed" -eq "$failed_before" ]; then
  SHOW=1 run "prometheus loads alerts.yml and evaluates every rule without error" api rules
  SHOW=1 run "no alert pending or firing against the healthy cluster" api alerts
  SHOW=1 run "prometheus stores the coordinator's dlrm_members (2 ps, 2 workers)" api members
fi
if [ "$failed" -ne 0 ]; then
  echo "      -- prometheus log: warnings and errors"
  { grep -E 'level=(warn|error)' "$tmp/prometheus.log" || echo "(none)"; } | tail -n 20 \
    | sed 's/^/      /'
fi
finish
