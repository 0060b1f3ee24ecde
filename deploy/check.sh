#!/usr/bin/env bash
# Checks the deployment files with the tools that are present; says which checks it skipped and
# exits 0 when nothing it ran failed (so with no helm and no promtool it passes, saying SKIP).
#   deploy/check.sh     PROMTOOL=, HELM=, KUBECTL=/path/to/binary pick the binaries;
#                       K8S_MODELS=/path/to/node_modules turns on the Kubernetes schema validation
# promtool: Debian's `prometheus` package (`apt-get download prometheus; dpkg -x prometheus_*.deb
# /tmp/prom` gives /tmp/prom/usr/bin/promtool without installing the server). helm: helm 3 or 4.
# K8S_MODELS: `npm install --prefix /tmp/k8s-models kubernetes-models@5.1.0
# @kubernetes-models/prometheus-operator` gives /tmp/k8s-models/node_modules (needs node); the
# validators run offline. Without it, rendered manifests get the structural checks of
# k8s/checks/check_rendered.py only. Run by ctest as deploy_check (tests/deploy/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
promtool="${PROMTOOL:-$(command -v promtool || true)}"
helm="${HELM:-$(command -v helm || true)}"
k8s_models="${K8S_MODELS:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=deploy/check_lib.sh
. deploy/check_lib.sh

if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "SKIP  every check (python3 has no PyYAML: apt-get install python3-yaml)"
  echo "0 passed, 0 failed"
  exit 0
fi

run "YAML/JSON parse (manifests, prometheus, values, schema, dashboard)" python3 -c '
import glob, json, sys, yaml
for f in (glob.glob("k8s/manifests/*.yaml") + glob.glob("deploy/prometheus/*.yml")
          + ["k8s/helm/dlrm/values.yaml", "k8s/helm/dlrm/Chart.yaml"]):
    list(yaml.safe_load_all(open(f)))
json.load(open("deploy/grafana/dlrm-dashboard.json"))
json.load(open("k8s/helm/dlrm/values.schema.json"))
'
if [ -n "$promtool" ]; then
  run "promtool check rules alerts.yml" "$promtool" check rules deploy/prometheus/alerts.yml
  run "promtool test rules alerts_test.yml" "$promtool" test rules deploy/prometheus/alerts_test.yml
  run "dashboard queries parse and return data" \
    python3 deploy/grafana/check_dashboard.py --promtool "$promtool"
else
  echo "SKIP  promtool checks (no promtool)"
fi

if [ -z "$helm" ]; then
  echo "SKIP  helm checks (no helm on PATH and HELM unset)"
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
fi

schema_validation=0
if [ -n "$k8s_models" ] && command -v node >/dev/null \
    && [ -d "$k8s_models/kubernetes-models" ]; then
  schema_validation=1
else
  echo "SKIP  Kubernetes schema validation (set K8S_MODELS to a node_modules folder with" \
    "kubernetes-models; structural checks only)"
fi

# The containers' flags against the binaries' --help (k8s/checks/check_commands.py), when a build
# is here: DLRM_BUILD_DIR (default build) holds bin/dlrm and bin/dlrmctl.
build="${DLRM_BUILD_DIR:-build}"
commands_check=0
if [ -x "$build/bin/dlrm" ] && [ -x "$build/bin/dlrmctl" ]; then
  commands_check=1
else
  echo "SKIP  rendered flags against dlrm/dlrmctl --help (no $build/bin/dlrm and dlrmctl;" \
    "DLRM_BUILD_DIR)"
fi

