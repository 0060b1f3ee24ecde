"""Asserts what the chart renders for a set of values (deploy/check.sh runs it on `helm template`).

  helm template dlrm k8s/helm/dlrm --set ... | python3 k8s/checks/expect.py [checks...]

  --image COMPONENT=IMAGE        the component's main container runs IMAGE (coordinator, ps, worker)
  --pull-policy COMPONENT=POLICY and has that imagePullPolicy
  --checkpoints SOURCE           coordinator, PS and worker pods mount volume `checkpoints` at
                                 /checkpoints, from SOURCE: claim:NAME or hostPath:PATH
  --pvc NAME | --no-pvc          the chart creates PersistentVolumeClaim NAME | creates none
  --readiness                    every main container has a readiness probe on the coordinator
                                 and PS gRPC ports (gRPC health with --insecure, else a TCP
                                 connect: Kubernetes' gRPC probes cannot do TLS), HTTP /metrics on
                                 the workers
  --test-hook                    a `helm test` Pod submits ConfigMap <name>-test with --wait, its
                                 batch_size a multiple of its --workers, and every worker
                                 generates its data in an init container
  --submit-job                   the submit Job never retries and waits for the coordinator first
  --tls PREFIX                   every container that runs a dlrm process or dlrmctl (coordinator,
                                 ps, worker, and dlrmctl as admin) has --tls-dir=/etc/dlrm/tls and
                                 mounts volume tls there read-only, from Secret PREFIX<identity>;
                                 no gRPC probe on them
  --tls-secret IDENTITY=NAME     with --tls: that identity's Secret is NAME instead
  --tls-server-name NAME         with --tls: each of them also has --tls-server-name=NAME (without
                                 it: none has)
  --insecure                     each of them has --insecure, no --tls-* flag and no tls volume
  --no-api-token                 every pod sets automountServiceAccountToken: false (they never
                                 call the Kubernetes API)
  --pod-annotation KEY=VALUE     every pod (of each workload, Job and Pod, the `helm test` Pod
                                 included) carries this annotation (values podAnnotations)
Prints what it checked and exits 1 at the first mismatch.
"""

import argparse
import sys

import yaml


def fail(message):
    print(f"expect: {message}")
    sys.exit(1)


