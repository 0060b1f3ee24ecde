#!/usr/bin/env python3
"""Checks rendered containers against the binaries they run (deploy/check.sh runs it).

  helm template ... | python3 k8s/checks/check_commands.py --bin build/bin [FILES...]

For every container of every Pod, StatefulSet, Deployment and Job that runs `dlrm` (the image's
entrypoint, no `command`: args[0] is the role) or `dlrmctl` (named in `command`, also inside a
`/bin/sh -c` script, whose "$@" are the container's args after $0):

  - every flag is one that `dlrm ROLE --help` / `dlrmctl [SUBCOMMAND] --help` of BIN lists, and
    a flag that takes a value has one;
  - no number in the args is in exponent notation (`--memory-budget=1.073741824e+09`: what Helm
    prints for an integer from a values file unless the template converts it);
  - every `$(VAR)` in the args names an env var of the container (the kubelet leaves an unknown
    one as it is);
  - every path a flag names (--data-dir, --tls-dir, --tokens, --checkpoint-root, --out, -f, ...)
    lies under a volumeMount of the container (the root filesystem is read-only), a writable
    one (not readOnly, not a Secret or ConfigMap) for the folders and files the process writes;
  - --listen and --advertise name the container port `grpc`, --metrics-port the port `metrics`
    and the pod's prometheus.io/port annotation (when there is one), and --coordinator a
    rendered Service `NAME:PORT` with that port.

A flag the binary does not accept stops the process at start-up (CrashLoopBackOff): this is what
a render with a renamed or removed flag would do on a cluster. Prints one line per problem and
exits 1 if any.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import time

import yaml

WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
# Flags whose value is a path: (writable, is a file).
PATH_FLAGS = {
    "--data-dir": (True, False), "--checkpoint-root": (True, False), "--port-file": (True, True),
    "--out": (True, True), "-o": (True, True), "--tls-dir": (False, False),
    "--tls-cert": (False, True), "--tls-key": (False, True), "--tls-ca": (False, True),
    "--tokens": (False, True), "--token-file": (False, True), "-f": (False, True),
    "--file": (False, True), "--config": (False, True), "-c": (False, True),
}
# dlrmctl's -o is --output (a format), not a path.
DLRMCTL_NOT_PATHS = {"-o", "--out"}

_help_cache = {}


def help_options(argv):
    """{flag: takes_value} of the options `argv --help` lists, and its subcommand names."""
    key = tuple(argv)
    if key not in _help_cache:
        for attempt in range(30):
            try:
                out = subprocess.run(argv + ["--help"], capture_output=True, text=True,
                                     timeout=30)
                break
            except OSError as e:  # a binary being relinked: ETXTBSY, EACCES for a moment
                if attempt == 29:
                    raise SystemExit(f"check_commands: cannot run {argv[0]}: {e}")
                time.sleep(2)
        text = out.stdout + out.stderr
        if out.returncode != 0:
            raise SystemExit(f"check_commands: {' '.join(argv)} --help exited {out.returncode}:"
                             f"\n{text}")
        options, subcommands, section = {}, set(), None
        for line in text.splitlines():
            if re.match(r"^\S.*:$", line):
                section = line[:-1]
                continue
            m = re.match(r"^  (-\S.*?)(?:\s{2,}|$)", line)
            if m and section == "Options":
                spec = m.group(1)
                names = re.findall(r"(?:^|,)(--?[A-Za-z][\w-]*)", spec.split(" ")[0])
                words = spec.split()
                # CLI11 writes the value's type after the names: TEXT, INT, FLOAT:SECONDS, ...
                takes_value = len(words) > 1 and bool(re.match(r"[A-Z]{3,}(?=$|[:=])", words[1]))
                for n in names:
                    options[n] = takes_value
            m = re.match(r"^  ([a-z][\w-]*)\s{2,}", line)
            if m and section == "Subcommands":
                subcommands.add(m.group(1))
        _help_cache[key] = (options, subcommands)
    return _help_cache[key]


def pod_of(doc):
    if doc.get("kind") == "Pod":
        return doc.get("spec") or {}, (doc.get("metadata") or {}).get("annotations") or {}
    if doc.get("kind") in WORKLOADS:
        template = (doc.get("spec") or {}).get("template") or {}
        return template.get("spec") or {}, (template.get("metadata") or {}).get("annotations") or {}
    return None, None


def parse_flags(args, options, where, problems):
    """[(flag, value or None)] of args against options; None entries are positionals."""
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or a == "-":
            out.append((None, a))
            i += 1
            continue
        name, eq, value = a.partition("=")
        if name not in options:
            problems.append(f"{where}: flag {name} is not accepted (not in --help)")
            out.append((name, value if eq else None))
            i += 1
            continue
        if options[name] and not eq:
            if i + 1 >= len(args):
                problems.append(f"{where}: flag {name} has no value")
                out.append((name, None))
                i += 1
                continue
            value = args[i + 1]
            i += 1
        elif not options[name] and eq:
            problems.append(f"{where}: flag {name} takes no value, got {a!r}")
        out.append((name, value if (eq or options[name]) else None))
        i += 1
    return out


def invocations(c):
    """(program, argv after the program) of the dlrm or dlrmctl calls a container makes."""
    command = c.get("command") or []
    args = [str(a) for a in c.get("args") or []]
    env = {e.get("name"): str(e["value"]) for e in c.get("env") or [] if "value" in e}
    if not command:
        return [("dlrm", args)]  # the image's entrypoint: tini -- dlrm
    if os.path.basename(command[-1]) in ("dlrm", "dlrmctl"):
        return [(os.path.basename(command[-1]), args)]
    if len(command) >= 3 and command[1] == "-c" and command[0].endswith("sh"):
        script = command[2]
        dollar_at = list(command[4:]) + args[1:] if len(command) > 3 else args[1:]
        found = []
        for line in script.splitlines():
            m = re.search(r"(\S*/)?(dlrmctl|dlrm)\s(.*)", line)
            if not m or line.lstrip().startswith("#"):
                continue
            words = []
            for w in shlex.split(m.group(3).split(";")[0].split(">")[0]):
                if w == "$@":
                    words += dollar_at
                else:
                    # The shell's $VAR / ${VAR} from the container's literal env values.
                    words.append(re.sub(r"\$\{?(\w+)\}?", lambda v: env.get(v.group(1), v.group(0)),
                                        w))
            found.append((m.group(2), words))
        return found
    return []


def check_container(where, c, spec, annotations, services, bin_dir, problems):
    env = {e.get("name") for e in c.get("env") or []}
    mounts = c.get("volumeMounts") or []
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    for program, argv in invocations(c):
        for a in argv:
            if re.search(r"(?<![\w.])[0-9]+(\.[0-9]+)?e[+-]?[0-9]+\b", a):
                problems.append(f"{where}: {a!r} has a number in exponent notation (Helm prints "
                                f"a large integer of a values file as a float64)")
            for var in re.findall(r"\$\((\w+)\)", a):
                if var not in env:
                    problems.append(f"{where}: {a!r} names $({var}), not in the container's env")
        binary = os.path.join(bin_dir, program)
        if program == "dlrm":
            if not argv or argv[0].startswith("-"):
                continue
            options, _ = help_options([binary, argv[0]])
            flags = parse_flags(argv[1:], options, f"{where} (dlrm {argv[0]})", problems)
        else:
            global_options, subcommands = help_options([binary])
            sub_index = next((i for i, a in enumerate(argv) if a in subcommands), None)
            if sub_index is None:
                problems.append(f"{where}: dlrmctl runs no subcommand: {argv}")
                continue
            sub_options, _ = help_options([binary, argv[sub_index]])
            flags = parse_flags(argv[:sub_index], global_options, f"{where} (dlrmctl)", problems)
            merged = dict(global_options, **sub_options)
            flags += parse_flags(argv[sub_index + 1:], merged,
                                 f"{where} (dlrmctl {argv[sub_index]})", problems)
        for name, value in flags:
            if name is None or value is None:
                continue
            if name in PATH_FLAGS and not (program == "dlrmctl" and name in DLRMCTL_NOT_PATHS):
                check_path(where, name, value, mounts, volumes, problems)
            if name in ("--listen", "--advertise") and program == "dlrm":
                port = int(value.rsplit(":", 1)[1])
                if ports.get("grpc") != port:
                    problems.append(f"{where}: {name}={value} but containerPort grpc is "
                                    f"{ports.get('grpc')}")
            if name == "--metrics-port":
                port = int(value)
                if port > 0 and ports.get("metrics") != port:
                    problems.append(f"{where}: --metrics-port={port} but containerPort metrics "
                                    f"is {ports.get('metrics')}")
                ann = annotations.get("prometheus.io/port")
                if ann is not None and str(ann) != str(port):
                    problems.append(f"{where}: --metrics-port={port} but the pod's "
                                    f"prometheus.io/port annotation is {ann}")
            if name == "--coordinator":
                host, _, port = value.rpartition(":")
                svc_ports = services.get(host.split(".")[0])
                if svc_ports is None:
                    problems.append(f"{where}: --coordinator={value}: no Service {host}")
                elif int(port) not in svc_ports:
                    problems.append(f"{where}: --coordinator={value}: Service {host} has ports "
                                    f"{sorted(svc_ports)}")


def check_path(where, flag, value, mounts, volumes, problems):
    writable, is_file = PATH_FLAGS[flag]
    if not value.startswith("/"):
        problems.append(f"{where}: {flag}={value} is not an absolute path")
        return
    best = None
    for m in mounts:
        mp = m.get("mountPath", "").rstrip("/") or "/"
        under = value == mp or value.startswith(mp + "/")
        if is_file and value == mp:
            under = False  # a file is inside the mounted folder, not the folder itself
        if under and (best is None or len(mp) > len(best.get("mountPath", ""))):
            best = m
    if best is None:
        problems.append(f"{where}: {flag}={value} is under no volumeMount (read-only root)")
        return
    if writable:
        volume = volumes.get(best.get("name")) or {}
        if best.get("readOnly") or "secret" in volume or "configMap" in volume:
            problems.append(f"{where}: {flag}={value} must be writable, but volume "
                            f"{best.get('name')} at {best.get('mountPath')} is read-only")


def check(docs, bin_dir):
    problems = []
    services = {}
    for d in docs:
        if d.get("kind") == "Service" and (d.get("metadata") or {}).get("name"):
            services[d["metadata"]["name"]] = {p.get("port") for p in d["spec"].get("ports") or []}
    for d in docs:
        spec, annotations = pod_of(d)
        meta = d.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName")
        if spec is None or not name:
            continue
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            where = f"{d['kind']} {name} container {c.get('name')}"
            check_container(where, c, spec, annotations, services, bin_dir, problems)
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="YAML files (default: stdin)")
    parser.add_argument("--bin", required=True, help="folder holding dlrm and dlrmctl")
    args = parser.parse_args()
    docs = []
    for stream in [open(f) for f in args.files] or [sys.stdin]:
        docs += [d for d in yaml.safe_load_all(stream) if d]
    problems = check(docs, args.bin)
    for p in problems:
        print(p)
    checked = sum(len(invocations(c)) for d in docs if pod_of(d)[0] is not None
                  for c in (pod_of(d)[0].get("initContainers") or [])
                  + (pod_of(d)[0].get("containers") or []))
    print(f"{checked} dlrm/dlrmctl invocations, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