# The functions below run inside `if` (in run), where `set -e` does not apply: every step that
# can fail ends in `|| return 1`.
# manifests_ok FILE...: structural checks, the scrape targets that prometheus.yml's `dlrm` job
# and the ServiceMonitor would make of the pods, the containers' flags, paths and ports against
# the binaries (with a build), then the Kubernetes schemas when available.
manifests_ok() {
  python3 k8s/checks/check_rendered.py --json "$tmp/docs.json" "$@" || return 1
  python3 k8s/checks/check_scrape.py "$@" || return 1
  if [ "$commands_check" = 1 ]; then
    python3 k8s/checks/check_commands.py --bin "$build/bin" "$@" || return 1
  fi
  if [ "$schema_validation" = 1 ]; then
    node k8s/checks/validate_schemas.mjs "$k8s_models" "$tmp/docs.json" || return 1
  fi
}
# render_ok "HELM ARGS" [EXPECT ARGS...]: helm template with those values, the manifest checks,
# and the chart expectations of k8s/checks/expect.py.
render_ok() {
  local -a values
  read -r -d '' -a values <<<"$1" || true  # every word of every line
  shift
  "$helm" template dlrm k8s/helm/dlrm --namespace dlrm "${values[@]}" >"$tmp/render.yaml" \
    || return 1
  manifests_ok "$tmp/render.yaml" || return 1
  if [ "$#" -gt 0 ]; then python3 k8s/checks/expect.py "$@" <"$tmp/render.yaml" || return 1; fi
}
# rejected REGEX HELM ARGS...: helm refuses these values with an error line matching REGEX (the
# key; helm 3 writes `ps.replicas: Invalid type`, helm 4 `at '/ps/replicas': got string`).
rejected() {
  local key="$1"; shift
  if "$helm" template dlrm k8s/helm/dlrm "$@" >"$tmp/out" 2>&1; then
    echo "accepted: $*"; return 1
  fi
  grep -E -- "$key" "$tmp/out" || { cat "$tmp/out"; return 1; }
}

all_on="--set worker.gpu.enabled=true --set worker.device=cuda --set job.submit.enabled=true
  --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true
  --set coordinator.pdb.enabled=true
  --set coordinator.persistence.enabled=false --set ps.persistence.enabled=false
  --set checkpoints.enabled=true"
run "helm lint --strict (defaults)" "$helm" lint --strict k8s/helm/dlrm
# shellcheck disable=SC2086  # word splitting of $all_on is intended
run "helm lint --strict (every option on)" "$helm" lint --strict k8s/helm/dlrm $all_on
run "helm lint --strict (values-minimal.yaml)" \
  "$helm" lint --strict k8s/helm/dlrm -f k8s/manifests/values-minimal.yaml
SHOW=1 run "schema rejects an unknown key (--set foo=bar)" rejected '\bfoo\b' --set foo=bar
SHOW=1 run "schema rejects a wrong type (--set ps.replicas=abc)" \
  rejected "ps[./]replicas" --set ps.replicas=abc
SHOW=1 run "schema rejects a nested unknown key (--set worker.gpu.colour=red)" \
  rejected '\bcolour\b' --set worker.gpu.colour=red
SHOW=1 run "schema rejects a bad byte size (--set ps.memoryBudget=4gigs)" \
  rejected "ps[./]memoryBudget" --set ps.memoryBudget=4gigs
# A fraction without its unit is a fraction of a byte: the PS refused --memory-budget=1.5.
SHOW=1 run "schema rejects a fractional byte size without a unit (--set ps.memoryBudget=1.5)" \
  rejected "ps[./]memoryBudget" --set ps.memoryBudget=1.5
# The schema checks a duration's form; the coordinator refuses a lease under 1s at start-up.
SHOW=1 run "chart refuses coordinator.leaseTtl under 1s (--set coordinator.leaseTtl=500ms)" \
  rejected "coordinator.leaseTtl 500ms is shorter than 1s" --set coordinator.leaseTtl=500ms
# A values file's unquoted `tag: 1.10` is the number 1.1 to Helm: the image would be dlrm:1.1.
printf 'image: {tag: 1.10}\n' >"$tmp/tag.yaml"
SHOW=1 run "schema rejects a non-integral number as image tag (tag: 1.10 in a values file)" \
  rejected "image[./]tag" -f "$tmp/tag.yaml"
