#!/usr/bin/env python3
"""Checks that Prometheus would scrape every dlrm process of a rendered chart once, with the
labels the alert rules and the dashboard group by (deploy/check.sh runs it on `helm template`).

  helm template ... | python3 k8s/checks/check_scrape.py [--prometheus-config FILE] [FILES...]

No cluster and no Prometheus with Kubernetes discovery is needed (Debian's prometheus has none):
the script plays the discovery on the rendered pods, the way Prometheus 2.x documents it, and
applies the real relabelling rules:

  - the `dlrm` job of deploy/prometheus/prometheus.yml (kubernetes_sd, role pod: one target per
    container port, one without a port for a container that declares none), when the chart puts
    the prometheus.io/* annotations on the pods (metrics.podAnnotations);
  - the chart's ServiceMonitor, when rendered (prometheus-operator, role endpoints: one target per
    pod behind each selected Service port that the ServiceMonitor names; namespace, pod, service
    and job labels as the operator adds them).

For each, every coordinator, parameter-server and worker pod (StatefulSet and Deployment replicas)
must end up as exactly one target, at the port of its container's --metrics-port, path /metrics,
with labels component (the pod's app.kubernetes.io/component), pod and namespace; no other pod
(the submit Job, the `helm test` Pod) may be a target. Prints one line per problem and exits 1.
"""

import argparse
import os
import re
import sys

import yaml

ROLES = ("coordinator", "ps", "worker")
WORKLOADS = {"Deployment", "StatefulSet", "Job", "Pod"}


def sanitize(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def expand(replacement, match):
    """Prometheus' $1 / ${1} / $name expansion of a relabel replacement."""
    def one(m):
        key = m.group(1) or m.group(2)
        try:
            return match.group(int(key) if key.isdigit() else key) or ""
        except IndexError:  # no such group
            return ""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, replacement)


def relabel(labels, rules):
    """labels after Prometheus relabel_configs (replace, keep, drop, labelmap), or None if dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace")
        sources = r.get("source_labels") or r.get("sourceLabels") or []
        sep = r.get("separator", ";")
        value = sep.join(labels.get(s, "") for s in sources)
        regex = re.compile(f"^(?:{r.get('regex', '(.*)')})$")
        if action == "keep":
            if not regex.match(value):
                return None
        elif action == "drop":
            if regex.match(value):
                return None
        elif action == "replace":
            m = regex.match(value)
            if m:
                target = r.get("target_label") or r.get("targetLabel")
                result = expand(str(r.get("replacement", "$1")), m)
                if result:
                    labels[target] = result
                else:
                    labels.pop(target, None)
        elif action == "labelmap":
            for k, v in list(labels.items()):
                m = regex.match(k)
                if m:
                    labels[expand(str(r.get("replacement", "$1")), m)] = v
        else:
            raise SystemExit(f"check_scrape: relabel action {action} not simulated")
    return labels


def pods(docs, namespace):
    """[(pod name, pod labels, annotations, spec, workload kind)] of every pod the docs make."""
    out = []
    for d in docs:
        kind = d.get("kind")
        if kind not in WORKLOADS:
            continue
        name = d["metadata"].get("name") or d["metadata"]["generateName"] + "x1"
        if kind == "Pod":
            meta, spec = d["metadata"], d["spec"]
            out.append((name, meta.get("labels") or {}, meta.get("annotations") or {}, spec, kind))
            continue
        template = d["spec"]["template"]
        meta, spec = template.get("metadata") or {}, template["spec"]
        replicas = d["spec"].get("replicas", 1) if kind != "Job" else 1
        for i in range(replicas):
            pod = f"{name}-{i}" if kind == "StatefulSet" else f"{name}-5d8f7c6b9-p{i}"
            out.append((pod, meta.get("labels") or {}, meta.get("annotations") or {}, spec, kind))
    return out


def metrics_port(spec):
    for c in spec.get("containers") or []:
        for a in c.get("args") or []:
            m = re.match(r"--metrics-port=(\d+)$", str(a))
            if m:
                return int(m.group(1))
    return None


def pod_meta(pod, labels, annotations, namespace, ip):
    meta = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_ip": ip, "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_node_name": "node-1", "__meta_kubernetes_pod_ready": "true"}
    for k, v in labels.items():
        meta[f"__meta_kubernetes_pod_label_{sanitize(k)}"] = str(v)
        meta[f"__meta_kubernetes_pod_labelpresent_{sanitize(k)}"] = "true"
    for k, v in annotations.items():
        meta[f"__meta_kubernetes_pod_annotation_{sanitize(k)}"] = str(v)
        meta[f"__meta_kubernetes_pod_annotationpresent_{sanitize(k)}"] = "true"
    return meta


def finish(labels, default_job):
    """The target's labels after relabelling: internal ones dropped, job, instance and path set."""
    out = {k: v for k, v in labels.items() if not k.startswith("__")}
    out.setdefault("job", default_job)
    out.setdefault("instance", labels["__address__"])
    out["__address__"] = labels["__address__"]
    out["__metrics_path__"] = labels.get("__metrics_path__", "/metrics")
    return out


