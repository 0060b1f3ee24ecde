#!/usr/bin/env python3
"""Runs the plain Kubernetes manifests (k8s/manifests, rendered from the Helm chart) as processes
on this machine, the way a kubelet would run their pods; then the chart's `helm test` Pod and the
example job's submit Job; then evicts a parameter server, a worker and the coordinator in turn,
each while a job trains, and replaces each pod as its StatefulSet or Deployment would.

  k8s/checks/run_manifests.py [--build build] [--keep] [--evict WORKLOAD...]     (root)
  helm template dlrm k8s/helm/dlrm --namespace dlrm --set ... >r.yaml
  k8s/checks/run_manifests.py --manifests r.yaml --namespace dlrm                 (other values)

No cluster and no container runtime: each pod gets
  - a network namespace with one address on a bridge, and an /etc/hosts that names the Services
    and the StatefulSet pods (<pod>.<headless service>.<namespace>.svc.cluster.local) as the
    cluster's DNS would, with the pod's name as its hostname; a ClusterIP Service has an address
    of its own that moves to the pod that replaces its pod (kube-proxy's virtual IP);
  - mount, pid, IPC and UTS namespaces, its root this machine's root under an overlay (the
    image's files added: `dlrm` and `dlrmctl` in /usr/local/bin, the dlrm user's folders of
    deploy/Dockerfile), read-only where the container asks readOnlyRootFilesystem, with each
    volume at its mountPath: emptyDir, PersistentVolumeClaims (kept for a StatefulSet's
    replacement pod) and hostPath (shared: one node) as folders, Secrets as the certificate
    folders that k8s/README.md has users make with `dlrm certs`, ConfigMaps as their files;
  - the user, group and fsGroup of its securityContext, the env of the manifest (fieldRef
    metadata.name, metadata.namespace and status.podIP resolved), $(VAR) expanded in command and
    args as Kubernetes does, and the image's ENTRYPOINT (deploy/Dockerfile) where the container
    names no command, so that tini is each container's PID 1.
Pods start in the reverse of their order in the manifests (Kubernetes promises no order; this
one starts the members before the coordinator they register with). Init containers run first
and must exit 0; then the containers start, and the startup and readiness probes (tcpSocket,
httpGet) are run against the pod's address as the kubelet would. A container of a StatefulSet
or Deployment that exits fails the check, with its log. An eviction is the kubelet's deletion
(SIGTERM to PID 1, SIGKILL after the grace period); the job it interrupts must end SUCCEEDED,
after one recovery (a parameter server or worker; rolled back to the newest checkpoint when the
pods mount a `checkpoints` volume) or none (the coordinator, which reloads its state).

What it shows: every role starts with exactly the flags, env, user, volumes and read-only root
the manifests give it, becomes ready by the chart's own probes, finds the others by their
Service names over mutual TLS with certificates made as the README says, the chart's jobs train,
and what k8s/README.md says about evictions holds. What it does not: the Kubernetes API
(scheduling, controllers, several nodes), image contents beyond deploy/Dockerfile's folders,
resource limits, NetworkPolicies.

Prints PASS/FAIL lines; exit 0 when everything passed, 1 on a failure, 77 when it cannot run here
(not root, no network namespaces or overlayfs) with --skip-if-not-root, with the reason.
Everything it makes (namespaces, links, mounts, processes, the work folder) is removed on exit,
also on Ctrl-C, unless --keep.
"""

import argparse
import glob
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
NAMESPACE_DEFAULT = "default"


def log(status, what, detail=""):
    print(f"{status:<5} {what}" + (f"\n      {detail}" if detail else ""), flush=True)


