#!/usr/bin/env bash
# Checks the deployment files with the tools that are present; says which checks it skipped.
#   deploy/check.sh            (PROMTOOL=/path/to/promtool HELM=/path/to/helm to pick binaries)
# promtool: Debian's `prometheus` package (`apt-get download prometheus; dpkg -x prometheus_*.deb
# /tmp/prom` gives /tmp/prom/usr/bin/promtool without installing the server). helm: helm 3.
set -euo pipefail
cd "$(dirname "$0")/.."
promtool="${PROMTOOL:-$(command -v promtool || true)}"
helm="${HELM:-$(command -v helm || true)}"
failed=0
passed=0
run() {
  local what="$1"; shift
  if "$@" >/tmp/dlrm-deploy-check.log 2>&1; then
    echo "PASS  $what"; passed=$((passed + 1))
  else
    echo "FAIL  $what"; cat /tmp/dlrm-deploy-check.log; failed=$((failed + 1))
  fi
}

run "YAML/JSON parse (manifests, prometheus, values, dashboard)" python3 -c '
import glob, json, sys, yaml
for f in glob.glob("k8s/manifests/*.yaml") + glob.glob("deploy/prometheus/*.yml") + ["k8s/helm/dlrm/values.yaml", "k8s/helm/dlrm/Chart.yaml"]:
    list(yaml.safe_load_all(open(f)))
json.load(open("deploy/grafana/dlrm-dashboard.json"))
'
if [ -n "$promtool" ]; then
  run "promtool check rules alerts.yml" "$promtool" check rules deploy/prometheus/alerts.yml
  run "promtool test rules alerts_test.yml" "$promtool" test rules deploy/prometheus/alerts_test.yml
  run "dashboard queries parse and return data" \
    python3 deploy/grafana/check_dashboard.py --promtool "$promtool"
else
  echo "SKIP  promtool checks (no promtool)"
fi
if [ -n "$helm" ]; then
  run "helm lint --strict" "$helm" lint --strict k8s/helm/dlrm
  run "helm template (defaults)" "$helm" template dlrm k8s/helm/dlrm
  run "helm template (GPU, submit Job, ServiceMonitor, PDBs, no persistence)" \
    "$helm" template dlrm k8s/helm/dlrm --set worker.gpu.enabled=true --set worker.device=cuda \
    --set job.submit.enabled=true --set metrics.serviceMonitor.enabled=true \
    --set coordinator.pdb.enabled=true --set coordinator.persistence.enabled=false \
    --set ps.persistence.enabled=false
  run "plain manifests match the chart" bash -c '
    tmp=$(mktemp -d)
    "$0" template dlrm k8s/helm/dlrm --namespace dlrm -f k8s/manifests/values-minimal.yaml \
      | python3 k8s/manifests/split_manifests.py "$tmp" >/dev/null
    for f in "$tmp"/*.yaml; do
      diff -u "k8s/manifests/$(basename "$f")" "$f" || exit 1
    done' "$helm"
else
  echo "SKIP  helm checks (no helm)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