def pod_sd_targets(docs, namespace, job):
    """kubernetes_sd role pod, then the job's relabel_configs."""
    targets = []
    for n, (pod, labels, annotations, spec, _) in enumerate(pods(docs, namespace)):
        ip = f"10.0.0.{n + 1}"
        base = pod_meta(pod, labels, annotations, namespace, ip)
        for init, containers in ((True, spec.get("initContainers") or []),
                                 (False, spec.get("containers") or [])):
            for c in containers:
                meta = dict(base, __meta_kubernetes_pod_container_name=c["name"],
                            __meta_kubernetes_pod_container_init=str(init).lower())
                ports = c.get("ports") or []
                if not ports:
                    targets.append(dict(meta, __address__=ip))
                for p in ports:
                    targets.append(dict(
                        meta, __address__=f"{ip}:{p['containerPort']}",
                        __meta_kubernetes_pod_container_port_name=p.get("name", ""),
                        __meta_kubernetes_pod_container_port_number=str(p["containerPort"]),
                        __meta_kubernetes_pod_container_port_protocol=p.get("protocol", "TCP")))
    out = []
    for t in targets:
        r = relabel(t, job.get("relabel_configs") or [])
        if r is not None:
            out.append((t["__meta_kubernetes_pod_name"], finish(r, job["job_name"])))
    return out


def service_monitor_targets(docs, namespace, sm):
    """prometheus-operator's role endpoints for one ServiceMonitor, then its relabelings."""
    ns_names = ((sm["spec"].get("namespaceSelector") or {}).get("matchNames")
                or [sm["metadata"].get("namespace", namespace)])
    selector = (sm["spec"].get("selector") or {}).get("matchLabels") or {}
    all_pods = pods(docs, namespace)
    out = []
    for svc in docs:
        if svc.get("kind") != "Service" or namespace not in ns_names:
            continue
        svc_labels = svc["metadata"].get("labels") or {}
        if not all(svc_labels.get(k) == v for k, v in selector.items()):
            continue
        for endpoint in sm["spec"].get("endpoints") or []:
            for sp in svc["spec"].get("ports") or []:
                if sp.get("name") != endpoint.get("port"):
                    continue
                for n, (pod, labels, annotations, spec, _) in enumerate(all_pods):
                    sel = svc["spec"].get("selector") or {}
                    if not sel or not all(labels.get(k) == v for k, v in sel.items()):
                        continue
                    target = sp.get("targetPort", sp["port"])
                    if isinstance(target, str):
                        named = [p["containerPort"] for c in spec.get("containers") or []
                                 for p in c.get("ports") or [] if p.get("name") == target]
                        if not named:
                            continue  # no endpoint for a pod without that port
                        target = named[0]
                    ip = f"10.0.0.{n + 1}"
                    meta = pod_meta(pod, labels, annotations, namespace, ip)
                    meta.update({"__address__": f"{ip}:{target}",
                                 "__meta_kubernetes_service_name": svc["metadata"]["name"],
                                 "__meta_kubernetes_endpoint_port_name": sp.get("name", "")})
                    for k, v in svc_labels.items():
                        meta[f"__meta_kubernetes_service_label_{sanitize(k)}"] = str(v)
                    # What the operator's generated config sets before the user's relabelings.
                    meta.update({"namespace": namespace, "service": svc["metadata"]["name"],
                                 "pod": pod, "endpoint": sp.get("name", ""),
                                 "job": svc["metadata"]["name"]})
                    if endpoint.get("path"):
                        meta["__metrics_path__"] = endpoint["path"]
                    r = relabel(meta, endpoint.get("relabelings") or [])
                    if r is not None:
                        out.append((pod, finish(r, svc["metadata"]["name"])))
    return out