# prometheus-operator's CRD takes whole units only (15s, 1m30s, 500ms): the API server would
# refuse a ServiceMonitor with 1.5s at install, after the schema's Go-duration pattern passed it.
SHOW=1 run "schema rejects a ServiceMonitor interval Prometheus cannot read (1.5s)" \
  rejected "serviceMonitor[./]interval" --set metrics.serviceMonitor.interval=1.5s
SHOW=1 run "schema rejects a non-boolean tls.enabled (--set tls.enabled=maybe)" \
  rejected "tls[./]enabled" --set tls.enabled=maybe
SHOW=1 run "schema rejects an unknown key under tls (--set tls.insecure=true)" \
  rejected '\binsecure\b' --set tls.insecure=true
run "helm template (defaults): probes, helm test hook, TLS on every dlrm container" \
  render_ok "" --readiness --test-hook --no-pvc --image coordinator=dlrm:0.1.0 \
  --image ps=dlrm:0.1.0 --image worker=dlrm:0.1.0 --tls dlrm-tls-
run "helm template (GPU, submit Job, ServiceMonitor, PDBs, no persistence, checkpoints)" \
  render_ok "$all_on --set podAnnotations.team=ml" --readiness --test-hook --submit-job \
  --image worker=dlrm-cuda:0.1.0 --tls dlrm-tls- --pod-annotation team=ml
tls_variants() {
  render_ok "--set tls.enabled=false" --readiness --test-hook --insecure || return 1
  render_ok "$all_on --set tls.enabled=false" --readiness --submit-job --insecure || return 1
  render_ok "$all_on --set fullnameOverride=train --set tls.serverName=dlrm.cluster
    --set tls.secrets.ps=ps-cert --set tls.secrets.admin=ops-cert" --readiness \
    --tls train-tls- --tls-secret ps=ps-cert --tls-secret admin=ops-cert \
    --tls-server-name dlrm.cluster || return 1
}
# Without serviceAccount.create the pods run as an existing account (the namespace's default),
# whose token Kubernetes mounts unless the pod says no.
run "helm template (serviceAccount.create=false: no API token in any pod)" \
  render_ok "--set serviceAccount.create=false --set job.submit.enabled=true" --no-api-token
run "helm template (tls.enabled=false: --insecure, no Secret; serverName, own Secret names)" \
  tls_variants
# tokens_ok "HELM ARGS" EXPECT_TOKENS ARGS...: render_ok with TLS, then k8s/checks/expect_tokens.py.
tokens_ok() {
  render_ok "$1" --readiness --tls dlrm-tls- || return 1
  shift
  python3 k8s/checks/expect_tokens.py "$@" <"$tmp/render.yaml" || return 1
}
token_variants() {
  tokens_ok "" --none || return 1
  "$helm" lint --strict k8s/helm/dlrm --set auth.tokens.existingSecret=dlrm-tokens || return 1
  tokens_ok "--set auth.tokens.existingSecret=dlrm-tokens" --secret dlrm-tokens || return 1
  tokens_ok "$all_on --set auth.tokens.existingSecret=ops-tokens --set auth.tokens.key=people" \
    --secret ops-tokens --key people || return 1
}
run "helm template (auth.tokens: --tokens, Secret and mount on the coordinator only)" \
  token_variants
SHOW=1 run "chart refuses auth.tokens with tls.enabled=false" \
  rejected "auth.tokens.existingSecret needs tls.enabled=true" \
  --set auth.tokens.existingSecret=dlrm-tokens --set tls.enabled=false
SHOW=1 run "schema rejects an unknown key under auth.tokens (--set auth.tokens.file=x)" \
  rejected '\bfile\b' --set auth.tokens.file=x
# Helm merges a user's resources with the defaults: a lower limit alone keeps the default request,
# and the API server would refuse every pod; a PS limit under its memory budget would OOM.
SHOW=1 run "chart refuses a request above its limit (--set ps.resources.limits.memory=2Gi)" \
  rejected "ps.resources: requests.memory 5Gi is above limits.memory 2Gi" \
  --set ps.resources.limits.memory=2Gi --set ps.memoryBudget=1GiB