def run(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def load_manifests(path=None, namespace=None):
    """The documents of `path` (a `helm template` output) in `namespace`, or by default those of
    k8s/manifests: kustomization.yaml's resources, test-pod.yaml and submit-job.yaml, in the
    kustomization's namespace."""
    if path:
        with open(path) if path != "-" else sys.stdin as f:
            return [d for d in yaml.safe_load_all(f) if d], namespace or NAMESPACE_DEFAULT
    folder = os.path.join(REPO, "k8s", "manifests")
    with open(os.path.join(folder, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    docs = []
    for name in kustomization["resources"] + ["test-pod.yaml", "submit-job.yaml"]:
        with open(os.path.join(folder, name)) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    return docs, kustomization.get("namespace", NAMESPACE_DEFAULT)



def image_entrypoint_cmd_and_workdir():
    """deploy/Dockerfile's last ENTRYPOINT and CMD (exec form) and its WORKDIR."""
    entrypoint, cmd, workdir = None, [], "/"
    with open(os.path.join(REPO, "deploy", "Dockerfile")) as f:
        for line in f:
            if line.startswith("ENTRYPOINT "):
                entrypoint = yaml.safe_load(line[len("ENTRYPOINT "):])
            elif line.startswith("CMD "):
                cmd = yaml.safe_load(line[len("CMD "):])
            elif line.startswith("WORKDIR "):
                workdir = line.split()[1]
    return entrypoint, cmd, workdir


def expand(text, env):
    """Kubernetes' $(VAR) expansion: known variables replaced, $$ an escaped $, others kept."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


class Pod:
    def __init__(self, name, kind, owner, spec, labels):
        self.name, self.kind, self.owner, self.spec, self.labels = name, kind, owner, spec, labels
        self.ip = None
        self.netns = None
        self.writable_volumes = []
        self.dir = None
        self.procs = []  # (container name, Popen, log path) of the running containers
        self.log_paths = []  # of every container started, kept after they stop


class Cluster:
    def __init__(self, build, work, namespace, docs):
        self.build, self.work, self.namespace, self.docs = build, work, namespace, docs
        self.pods = {}
        self.hosts = {}  # name -> address
        self.config_maps = {d["metadata"]["name"]: d.get("data") or {} for d in docs
                            if d["kind"] == "ConfigMap"}
        self.entrypoint, self.cmd, self.workdir = image_entrypoint_cmd_and_workdir()
        tag = f"{os.getpid() % 100000}"
        self.bridge = f"dlk{tag}"
        self.netns_prefix = f"dlrm-k8s-{tag}"
        routes = run("ip", "-4", "route", "show").stdout
        while True:  # a /24 no route of this machine uses (netem_cluster.sh takes 10.213.x)
            self.subnet = f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"
            if f"{self.subnet}." not in routes:
                break
        self.links = []
        self.netns = []
        self.instances = 0
        self.service_ips = {}  # ClusterIP Service -> its address
        self.service_backend = {}  # ClusterIP Service -> the pod holding its address
        # (workload, volume) -> {file name: host file}: data a user would put in that volume.
        self.prefill = {}
        self.prefilled = set()
        self.next_host = 2

    # --- network ---------------------------------------------------------------------------
    def up_bridge(self):
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self.links.append(self.bridge)
        run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def add_netns(self, pod):
        pod.netns = f"{self.netns_prefix}-{self.instances}"
        run("ip", "netns", "add", pod.netns)
        self.netns.append(pod.netns)
        veth = f"{self.bridge}v{self.instances}"
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", pod.netns)
        self.links.append(veth)
        run("ip", "link", "set", veth, "master", self.bridge, "up")
        pod.ip = f"{self.subnet}.{self.next_host}"
        self.next_host += 1
        run("ip", "-n", pod.netns, "addr", "add", f"{pod.ip}/24", "dev", "eth0")
        run("ip", "-n", pod.netns, "link", "set", "eth0", "up")
        run("ip", "-n", pod.netns, "link", "set", "lo", "up")

    def name_pod(self, pod):
        """The names cluster DNS gives a pod and its Services (a Service names its first pod)."""
        ns = self.namespace
        names = [pod.name]
        for d in self.docs:
            if d["kind"] != "Service":
                continue
            selector = (d.get("spec") or {}).get("selector") or {}
            if not selector or any(pod.labels.get(k) != v for k, v in selector.items()):
                continue
            svc = d["metadata"]["name"]
            if (d["spec"].get("clusterIP") == "None" and pod.kind == "StatefulSet"
                    and pod.spec.get("_serviceName") == svc):
                names += [f"{pod.name}.{svc}", f"{pod.name}.{svc}.{ns}.svc.cluster.local"]
            if d["spec"].get("clusterIP") != "None":
                # A ClusterIP Service: an address of its own that stays when its pod is replaced
                # (kube-proxy's virtual IP), here added to its one ready pod's eth0.
                if svc not in self.service_ips:
                    self.service_ips[svc] = f"{self.subnet}.{250 - len(self.service_ips)}"
                vip = self.service_ips[svc]
                if self.service_backend.get(svc) is None:
                    run("ip", "-n", pod.netns, "addr", "add", f"{vip}/32", "dev", "eth0")
                    self.service_backend[svc] = pod
                    # Forget the old backend's link address, here and in every pod.
                    run("ip", "neigh", "flush", "to", vip, "dev", self.bridge, check=False)
                    for other in self.netns:
                        run("ip", "-n", other, "neigh", "flush", "to", vip, check=False)
                for n in (svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"):
                    self.hosts[n] = vip
        for n in names:
            self.hosts[n] = pod.ip

    def write_hosts(self, pod):
        """The pod's /etc/hosts, rewritten in place (the pods have it bind-mounted)."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{ip} {name}" for name, ip in sorted(self.hosts.items())]
        path = os.path.join(pod.dir, "hosts")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    # --- volumes ---------------------------------------------------------------------------
    def volume_source(self, pod, volume, fs_group):
        """A host folder holding what the volume shows the pod."""
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        host_path = (volume.get("hostPath") or {}).get("path")
        if claim:  # outlives the pod: a replacement of a StatefulSet pod gets it back
            path = os.path.join(self.work, "claims", claim)
        elif host_path:  # one node: every pod that names it shares it
            path = os.path.join(self.work, "host", host_path.strip("/"))
        else:
            path = os.path.join(pod.dir, "volumes", volume["name"])
        if os.path.exists(path):
            if (claim or host_path) and path not in pod.writable_volumes:
                pod.writable_volumes.append(path)
            return path
        os.makedirs(path)
        if "secret" in volume:
            secret = volume["secret"]["secretName"]
            identity = secret.rsplit("-", 1)[-1]  # dlrm-tls-<identity>, k8s/README.md "TLS"
            src = os.path.join(self.work, "certs", identity)
            if not os.path.isdir(src):
                raise RuntimeError(f"volume {volume['name']}: no certificates for Secret {secret}")
            mode = volume["secret"].get("defaultMode", 0o644)
            for f in ("tls.crt", "tls.key", "ca.crt"):
                shutil.copy(os.path.join(src, f), os.path.join(path, f))
                os.chown(os.path.join(path, f), 0, fs_group if fs_group is not None else 0)
                os.chmod(os.path.join(path, f), mode)
            os.chmod(path, 0o755)
            return path
        if "configMap" in volume:
            data = self.config_maps.get(volume["configMap"]["name"])
            if data is None:
                raise RuntimeError(f"volume {volume['name']}: no ConfigMap "
                                   f"{volume['configMap']['name']}")
            items = volume["configMap"].get("items")
            for key, text in data.items():
                target = key
                if items is not None:
                    match = [i for i in items if i["key"] == key]
                    if not match:
                        continue
                    target = match[0]["path"]
                with open(os.path.join(path, target), "w") as f:
                    f.write(text)
                os.chmod(os.path.join(path, target), 0o644)
            os.chmod(path, 0o755)
            return path
        # emptyDir, a claim of volumeClaimTemplates, hostPath: an empty folder the pod may write
        # (the kubelet gives fsGroup ownership and the setgid bit), with what `prefill` names.
        os.chown(path, 0, fs_group if fs_group is not None else 0)
        os.chmod(path, 0o2775 if fs_group is not None else 0o777)
        pod.writable_volumes.append(path)
        for name, text_path in self.prefill.get((pod.owner, volume["name"]), {}).items():
            target = os.path.join(path, name)
            shutil.copy(text_path, target)
            os.chmod(target, 0o644)
            self.prefilled.add(target)
        return path

    # --- pods ------------------------------------------------------------------------------
    def add_pod(self, pod):
        """A new pod: its own folder, network namespace and address, and its names in DNS."""
        self.instances += 1
        pod.dir = os.path.join(self.work, "pods", f"{pod.name}.{self.instances}")
        os.makedirs(os.path.join(pod.dir, "logs"))
        self.add_netns(pod)
        self.name_pod(pod)
        self.pods[pod.name] = pod
        for other in self.pods.values():  # DNS answers the new address everywhere
            if other.dir and os.path.exists(os.path.join(other.dir, "hosts")):
                self.write_hosts(other)

    def start_pod(self, pod, deadline):
        """Init containers to completion, then the containers (wait_ready runs the probes)."""
        self.run_init_containers(pod, deadline)
        for c in pod.spec.get("containers") or []:
            self.start_container(pod, c)

    def replace_pod(self, pod, deadline):
        """An eviction: the pod deleted (SIGTERM, grace), then the one its StatefulSet (same
        name, same claims) or Deployment (a new name) makes instead, ready by its probes."""
        self.stop_pod(pod)
        del self.pods[pod.name]
        for name in [n for n, ip in self.hosts.items() if ip == pod.ip]:
            del self.hosts[name]
        for svc, backend in list(self.service_backend.items()):
            if backend is pod:  # the Service's address goes with the pod
                self.service_backend[svc] = None
        run("ip", "netns", "del", pod.netns, check=False)  # its address and link go too
        self.netns.remove(pod.netns)
        name = pod.name
        if pod.kind == "Deployment":
            name = f"{pod.name.rsplit('-', 1)[0]}-r{self.instances}"
        new = Pod(name, pod.kind, pod.owner, pod.spec, pod.labels)
        self.add_pod(new)
        self.start_pod(new, deadline)
        self.wait_ready(new, deadline)
        return new

    def container_script(self, pod, c):
        """The shell run in the pod's namespaces that mounts its root and volumes, then execs."""
        spec = pod.spec
        psc = spec.get("securityContext") or {}
        csc = c.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser", 0))
        gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
        fs_group = psc.get("fsGroup")
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               "HOSTNAME": pod.name, "HOME": "/"}
        field = {"metadata.name": pod.name, "metadata.namespace": self.namespace,
                 "status.podIP": pod.ip}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = expand(str(e["value"]), env)
            elif "fieldRef" in (e.get("valueFrom") or {}):
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                if path not in field:
                    raise RuntimeError(f"{pod.name}/{c['name']}: env {e['name']}: fieldRef {path}")
                env[e["name"]] = field[path]
            else:
                raise RuntimeError(f"{pod.name}/{c['name']}: env {e['name']}: unsupported source")
        # Kubernetes: `command` replaces the image's ENTRYPOINT (and drops its CMD), `args`
        # replaces its CMD.
        command = c.get("command") or self.entrypoint
        args = c.get("args", [] if c.get("command") else self.cmd)
        argv = [expand(a, env) for a in list(command) + list(args)]

        root = os.path.join(pod.dir, "root")
        rw = os.path.join(pod.dir, "rw", c["name"])
        lines = ["set -e",
                 f"mount -t tmpfs -o mode=0755 tmpfs {q(rw)}",
                 f"mkdir {q(rw)}/upper {q(rw)}/work",
                 f"mount -t overlay overlay -o lowerdir=/,upperdir={q(rw)}/upper,"
                 f"workdir={q(rw)}/work {q(root)}",
                 f"mount --rbind /dev {q(root)}/dev",
                 f"mount -t proc proc {q(root)}/proc",
                 f"mount --rbind /sys {q(root)}/sys",
                 # The image: its binaries, and the dlrm user's folders (deploy/Dockerfile).
                 f"mkdir -p {q(root)}/usr/local/bin {q(root)}/var/lib/dlrm/coordinator "
                 f"{q(root)}/var/lib/dlrm/ps {q(root)}/data",
                 f"chown -R 10001:10001 {q(root)}/var/lib/dlrm",
                 f"mount -t tmpfs -o mode=1777 tmpfs {q(root)}/tmp"]
        for binary in ("dlrm", "dlrmctl"):
            lines += [f"touch {q(root)}/usr/local/bin/{binary}",
                      f"mount --bind {q(os.path.join(self.build, 'bin', binary))} "
                      f"{q(root)}/usr/local/bin/{binary}"]
        lines += [f"mount --bind {q(self.write_hosts(pod))} {q(root)}/etc/hosts",
                  f"hostname {q(pod.name)}"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for t in spec.get("_claims", []):  # volumeClaimTemplates: claim <template>-<pod>
            volumes.setdefault(t, {"name": t, "persistentVolumeClaim": {"claimName":
                                                                      f"{t}-{pod.name}"}})
        read_only = []
        # Shallow mount points first, as container runtimes order them; read-only last, so that a
        # mount point inside a read-only volume can still be made.
        for m in sorted(c.get("volumeMounts") or [], key=lambda m: m["mountPath"].count("/")):
            v = volumes.get(m["name"])
            if v is None:
                raise RuntimeError(f"{pod.name}/{c['name']}: mount of undeclared volume "
                                   f"{m['name']}")
            src = self.volume_source(pod, v, fs_group)
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
            target = q(root + m["mountPath"])
            if os.path.isdir(src):
                lines.append(f"mkdir -p {target}")
            else:  # a file (subPath): the mount point is a file
                lines.append(f"mkdir -p {q(os.path.dirname(root + m['mountPath']))}")
                lines.append(f"touch {target}")
            lines.append(f"mount --bind {q(src)} {target}")
            if m.get("readOnly"):
                read_only.append(target)
        lines += [f"mount -o remount,bind,ro {target}" for target in read_only]
        if csc.get("readOnlyRootFilesystem"):
            lines.append(f"mount -o remount,ro {q(root)}")
        groups = f"--groups={fs_group}" if fs_group is not None else ""
        env_args = " ".join(q(f"{k}={v}") for k, v in env.items())
        lines.append(f"exec chroot --userspec={uid}:{gid} {groups} {q(root)} "
                     f"/usr/bin/env -C {q(c.get('workingDir') or self.workdir)} -i {env_args} "
                     + " ".join(q(a) for a in argv))
        return "\n".join(lines)

    def start_container(self, pod, c):
        os.makedirs(os.path.join(pod.dir, "root"), exist_ok=True)
        os.makedirs(os.path.join(pod.dir, "rw", c["name"]), exist_ok=True)
        path = os.path.join(pod.dir, "logs", f"{c['name']}.log")
        out = open(path, "w")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", pod.netns, "unshare", "--mount", "--uts", "--ipc", "--pid",
             "--fork", "--propagation", "private", "--", "/bin/sh", "-c",
             self.container_script(pod, c)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()  # the container has its own descriptor
        pod.procs.append((c["name"], proc, path))
        pod.log_paths.append(path)
        return proc, path

    def run_init_containers(self, pod, deadline):
        for c in pod.spec.get("initContainers") or []:
            proc, path = self.start_container(pod, c)
            try:
                rc = proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                raise Failure(f"{pod.name}: init container {c['name']} did not finish", path)
            if rc != 0:
                raise Failure(f"{pod.name}: init container {c['name']} exited {exit_text(rc)}", path)

    def check_running(self):
        """A long-running container that exited is a failure (the kubelet would restart it)."""
        for pod in self.pods.values():
            if pod.kind not in ("StatefulSet", "Deployment"):
                continue
            for name, proc, path in pod.procs:
                if name in [c["name"] for c in pod.spec.get("initContainers") or []]:
                    continue
                if proc.poll() is not None:
                    raise Failure(f"{pod.name}: container {name} exited "
                                  f"{exit_text(proc.returncode)}", path)

    def run_to_completion(self, pod, deadline):
        """Runs a pod with restartPolicy Never (init containers, then its one container) and
        returns the last line of its log; a non-zero exit is a failure."""
        self.run_init_containers(pod, deadline)
        proc, path = self.start_container(pod, pod.spec["containers"][0])
        limit = min(deadline, time.time() + pod.spec.get("activeDeadlineSeconds", 3600))
        while proc.poll() is None:
            self.check_running()
            if time.time() > limit:
                raise Failure(f"{pod.name}: did not finish in time", path)
            time.sleep(0.5)
        if proc.returncode != 0:
            raise Failure(f"{pod.name}: exited {exit_text(proc.returncode)}", path)
        with open(path) as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
        return lines[-1] if lines else ""

    def dlrmctl(self, *args):
        """dlrmctl from this machine with the admin certificate, through the coordinator pod's
        address (as through a port-forward, k8s/README.md "TLS": the Service name checked)."""
        coordinator = self.hosts["dlrm-coordinator"]
        return run(os.path.join(self.build, "bin", "dlrmctl"), "--coordinator",
                   f"{coordinator}:50051", "--tls-dir", os.path.join(self.work, "certs", "admin"),
                   "--tls-server-name", "dlrm-coordinator", "--timeout", "10", *args)

    def job_status(self, job):
        return json.loads(self.dlrmctl("status", job, "-o", "json").stdout)

    def evict_during_job(self, owner, deadline, epochs):
        """Submits the example job (dlrm-job's spec, `epochs` epochs), evicts the first pod of
        `owner` once it trains, and checks the job: RECOVERING with one recovery (a parameter
        server or worker) or none (the coordinator, which reloads its state), then SUCCEEDED."""
        spec = yaml.safe_load(self.config_maps["dlrm-job"]["job.yaml"])
        spec["name"] = f"evict-{owner}"
        spec["training"]["epochs"] = epochs
        # With the chart's checkpoint volume, the job checkpoints there and a recovery rolls
        # back to its newest checkpoint (k8s/README.md, "Checkpoint volume").
        checkpoints = self.checkpoint_mount()
        if checkpoints:
            spec["checkpoint"] = {"dir": f"{checkpoints}/evict-{owner}", "every_steps": 10}
        path = os.path.join(self.work, f"evict-{owner}.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(spec, f)
        workers = sum(1 for p in self.pods.values() if p.owner == "dlrm-worker")
        job = self.dlrmctl("submit", "-f", path, f"--workers={workers}").stdout.split()[-1]
        committed = os.path.join(self.checkpoint_host_dir() or "", f"evict-{owner}", "ckpt-*",
                                 "MANIFEST.json")
        while True:
            status = self.job_status(job)
            # Evicted once it trains, and with a checkpoint volume once one is committed there
            # (so that the recovery has one to roll back to).
            if status["state"].endswith("RUNNING") and step_of(status) >= 3 and \
                    (not checkpoints or glob.glob(committed)):
                break
            if status["state"].endswith(("FAILED", "SUCCEEDED", "CANCELLED")) or \
                    time.time() > deadline:
                raise Failure(f"{job}: never trained before the eviction: {status}")
            time.sleep(0.2)
        victim = next(p for p in self.pods.values() if p.owner == owner)
        step_at_eviction = step_of(status)
        replacement = self.replace_pod(victim, deadline)
        states = []
        while True:
            status = self.job_status(job)
            state = status["state"].replace("JOB_STATE_", "")
            if not states or states[-1] != state:
                states.append(state)
            if state in ("FAILED", "SUCCEEDED", "CANCELLED"):
                break
            self.check_running()
            if time.time() > deadline:
                raise Failure(f"{job}: not finished after the eviction of {victim.name} "
                              f"(states {states})")
            time.sleep(0.2)
        recoveries = int(status.get("recoveries", 0))
        want = 0 if owner == "dlrm-coordinator" else 1
        if state != "SUCCEEDED" or recoveries != want:
            raise Failure(f"{job}: evicting {victim.name} at step {step_at_eviction} gave states "
                          f"{states}, {recoveries} recoveries (want SUCCEEDED, {want}): "
                          f"{status.get('message')}")
        history = status.get("recovery_history") or [{}]
        rollback = ""
        if checkpoints and want:
            resumed = [line for p in self.pods.values() if p.owner == "dlrm-worker"
                       for line in self.logs(p) if f"job {job} rank 0: resumed from" in line]
            if not resumed:
                raise Failure(f"{job}: recovered without resuming from a checkpoint in "
                              f"{checkpoints}/evict-{owner}")
            rollback = "; " + resumed[-1].split("] ", 1)[-1]
        log("PASS", f"{victim.name} evicted at step {step_at_eviction} of {job}, replaced by "
            f"{replacement.name} at {replacement.ip}: {recoveries} recovery, then "
            f"{' -> '.join(states)}", (history[-1].get("reason", "") + rollback) if want else "")

    def checkpoint_host_dir(self):
        """The folder on this machine behind the workers' `checkpoints` volume, or None."""
        for pod in self.pods.values():
            if pod.owner != "dlrm-worker":
                continue
            for v in pod.spec.get("volumes") or []:
                if v["name"] == "checkpoints":
                    fs_group = (pod.spec.get("securityContext") or {}).get("fsGroup")
                    return self.volume_source(pod, v, fs_group)
        return None

    def checkpoint_mount(self):
        """Where the workers mount a volume named `checkpoints` (the chart's), or None."""
        for pod in self.pods.values():
            if pod.owner != "dlrm-worker":
                continue
            for c in pod.spec.get("containers") or []:
                for m in c.get("volumeMounts") or []:
                    if m["name"] == "checkpoints":
                        return m["mountPath"]
        return None

    def logs(self, pod):
        lines = []
        for path in pod.log_paths:
            with open(path, errors="replace") as f:
                lines += f.read().splitlines()
        return lines

    def check_owners(self):
        """Every file the pods wrote into their writable volumes (emptyDir, claims) belongs to
        the pod's runAsUser: the processes ran as the securityContext says. Returns the count."""
        count = 0
        for pod in self.pods.values():
            uid = (pod.spec.get("securityContext") or {}).get("runAsUser", 0)
            for top in pod.writable_volumes:
                for folder, dirs, files in os.walk(top):
                    for name in dirs + files:
                        path = os.path.join(folder, name)
                        if path in self.prefilled:
                            continue
                        owner = os.lstat(path).st_uid
                        if owner != uid:
                            raise Failure(f"{pod.name}: {path} belongs to uid {owner}, not the "
                                          f"pod's runAsUser {uid}")
                        count += 1
        return count

    def probe(self, pod, c, probe):
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
        if "tcpSocket" in probe:
            port = probe["tcpSocket"]["port"]
            port = ports.get(port, port)
            try:
                with socket.create_connection((pod.ip, int(port)),
                                              timeout=probe.get("timeoutSeconds", 1)):
                    return True
            except OSError:
                return False
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = ports.get(get["port"], get["port"])
            scheme = get.get("scheme", "HTTP").lower()
            url = f"{scheme}://{pod.ip}:{port}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=probe.get("timeoutSeconds", 1)) as r:
                    return 200 <= r.status < 400
            except OSError:
                return False
        raise RuntimeError(f"{pod.name}/{c['name']}: unsupported probe {probe}")

    def wait_ready(self, pod, deadline):
        """Each container's startup probe (within failureThreshold x periodSeconds, after which
        the kubelet would kill the container), then its readiness probe (within a minute)."""
        for c in pod.spec.get("containers") or []:
            for kind in ("startupProbe", "readinessProbe"):
                probe = c.get(kind)
                if not probe:
                    continue
                if kind == "startupProbe":
                    allowed = probe.get("failureThreshold", 3) * probe.get("periodSeconds", 10)
                else:
                    allowed = 60
                limit = min(deadline, time.time() + allowed)
                while not self.probe(pod, c, probe):
                    self.check_running()
                    if time.time() > limit:
                        raise Failure(f"{pod.name}: {c['name']}'s {kind} did not pass in "
                                      f"{allowed} s", pod.procs[-1][2])
                    time.sleep(0.5)

    # --- tear-down -------------------------------------------------------------------------
    def stop(self):
        # Clients first, the coordinator last: each leaves while the others still answer.
        for pod in reversed(list(self.pods.values())):
            self.stop_pod(pod)

    def stop_pod(self, pod):
        """As the kubelet deletes a pod: SIGTERM to each container's PID 1 (here the pid
        namespace's first process, a child of unshare), SIGKILL after the grace period."""
        grace = pod.spec.get("terminationGracePeriodSeconds", 30)
        for _, proc, _ in pod.procs:
            if proc.poll() is None:
                for pid in children(proc.pid):
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
        end = time.time() + min(grace, 20)
        for _, proc, _ in pod.procs:
            try:
                proc.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                for pid in children(proc.pid) + [proc.pid]:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.wait()
        pod.procs = []

    def remove_network(self):
        for ns in self.netns:
            run("ip", "netns", "del", ns, check=False)
        for link in reversed(self.links):
            run("ip", "link", "del", link, check=False)


class Failure(Exception):
    def __init__(self, what, log_path=None):
        super().__init__(what)
        self.log_path = log_path


def q(s):
    return shlex.quote(str(s))


def exit_text(code):
    """A container's exit status as a user reads it: the image's PID 1 is tini, which exits with
    128 + N when dlrm died of signal N (141: SIGPIPE)."""
    if code is not None and code > 128 and code - 128 < signal.NSIG:
        return f"{code} (dlrm killed by {signal.Signals(code - 128).name}, behind tini)"
    if code is not None and code < 0:
        return f"{code} (killed by {signal.Signals(-code).name})"
    return str(code)


def step_of(status):
    """The step of `dlrmctl status -o json` (no progress field before the first report)."""
    return int((status.get("progress") or {}).get("step", 0))


def children(pid):
    """Pids whose parent is `pid` (from /proc/*/stat)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def pods_of(docs):
    """(name, kind, owner, pod spec, labels) of every pod the workloads would make, in order:
    StatefulSet pods by ordinal, Deployment pods by a made-up hash, a Job's one pod."""
    out = []
    for d in docs:
        kind = d["kind"]
        if kind not in ("StatefulSet", "Deployment", "Pod", "Job"):
            continue
        meta = d["metadata"]
        if kind == "Job":
            template = d["spec"]["template"]
            name = meta.get("name") or f"{meta['generateName']}run"
            out.append((name, kind, name, dict(template["spec"]),
                        template["metadata"].get("labels") or {}))
            continue
        if kind == "Pod":
            spec, labels = dict(d["spec"]), meta.get("labels") or {}
            name = meta.get("name") or f"{meta['generateName']}run"
            out.append((name, kind, name, spec, labels))
            continue
        template = d["spec"]["template"]
        spec, labels = dict(template["spec"]), template["metadata"].get("labels") or {}
        spec["_serviceName"] = d["spec"].get("serviceName")
        spec["_claims"] = [t["metadata"]["name"] for t in d["spec"].get("volumeClaimTemplates", [])]
        for i in range(d["spec"].get("replicas", 1)):
            suffix = str(i) if kind == "StatefulSet" else f"5d8f7c6b9-{chr(ord('a') + i)}x{i}"
            out.append((f"{meta['name']}-{suffix}", kind, meta["name"], spec, labels))
    return out


def missing_programs(docs, entrypoint):
    """Programs outside /usr/local/bin (the image's own) that the pods run and this machine
    lacks: the image's (deploy/Dockerfile) are Debian packages, e.g. tini."""
    programs = {entrypoint[0]}
    for _, _, _, spec, _ in pods_of(docs):
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            if c.get("command"):
                programs.add(c["command"][0])
    return sorted(p for p in programs
                  if not p.startswith("/usr/local/bin/") and not os.access(p, os.X_OK))


def preflight():
    if os.geteuid() != 0:
        return "not root (network and mount namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    name = f"dlrm-k8s-probe-{os.getpid()}"
    if run("ip", "netns", "add", name, check=False).returncode != 0:
        return "cannot create network namespaces here"
    run("ip", "netns", "del", name, check=False)
    with tempfile.TemporaryDirectory() as d:
        for sub in ("u", "w", "m"):
            os.mkdir(os.path.join(d, sub))
        probe = run("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                    f"mount -t tmpfs tmpfs {d}/u && mkdir {d}/u/u {d}/u/w && "
                    f"mount -t overlay overlay -o lowerdir=/,upperdir={d}/u/u,workdir={d}/u/w "
                    f"{d}/m", check=False)
        if probe.returncode != 0:
            return f"no overlay of / in a mount namespace here ({probe.stderr.strip()})"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--timeout", type=float, default=600, help="seconds for everything")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    parser.add_argument("--evict", nargs="*", default=["dlrm-ps", "dlrm-worker",
                                                       "dlrm-coordinator"],
                        help="workloads of which one pod is evicted during a job, in turn")
    parser.add_argument("--evict-epochs", type=int, default=30,
                        help="epochs of the job each eviction interrupts")
    parser.add_argument("--manifests", help="a `helm template` output to run instead of "
                        "k8s/manifests (- for standard input)")
    parser.add_argument("--namespace", help="the namespace --manifests was rendered for")
    parser.add_argument("--rows", type=int, default=20000,
                        help="rows of generated data for the example job (dlrm gen-data)")
    parser.add_argument("--skip-if-not-root", action="store_true",
                        help="exit 77 instead of 1 where it cannot run")
    opts = parser.parse_args()
    build = os.path.abspath(opts.build)
    for binary in ("dlrm", "dlrmctl"):
        if not os.access(os.path.join(build, "bin", binary), os.X_OK):
            log("FAIL", f"no {build}/bin/{binary}: build first")
            return 1
    why = preflight()
    if why:
        log("SKIP", f"run_manifests: {why}")
        return SKIP if opts.skip_if_not_root else 1
    deadline = time.time() + opts.timeout
    dlrm = os.path.join(build, "bin", "dlrm")
    docs, namespace = load_manifests(opts.manifests, opts.namespace)
    missing = missing_programs(docs, image_entrypoint_cmd_and_workdir()[0])
    if missing:
        log("FAIL", f"the pods run {', '.join(missing)}, not on this machine: "
            "deploy/install-deps.sh installs them (Debian packages, as in deploy/Dockerfile)")
        return 1
    work = tempfile.mkdtemp(prefix="dlrm-k8s-")
    os.chmod(work, 0o755)
    cluster = Cluster(build, work, namespace, docs)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    failed = False
    try:
        # The Secrets, made as k8s/README.md ("TLS") tells users to.
        run(dlrm, "certs", "--out", os.path.join(work, "certs"), "--host", "dlrm-coordinator",
            "--host", f"*.dlrm-ps-headless.{namespace}.svc.cluster.local", "--days", "1")
        # The example job's data, where k8s/README.md has users put theirs: the workers' volume
        # mounted at /data (here the manifests' placeholder emptyDir, filled).
        data = os.path.join(work, "train.tsv")
        run(dlrm, "gen-data", "--out", data, "--rows", str(opts.rows), "--seed", "7")
        for d in docs:
            if d["kind"] != "Deployment":
                continue
            for c in d["spec"]["template"]["spec"].get("containers") or []:
                for m in c.get("volumeMounts") or []:
                    if m["mountPath"] == "/data":
                        cluster.prefill[(d["metadata"]["name"], m["name"])] = {"train.tsv": data}
        cluster.up_bridge()
        everything = pods_of(docs)
        for name, kind, owner, spec, labels in everything:
            cluster.add_pod(Pod(name, kind, owner, spec, labels))
        serving = [cluster.pods[p[0]] for p in everything if p[1] in ("StatefulSet", "Deployment")]
        # Kubernetes starts pods in any order: the last listed first, so that members start
        # before the coordinator they register with (plain manifests: workers, PS, coordinator).
        for pod in reversed(serving):
            cluster.start_pod(pod, deadline)
        for pod in serving:
            cluster.wait_ready(pod, deadline)
            args = " ".join(a for c in pod.spec["containers"] for a in c.get("args") or [])
            log("PASS", f"{pod.name} ready ({args})")
        # The chart's `helm test` Pod, then the example job's submit Job.
        for kind, what in (("Pod", "the chart's test job (helm test)"),
                           ("Job", "the example job, submitted by its Job")):
            for name in [p[0] for p in everything if p[1] == kind]:
                last = cluster.run_to_completion(cluster.pods[name], deadline)
                log("PASS", f"{name}: {what} succeeded", last)
        # Evictions (k8s/README.md, "Losing a member sends its job to RECOVERING"): a pod of
        # each kind deleted while a job trains, and the one its workload makes instead.
        for owner in opts.evict:
            cluster.evict_during_job(owner, deadline, opts.evict_epochs)
        cluster.check_running()
        log("PASS", "every StatefulSet and Deployment pod still running")
        owned = cluster.check_owners()
        log("PASS", f"the {owned} files and folders the pods wrote in their volumes belong to "
            "their runAsUser")
    except Failure as e:
        failed = True
        log("FAIL", str(e))
        if e.log_path and os.path.exists(e.log_path):
            with open(e.log_path) as f:
                for line in f.read().splitlines()[-25:]:
                    print(f"      | {line}")
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001: any error fails, after clean-up
        failed = True
        detail = getattr(e, "stderr", "") or ""
        what = f"interrupted ({str(e) or 'SIGINT'})" if isinstance(e, KeyboardInterrupt) else str(e)
        log("FAIL", f"run_manifests: {what}", detail.strip())
    finally:
        cluster.stop()
        cluster.remove_network()
        if opts.keep:
            print(f"run_manifests: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