def check_targets(what, targets, docs, namespace, problems):
    by_pod = {}
    for pod, labels in targets:
        by_pod.setdefault(pod, []).append(labels)
    for pod, labels, annotations, spec, _ in pods(docs, namespace):
        component = labels.get("app.kubernetes.io/component")
        got = by_pod.get(pod, [])
        if component not in ROLES:
            if got:
                problems.append(f"{what}: {pod} ({component}) is a target: {got}")
            continue
        if len(got) != 1:
            problems.append(f"{what}: {pod} is {len(got)} targets, want 1: {got}")
            continue
        t = got[0]
        port = metrics_port(spec)
        if t["__address__"].rsplit(":", 1)[-1] != str(port):
            problems.append(f"{what}: {pod} scraped at {t['__address__']}, but its "
                            f"--metrics-port is {port}")
        if t["__metrics_path__"] != "/metrics":
            problems.append(f"{what}: {pod} scraped at path {t['__metrics_path__']}")
        for key, want in (("component", component), ("pod", pod), ("namespace", namespace)):
            if t.get(key) != want:
                problems.append(f"{what}: {pod}'s target has {key}={t.get(key)!r}, want {want!r}")
    n = sum(len(v) for v in by_pod.values())
    print(f"{what}: {n} targets")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="YAML files (default: stdin)")
    parser.add_argument("--prometheus-config", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "../../deploy/prometheus/prometheus.yml"))
    parser.add_argument("--namespace", default="dlrm")
    args = parser.parse_args()
    docs = []
    for stream in [open(f) for f in args.files] or [sys.stdin]:
        docs += [d for d in yaml.safe_load_all(stream) if d]
    problems = []
    roles = [p for p in pods(docs, args.namespace)
             if p[1].get("app.kubernetes.io/component") in ROLES]
    annotated = [p for p in roles if p[2].get("prometheus.io/scrape") == "true"]
    if annotated:
        if len(annotated) != len(roles):
            problems.append("some dlrm pods carry prometheus.io/scrape, others do not")
        config = yaml.safe_load(open(args.prometheus_config))
        jobs = [j for j in config["scrape_configs"] if j["job_name"] == "dlrm"]
        if len(jobs) != 1:
            problems.append(f"{args.prometheus_config}: {len(jobs)} jobs named dlrm, want 1")
        else:
            check_targets("prometheus.yml job dlrm (kubernetes_sd, role pod)",
                          pod_sd_targets(docs, args.namespace, jobs[0]), docs, args.namespace,
                          problems)
    for sm in [d for d in docs if d.get("kind") == "ServiceMonitor"]:
        check_targets(f"ServiceMonitor {sm['metadata']['name']}",
                      service_monitor_targets(docs, args.namespace, sm), docs, args.namespace,
                      problems)
    if not annotated and not any(d.get("kind") == "ServiceMonitor" for d in docs):
        print("no prometheus.io annotations and no ServiceMonitor: nothing scrapes the pods")
    for p in problems:
        print(p)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