SHOW=1 run "chart refuses a PS memory limit below ps.memoryBudget" \
  rejected "ps.resources.limits.memory 4Gi is below ps.memoryBudget 5GiB" \
  --set ps.resources.requests.memory=4Gi --set ps.resources.limits.memory=4Gi \
  --set ps.memoryBudget=5GiB
# Helm merges a user's volume or probe with the default: a hostPath data volume kept the default
# emptyDir, an exec probe the default grpc, and the API server refused the workload.
SHOW=1 run "chart refuses a data volume with two sources (hostPath beside the default emptyDir)" \
  rejected "worker.data.volume has 2 volume sources \\(emptyDir, hostPath\\)" \
  --set worker.data.volume.hostPath.path=/mnt/criteo
SHOW=1 run "chart refuses a probe with two handlers (exec beside the default grpc)" \
  rejected "coordinator.readinessProbe has 2 handlers \\(exec, grpc\\)" \
  --set "coordinator.readinessProbe.exec.command={true}"
SHOW=1 run "chart refuses metrics.port equal to a gRPC port (--set metrics.port=50061)" \
  rejected "metrics.port 50061 is also ps.port" --set metrics.port=50061
# A job on more workers than worker.replicas stays PENDING ("waiting for 3 idle workers"), and
# the submit Job or the helm test Pod waits on it.
SHOW=1 run "chart refuses job.submit.workers above worker.replicas" \
  rejected "job.submit.workers 3 is above worker.replicas 2" \
  --set job.submit.enabled=true --set job.submit.workers=3
SHOW=1 run "chart refuses tests.workers above worker.replicas" \
  rejected "tests.workers 3 is above worker.replicas 2" --set tests.workers=3
# The coordinator refuses a job whose batch_size is not a multiple of its workers: helm test's
# job (batch 64) failed with 3 workers, and the example spec (2048) would in the submit Job.
run "helm template (worker.replicas=3: helm test's batch_size a multiple of its workers)" \
  render_ok "--set worker.replicas=3" --test-hook
SHOW=1 run "chart refuses a submit Job whose spec's batch_size its workers do not divide" \
  rejected "batch_size 2048 is not a multiple of the job's 3 workers" \
  --set job.submit.enabled=true --set worker.replicas=3
run "helm template (an image per role)" render_ok \
  "--set image.tag=1.2.3 --set coordinator.image.repository=reg.example/coord
   --set ps.image.tag=ps-9 --set ps.image.pullPolicy=Always
   --set worker.image.repository=reg.example/worker --set worker.image.tag=w-1" \
  --image coordinator=reg.example/coord:1.2.3 --image ps=dlrm:ps-9 \
  --image worker=reg.example/worker:w-1 --pull-policy coordinator=IfNotPresent \
  --pull-policy ps=Always --pull-policy worker=IfNotPresent