def component(doc):
    return ((doc.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def workload(docs, name):
    for d in docs:
        if d["kind"] in ("StatefulSet", "Deployment") and component(d) == name:
            return d
    fail(f"no workload for component {name}")


def main_container(doc):
    spec = doc["spec"]["template"]["spec"] if "template" in doc["spec"] else doc["spec"]
    return spec, spec["containers"][0]


ROLES = ("coordinator", "ps", "worker")
TLS_DIR = "/etc/dlrm/tls"


def dlrm_containers(docs):
    """(where, pod spec, container, identity) of every container that runs a dlrm process
    (args[0] is its role) or dlrmctl (named in its command; identity admin)."""
    found = []
    for d in docs:
        if d["kind"] not in ("Pod", "StatefulSet", "Deployment", "Job"):
            continue
        spec, _ = main_container(d)
        for c in (spec.get("initContainers") or []) + spec["containers"]:
            args = c.get("args") or []
            if args and args[0] in ROLES:
                identity = args[0]
            elif "dlrmctl" in " ".join(c.get("command") or []):
                identity = "admin"
            else:
                continue
            where = f"{d['kind']} {d['metadata']['name']} container {c['name']}"
            found.append((where, spec, c, identity))
    identities = {f[3] for f in found}
    if not set(ROLES) <= identities:
        fail(f"dlrm containers found for {sorted(identities)}, want at least {list(ROLES)}")
    return found


def check_tls(docs, prefix, secrets, server_name):
    counts = {}
    for where, spec, c, identity in dlrm_containers(docs):
        args = c.get("args") or []
        want = [f"--tls-dir={TLS_DIR}"] + ([f"--tls-server-name={server_name}"]
                                           if server_name else [])
        got = [a for a in args if a.startswith("--tls-") or a == "--insecure"]
        if got != want:
            fail(f"{where}: TLS flags {got}, want {want}")
        mounts = [m for m in c.get("volumeMounts") or [] if m["name"] == "tls"]
        if len(mounts) != 1 or mounts[0]["mountPath"] != TLS_DIR or not mounts[0].get("readOnly"):
            fail(f"{where}: mounts tls as {mounts}, want read-only at {TLS_DIR}")
        volumes = [v for v in spec.get("volumes") or [] if v["name"] == "tls"]
        secret = secrets.get(identity, prefix + identity)
        if len(volumes) != 1 or (volumes[0].get("secret") or {}).get("secretName") != secret:
            fail(f"{where}: volume tls is {volumes}, want Secret {secret}")
        for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
            if "grpc" in (c.get(probe_name) or {}):
                fail(f"{where}: {probe_name} is a gRPC probe, which cannot do TLS")
        counts[(identity, secret)] = counts.get((identity, secret), 0) + 1
    print("ok: --tls-dir=" + TLS_DIR + (f" --tls-server-name={server_name}" if server_name else "")
          + ", Secret mounted read-only, no gRPC probe: "
          + ", ".join(f"{n} {identity} ({secret})" for (identity, secret), n in counts.items()))


def check_insecure(docs):
    found = dlrm_containers(docs)
    for where, spec, c, _ in found:
        args = c.get("args") or []
        if "--insecure" not in args or any(a.startswith("--tls-") for a in args):
            fail(f"{where}: args {args}, want --insecure and no --tls-* flag")
        if any(m["name"] == "tls" for m in c.get("volumeMounts") or []):
            fail(f"{where}: mounts volume tls without TLS")
        if any(v["name"] == "tls" or "secret" in v for v in spec.get("volumes") or []):
            fail(f"{where}: its pod has a tls or Secret volume without TLS")
    print(f"ok: --insecure and no tls volume on all {len(found)} dlrm and dlrmctl containers")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", action="append", default=[])
    parser.add_argument("--pull-policy", action="append", default=[])
    parser.add_argument("--checkpoints")
    parser.add_argument("--pvc")
    parser.add_argument("--no-pvc", action="store_true")
    parser.add_argument("--readiness", action="store_true")
    parser.add_argument("--test-hook", action="store_true")
    parser.add_argument("--submit-job", action="store_true")
    parser.add_argument("--tls")
    parser.add_argument("--tls-secret", action="append", default=[])
    parser.add_argument("--tls-server-name")
    parser.add_argument("--insecure", action="store_true")
    parser.add_argument("--pod-annotation", action="append", default=[])
    parser.add_argument("--no-api-token", action="store_true")
    args = parser.parse_args()
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]

    for item in args.image:
        name, image = item.split("=", 1)
        got = main_container(workload(docs, name))[1]["image"]
        if got != image:
            fail(f"{name} image is {got}, want {image}")
        print(f"ok: {name} image {got}")
    for item in args.pull_policy:
        name, policy = item.split("=", 1)
        got = main_container(workload(docs, name))[1]["imagePullPolicy"]
        if got != policy:
            fail(f"{name} imagePullPolicy is {got}, want {policy}")
        print(f"ok: {name} imagePullPolicy {got}")

    if args.checkpoints:
        kind, value = args.checkpoints.split(":", 1)
        for name in ("coordinator", "ps", "worker"):
            spec, container = main_container(workload(docs, name))
            volumes = [v for v in spec.get("volumes") or [] if v["name"] == "checkpoints"]
            volume = volumes[0] if volumes else None
            if volume is None:
                fail(f"{name} has no volume checkpoints")
            if "persistentVolumeClaim" in volume:
                got = ("claim", volume["persistentVolumeClaim"]["claimName"])
            else:
                got = ("hostPath", volume["hostPath"]["path"])
            if got != (kind, value):
                fail(f"{name} checkpoints volume is {got}, want {(kind, value)}")
            mounts = [m for m in container.get("volumeMounts") or [] if m["name"] == "checkpoints"]
            if [m["mountPath"] for m in mounts] != ["/checkpoints"] or mounts[0].get("readOnly"):
                fail(f"{name} mounts checkpoints as {mounts}, want read-write at /checkpoints")
        print(f"ok: coordinator, ps, worker mount checkpoints ({kind} {value}) at /checkpoints")
    pvcs = [d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"]
    if args.pvc:
        pvc = next((d for d in docs if d["kind"] == "PersistentVolumeClaim"), None)
        if pvcs != [args.pvc] or pvc["spec"]["accessModes"] != ["ReadWriteMany"]:
            fail(f"PersistentVolumeClaims {pvcs}, want [{args.pvc}] ReadWriteMany")
        print(f"ok: PersistentVolumeClaim {args.pvc} (ReadWriteMany)")
    if args.no_pvc:
        if pvcs:
            fail(f"PersistentVolumeClaims {pvcs}, want none")
        print("ok: no PersistentVolumeClaim")

    if args.readiness:
        for name, action, port in (("coordinator", "grpc", None), ("ps", "grpc", None),
                                   ("worker", "httpGet", "metrics")):
            _, container = main_container(workload(docs, name))
            if action == "grpc" and "--insecure" not in (container.get("args") or []):
                action = "tcpSocket"
            probe = container.get("readinessProbe") or {}
            if action not in probe:
                fail(f"{name} readinessProbe {probe} has no {action}")
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            want = ports["grpc"] if port is None else port
            if probe[action]["port"] != want:
                fail(f"{name} readinessProbe port {probe[action]['port']}, want {want}")
            if action == "httpGet" and probe[action].get("path") != "/metrics":
                fail(f"{name} readinessProbe path {probe[action].get('path')}, want /metrics")
            print(f"ok: {name} readinessProbe {action} port {want}")

    if args.test_hook:
        pods = [d for d in docs if d["kind"] == "Pod"
                and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
        if len(pods) != 1:
            fail(f"{len(pods)} Pods with helm.sh/hook: test, want 1")
        _, container = main_container(pods[0])
        argv = container.get("args") or []
        if "submit" not in argv or "--wait" not in argv or "-f" not in argv:
            fail(f"test Pod runs {argv}, want dlrmctl submit -f ... --wait")
        config_map = pods[0]["spec"]["volumes"][0]["configMap"]["name"]
        spec_text = next((d["data"]["job.yaml"] for d in docs if d["kind"] == "ConfigMap"
                          and d["metadata"]["name"] == config_map), None)
        if spec_text is None:
            fail(f"test Pod mounts ConfigMap {config_map}, which is not rendered")
        spec = yaml.safe_load(spec_text)
        workers = int(next(a for a in argv if a.startswith("--workers=")).split("=", 1)[1])
        batch = spec["training"]["batch_size"]
        if batch % workers:
            fail(f"test job's batch_size {batch} is not a multiple of its {workers} workers "
                 f"(the coordinator refuses it)")
        data = spec["data"]["train"][0]
        worker_spec, _ = main_container(workload(docs, "worker"))
        init = [c for c in worker_spec.get("initContainers") or []
                if c.get("args", [None])[0] == "gen-data"
                and f"--out={data}" in c["args"]]
        if not init:
            fail(f"no worker init container writes {data} (dlrm gen-data)")
        print(f"ok: helm test Pod {pods[0]['metadata']['name']} runs {' '.join(argv)} "
              f"(batch_size {batch}); workers generate {data}")

    if args.submit_job:
        jobs = [d for d in docs if d["kind"] == "Job"]
        if len(jobs) != 1:
            fail(f"{len(jobs)} Jobs, want 1")
        job = jobs[0]
        spec = job["spec"]["template"]["spec"]
        if job["spec"].get("backoffLimit") != 0 or spec.get("restartPolicy") != "Never":
            fail(f"submit Job backoffLimit {job['spec'].get('backoffLimit')} restartPolicy "
                 f"{spec.get('restartPolicy')}, want 0 and Never")
        if [c["name"] for c in spec.get("initContainers") or []] != ["wait-for-coordinator"]:
            fail("submit Job has no wait-for-coordinator init container")
        print("ok: submit Job backoffLimit 0, restartPolicy Never, waits for the coordinator")

    if args.tls is not None:
        check_tls(docs, args.tls, dict(s.split("=", 1) for s in args.tls_secret),
                  args.tls_server_name)
    if args.insecure:
        check_insecure(docs)

    if args.no_api_token:
        pods = [(d, d["spec"]["template"] if "template" in d["spec"] else d) for d in docs
                if d["kind"] in ("Pod", "StatefulSet", "Deployment", "Job")]
        for d, pod in pods:
            if pod["spec"].get("automountServiceAccountToken") is not False:
                fail(f"{d['kind']} {d['metadata']['name']}: automountServiceAccountToken is "
                     f"{pod['spec'].get('automountServiceAccountToken')!r}, want false "
                     f"(service account {pod['spec'].get('serviceAccountName')})")
        print(f"ok: automountServiceAccountToken false on the pods of all {len(pods)} workloads, "
              f"Jobs and Pods")

    for item in args.pod_annotation:
        key, value = item.split("=", 1)
        pods = [(d, d["spec"]["template"] if "template" in d["spec"] else d) for d in docs
                if d["kind"] in ("Pod", "StatefulSet", "Deployment", "Job")]
        for d, pod in pods:
            got = (pod["metadata"].get("annotations") or {}).get(key)
            if got != value:
                fail(f"{d['kind']} {d['metadata']['name']}: pod annotation {key} is {got!r}, "
                     f"want {value!r}")
        print(f"ok: annotation {key}={value} on the pods of all {len(pods)} workloads, Jobs and "
              f"Pods")


if __name__ == "__main__":
    main()
