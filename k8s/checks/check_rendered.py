"""Structural checks of rendered Kubernetes manifests (no cluster, no Kubernetes schemas needed).

  helm template ... | python3 k8s/checks/check_rendered.py [--json OUT.json]
  python3 k8s/checks/check_rendered.py k8s/manifests/*.yaml

Checks that every document has apiVersion, kind and metadata.name (or generateName); that every
container has a name and an image with a tag; that probe ports and Service targetPorts name or
number a port the pods declare; that volumeMounts name declared volumes; that ConfigMap volumes
name a rendered ConfigMap; that workload selectors match their pod labels and that every Service
and PodDisruptionBudget selects some pod. Prints one line per problem and exits 1 if any.
With --json, also writes the documents as one JSON array (for k8s/checks/validate_schemas.mjs).
"""

import argparse
import json
import sys

import yaml

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def pod_of(doc):
    """(pod spec, pod labels) of a Pod or of a workload's template, else (None, None)."""
    if doc["kind"] == "Pod":
        return doc.get("spec") or {}, (doc.get("metadata") or {}).get("labels") or {}
    if doc["kind"] in WORKLOADS:
        template = (doc.get("spec") or {}).get("template") or {}
        return template.get("spec") or {}, (template.get("metadata") or {}).get("labels") or {}
    return None, None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_pod(where, spec, claim_templates, config_maps, problems):
    volumes = {v.get("name") for v in spec.get("volumes") or []} | claim_templates
    for v in spec.get("volumes") or []:
        cm = (v.get("configMap") or {}).get("name")
        if cm is not None and cm not in config_maps:
            problems.append(f"{where}: volume {v.get('name')} names ConfigMap {cm}, not rendered")
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    if not spec.get("containers"):
        problems.append(f"{where}: no containers")
    names = [c.get("name") for c in containers]
    if len(set(names)) != len(names):
        problems.append(f"{where}: duplicate container names {names}")
    for c in containers:
        cwhere = f"{where} container {c.get('name')}"
        if not c.get("name"):
            problems.append(f"{where}: a container has no name")
        image = c.get("image") or ""
        if not image or ":" not in image.rsplit("/", 1)[-1] or image.endswith(":"):
            problems.append(f"{cwhere}: image {image!r} has no tag")
        ports = c.get("ports") or []
        port_names = {p.get("name") for p in ports if p.get("name")}
        port_numbers = {p.get("containerPort") for p in ports}
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(probe_name)
            if not probe:
                continue
            for action in ("grpc", "httpGet", "tcpSocket"):
                if action not in probe:
                    continue
                port = (probe[action] or {}).get("port")
                if isinstance(port, str) and port not in port_names:
                    problems.append(f"{cwhere}: {probe_name}.{action}.port {port!r} is not a "
                                    f"declared port name ({sorted(port_names)})")
                elif isinstance(port, int) and port not in port_numbers:
                    problems.append(f"{cwhere}: {probe_name}.{action}.port {port} is not a "
                                    f"declared containerPort ({sorted(port_numbers)})")
                elif port is None:
                    problems.append(f"{cwhere}: {probe_name}.{action} has no port")
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                problems.append(f"{cwhere}: volumeMount {m.get('name')} names no volume")


def check(docs):
    problems = []
    config_maps = {d["metadata"].get("name") for d in docs
                   if d.get("kind") == "ConfigMap" and d.get("metadata")}
    pods = []  # (labels, container ports)
    for i, doc in enumerate(docs):
        meta = doc.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName")
        where = f"document {i} {doc.get('kind')} {name}"
        for key in ("apiVersion", "kind"):
            if not doc.get(key):
                problems.append(f"{where}: no {key}")
        if not name:
            problems.append(f"{where}: no metadata.name or metadata.generateName")
        if not doc.get("kind"):
            continue
        spec, labels = pod_of(doc)
        if spec is None:
            continue
        claim_templates = {t["metadata"]["name"]
                           for t in (doc.get("spec") or {}).get("volumeClaimTemplates") or []}
        check_pod(where, spec, claim_templates, config_maps, problems)
        selector = ((doc.get("spec") or {}).get("selector") or {}).get("matchLabels")
        if doc["kind"] in WORKLOADS - {"Job"} and not selects(selector, labels):
            problems.append(f"{where}: selector {selector} does not match pod labels {labels}")
        ports = [p for c in spec.get("containers") or [] for p in c.get("ports") or []]
        pods.append((labels, ports))
    for i, doc in enumerate(docs):
        kind = doc.get("kind")
        where = f"document {i} {kind} {(doc.get('metadata') or {}).get('name')}"
        spec = doc.get("spec") or {}
        if kind == "Service":
            selected = [ports for labels, ports in pods if selects(spec.get("selector"), labels)]
            if not selected:
                problems.append(f"{where}: selector {spec.get('selector')} selects no pod")
            for port in spec.get("ports") or []:
                target = port.get("targetPort", port.get("port"))
                for ports in selected:
                    known = ({p.get("name") for p in ports} if isinstance(target, str)
                             else {p.get("containerPort") for p in ports})
                    if target not in known:
                        problems.append(f"{where}: targetPort {target!r} not declared by the pods")
                        break
        elif kind == "PodDisruptionBudget":
            selector = (spec.get("selector") or {}).get("matchLabels")
            if not any(selects(selector, labels) for labels, _ in pods):
                problems.append(f"{where}: selector {selector} selects no pod")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="YAML files (default: stdin)")
    parser.add_argument("--json", help="also write the documents as a JSON array here")
    args = parser.parse_args()
    docs = []
    for stream in [open(f) for f in args.files] or [sys.stdin]:
        docs += [d for d in yaml.safe_load_all(stream) if d]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(docs, f)
    problems = check(docs)
    for p in problems:
        print(p)
    print(f"{len(docs)} documents, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