gpu_images() {
  render_ok "--set worker.gpu.enabled=true" --image worker=dlrm-cuda:0.1.0 --image ps=dlrm:0.1.0 \
    || return 1
  render_ok "--set worker.gpu.enabled=true --set image.repository=reg.example/dlrm
    --set image.tag=7" --image worker=reg.example/dlrm-cuda:7 --image ps=reg.example/dlrm:7 \
    || return 1
  render_ok "--set worker.gpu.enabled=true --set worker.image.repository=ignored/cpu
    --set worker.gpu.image.repository=reg.example/gpu --set worker.gpu.image.tag=cu12
    --set worker.gpu.image.pullPolicy=Always" --image worker=reg.example/gpu:cu12 \
    --pull-policy worker=Always || return 1
}
run "helm template (GPU image: default, from image.repository, explicit)" gpu_images
checkpoint_volumes() {
  render_ok "--set checkpoints.enabled=true" --checkpoints claim:dlrm-checkpoints \
    --pvc dlrm-checkpoints || return 1
  render_ok "--set checkpoints.enabled=true --set checkpoints.existingClaim=shared-ck" \
    --checkpoints claim:shared-ck --no-pvc || return 1
  render_ok "--set checkpoints.enabled=true --set checkpoints.hostPath=/mnt/ck" \
    --checkpoints hostPath:/mnt/ck --no-pvc || return 1
  rejected "at most one of checkpoints.hostPath and checkpoints.existingClaim" \
    --set checkpoints.enabled=true --set checkpoints.hostPath=/mnt/ck \
    --set checkpoints.existingClaim=x
}
run "helm template (checkpoints: new PVC, existingClaim, hostPath; not both)" checkpoint_volumes
# The extraArgs examples of values.yaml's comments, rendered together: with a build,
# check_commands.py finds each flag in the binary's --help (the coordinator's example was --v=1,
# which `dlrm coordinator` refuses at start-up).
extra_args_examples() {
  local -a sets
  mapfile -t sets < <(python3 - <<'EOF'
import json, re
top = None
for line in open("k8s/helm/dlrm/values.yaml"):
    m = re.match(r"^(\w+):", line)
    if m:
        top = m.group(1)
    m = re.search(r"# -- Extra command-line flags.*e\.g\. (\[.*?\])", line)
    if m:
        print(f"--set-json={top}.extraArgs={json.dumps(json.loads(m.group(1)))}")
EOF
  )
  [ "${#sets[@]}" -gt 0 ] || { echo "no extraArgs example found in values.yaml"; return 1; }
  printf '%s\n' "${sets[@]}"
  "$helm" template dlrm k8s/helm/dlrm --namespace dlrm "${sets[@]}" >"$tmp/extra.yaml" || return 1
  manifests_ok "$tmp/extra.yaml" || return 1
}
SHOW=1 run "helm template (the extraArgs examples of values.yaml)" extra_args_examples
# Helm reads every number of a values file as a float64 and prints a large one in exponent
# notation: without the chart's "dlrm.number", ps.memoryBudget: 1073741824 rendered
# --memory-budget=1.073741824e+09, which the PS refuses, and tests.rows: 2000000 --rows=2e+06.
large_numbers() {
  render_ok "-f k8s/checks/values-large-numbers.yaml" || return 1
  if grep -nE '[0-9]e[+-]?[0-9]' "$tmp/render.yaml"; then
    echo "a number rendered in exponent notation (above)"; return 1
  fi
  # NOTES.txt too (helm template does not render it): its `helm test --timeout 2e+06s` failed.
  "$helm" install dlrm k8s/helm/dlrm --namespace dlrm --dry-run=client \
    -f k8s/checks/values-large-numbers.yaml >"$tmp/install.txt" || return 1
  sed -n '/^NOTES:/,$p' "$tmp/install.txt" >"$tmp/notes.txt"
  [ -s "$tmp/notes.txt" ] || { echo "helm install --dry-run=client printed no NOTES"; return 1; }
  if grep -nE '[0-9]e[+-]?[0-9]' "$tmp/notes.txt"; then
    echo "a number in NOTES.txt in exponent notation (above)"; return 1
  fi
  # Its submit command trains on every worker (dlrmctl submit's --workers defaults to 1).
  if ! grep -q -- "submit -f job.yaml --workers 2 --wait" "$tmp/notes.txt"; then
    grep -n "submit -f" "$tmp/notes.txt"; echo "NOTES' submit is not on the 2 workers"; return 1
  fi
}
run "helm template and NOTES (large integers: no exponent notation; NOTES' submit on all workers)" \
  large_numbers
