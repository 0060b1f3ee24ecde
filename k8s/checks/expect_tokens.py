"""Asserts where the chart puts the bearer tokens of auth.tokens (deploy/check.sh runs it).

  helm template dlrm k8s/helm/dlrm --set auth.tokens.existingSecret=S | \
    python3 k8s/checks/expect_tokens.py --secret S [--key KEY]
  helm template dlrm k8s/helm/dlrm | python3 k8s/checks/expect_tokens.py --none

  --secret NAME [--key KEY]  the coordinator container has --tokens=/etc/dlrm/tokens/KEY (KEY
                             default tokens) and TLS (--tls-dir), mounts volume tokens read-only
                             at /etc/dlrm/tokens, and its pod has that volume from Secret NAME,
                             item KEY only, mode 0440; no other container (parameter servers,
                             workers, init containers, the dlrmctl Job and test Pod) has a
                             --tokens flag, a tokens mount or a volume of Secret NAME
  --none                     no container has a --tokens flag or a tokens mount, no pod a tokens
                             volume
Prints what it checked and exits 1 at the first mismatch.
"""

import argparse
import sys

import yaml

TOKENS_DIR = "/etc/dlrm/tokens"
POD_KINDS = ("Pod", "StatefulSet", "Deployment", "Job")


def fail(message):
    print(f"expect_tokens: {message}")
    sys.exit(1)


def pod_spec(doc):
    return doc["spec"]["template"]["spec"] if "template" in doc["spec"] else doc["spec"]


def component(doc):
    return ((doc.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")


def token_uses(spec, container, secret):
    """What of the tokens a container and its pod carry: flags, mounts, volumes."""
    flags = [a for a in container.get("args") or [] if a.startswith("--tokens")]
    mounts = [m for m in container.get("volumeMounts") or [] if m["name"] == "tokens"]
    volumes = [v for v in spec.get("volumes") or [] if v["name"] == "tokens"
               or (secret is not None and (v.get("secret") or {}).get("secretName") == secret)]
    return flags, mounts, volumes


def check_coordinator(docs, secret, key):
    coordinators = [d for d in docs
                    if d["kind"] in ("StatefulSet", "Deployment") and component(d) == "coordinator"]
    if len(coordinators) != 1:
        fail(f"{len(coordinators)} coordinator workloads, want 1")
    spec = pod_spec(coordinators[0])
    container = spec["containers"][0]
    flags, mounts, volumes = token_uses(spec, container, secret)
    want = f"--tokens={TOKENS_DIR}/{key}"
    if flags != [want]:
        fail(f"coordinator token flags {flags}, want [{want}]")
    if not any(a.startswith("--tls-dir=") for a in container.get("args") or []):
        fail("coordinator has --tokens without --tls-dir")
    if len(mounts) != 1 or mounts[0]["mountPath"] != TOKENS_DIR or not mounts[0].get("readOnly"):
        fail(f"coordinator mounts tokens as {mounts}, want read-only at {TOKENS_DIR}")
    if len(volumes) != 1:
        fail(f"coordinator pod has token volumes {volumes}, want one")
    source = volumes[0].get("secret") or {}
    if volumes[0]["name"] != "tokens" or source.get("secretName") != secret:
        fail(f"coordinator volume {volumes[0]}, want tokens from Secret {secret}")
    if source.get("items") != [{"key": key, "path": key}]:
        fail(f"coordinator tokens volume items {source.get('items')}, want only {key}")
    if source.get("defaultMode") != 0o440:
        fail(f"coordinator tokens volume mode {source.get('defaultMode')}, want 0440 (288)")
    print(f"ok: coordinator {want}, Secret {secret} item {key} mounted read-only at {TOKENS_DIR}"
          " (mode 0440), with --tls-dir")
    return container


def check_others(docs, secret, coordinator):
    checked = 0
    for d in docs:
        if d["kind"] not in POD_KINDS:
            continue
        spec = pod_spec(d)
        containers = (spec.get("initContainers") or []) + spec["containers"]
        for c in containers:
            if c is coordinator:
                continue
            where = f"{d['kind']} {d['metadata']['name']} container {c['name']}"
            flags, mounts, _ = token_uses(spec, c, secret)
            if flags or mounts:
                fail(f"{where}: token flags {flags}, mounts {mounts}; want none")
            checked += 1
        if coordinator is None or coordinator not in spec["containers"]:
            _, _, volumes = token_uses(spec, {}, secret)
            if volumes:
                fail(f"{d['kind']} {d['metadata']['name']}: token volumes {volumes}; want none")
    if checked == 0:
        fail("no other containers rendered")
    print(f"ok: none of the other {checked} containers has --tokens or a tokens mount, "
          "no other pod a tokens volume")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secret")
    parser.add_argument("--key", default="tokens")
    parser.add_argument("--none", action="store_true")
    args = parser.parse_args()
    if bool(args.secret) == args.none:
        parser.error("give --secret NAME or --none")
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    coordinator = None if args.none else check_coordinator(docs, args.secret, args.key)
    check_others(docs, args.secret, coordinator)


if __name__ == "__main__":
    main()
