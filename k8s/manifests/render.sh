#!/usr/bin/env bash
# Regenerates the plain manifests in k8s/manifests/ from the Helm chart (k8s/helm/dlrm) and
# values-minimal.yaml, so that both stay equivalent. Needs helm 3 or 4 and python3 with PyYAML.
#   k8s/manifests/render.sh [path/to/helm]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
helm="${1:-helm}"
"$helm" template dlrm "$here/../helm/dlrm" --namespace dlrm -f "$here/values-minimal.yaml" \
  | python3 "$here/split_manifests.py" "$here"