# The chart's PrometheusRule carries files/alerts.yml, a copy of deploy/prometheus/alerts.yml
# (Helm reads no file outside the chart): the rendered groups must be those of the original.
prometheus_rule() {
  "$helm" template dlrm k8s/helm/dlrm --namespace dlrm --set metrics.prometheusRule.enabled=true \
    --set metrics.prometheusRule.labels.release=kube-prometheus-stack >"$tmp/rule.yaml" \
    || return 1
  python3 - "$tmp/rule.yaml" deploy/prometheus/alerts.yml <<'EOF' || return 1
import sys, yaml
rules = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
want = yaml.safe_load(open(sys.argv[2]))["groups"]
if len(rules) != 1:
    sys.exit(f"{len(rules)} PrometheusRules rendered, want 1")
if rules[0]["metadata"]["labels"].get("release") != "kube-prometheus-stack":
    sys.exit(f"metrics.prometheusRule.labels not on it: {rules[0]['metadata']['labels']}")
if rules[0]["spec"]["groups"] != want:
    sys.exit("its groups differ from deploy/prometheus/alerts.yml: copy it to "
             "k8s/helm/dlrm/files/alerts.yml")
print(f"{sum(len(g['rules']) for g in want)} rules in {len(want)} groups, as alerts.yml")
EOF
}
SHOW=1 run "helm template (PrometheusRule: the rules of deploy/prometheus/alerts.yml)" \
  prometheus_rule
plain_manifests_match() {
  mkdir -p "$tmp/plain"
  "$helm" template dlrm k8s/helm/dlrm --namespace dlrm -f k8s/manifests/values-minimal.yaml \
    >"$tmp/minimal.yaml" || return 1
  python3 k8s/manifests/split_manifests.py "$tmp/plain" <"$tmp/minimal.yaml" >/dev/null \
    || return 1
  local f
  for f in "$tmp"/plain/*.yaml; do
    diff -u "k8s/manifests/$(basename "$f")" "$f" || return 1
  done
  for f in k8s/manifests/*.yaml; do
    case "$(basename "$f")" in
      kustomization.yaml | values-minimal.yaml | namespace.yaml) continue ;;
    esac
    [ -f "$tmp/plain/$(basename "$f")" ] || { echo "$f is no longer rendered"; return 1; }
  done
}
run "plain manifests match the chart" plain_manifests_match
plain=()
for f in k8s/manifests/*.yaml; do
  case "$(basename "$f")" in kustomization.yaml | values-minimal.yaml) ;; *) plain+=("$f") ;; esac
done
what="plain manifests: structural checks"
if [ "$schema_validation" = 1 ]; then what="$what and Kubernetes schemas"; fi
run "$what" manifests_ok "${plain[@]}"
kubectl="${KUBECTL:-$(command -v kubectl || true)}"
if [ -n "$kubectl" ]; then
  kustomized() {
    "$kubectl" kustomize k8s/manifests >"$tmp/kustomized.yaml" || return 1
    manifests_ok "$tmp/kustomized.yaml" || return 1
  }
  run "kubectl kustomize k8s/manifests, then the same checks" kustomized
else
  echo "SKIP  kubectl kustomize (no kubectl on PATH and KUBECTL unset)"
fi
# The chart with checkpoints on a hostPath, its pods run as processes on this machine
# (k8s/checks/run_manifests.py, root): each eviction's recovery rolls back to the job's newest
# checkpoint on that volume. The plain manifests (no checkpoint volume) run in ctest's
# k8s_manifests_run. --timeout is for the whole run: about 3 minutes on 2 cores, but a run on
# 2 cores shared with a compiler ran out of 300 s during its first eviction.
if [ "$(id -u)" = 0 ] && [ -x "$build/bin/dlrm" ]; then
  pods_with_checkpoints() {
    "$helm" template dlrm k8s/helm/dlrm --namespace dlrm -f k8s/manifests/values-minimal.yaml \
      --set checkpoints.enabled=true --set checkpoints.hostPath=/mnt/dlrm-checkpoints \
      >"$tmp/checkpoints.yaml" || return 1
    python3 k8s/checks/run_manifests.py --build "$build" --manifests "$tmp/checkpoints.yaml" \
      --namespace dlrm --timeout 600 || return 1
  }
  SHOW=1 run "the chart's pods as processes, checkpoints on a hostPath: evictions roll back" \
    pods_with_checkpoints
else
  echo "SKIP  the chart's pods as processes (needs root and $build/bin/dlrm; DLRM_BUILD_DIR)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
