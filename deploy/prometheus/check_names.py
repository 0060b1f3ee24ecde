#!/usr/bin/env python3
"""Checks the metric names and labels that alerts.yml, the Grafana dashboard and docs/DEPLOY.md
use against real /metrics scrapes (deploy/prometheus_check.sh runs it on a `dlrm local` cluster).

  check_names.py --scrape [ROLE=]FILE [--scrape [ROLE=]FILE ...] [--repo DIR]

  - every dlrm_ metric an alert or recording rule of deploy/prometheus/alerts.yml or a panel of
    deploy/grafana/dlrm-dashboard.json queries is exported by some process (a histogram's
    _bucket/_sum/_count by the histogram), so no rule or panel waits for a series that never
    comes;
  - every label those queries match on or group by (`{label=...}`, `by (label)`,
    `without (label)`, `on (label)`) is a label of that metric in the scrapes or a target label
    (component, pod, namespace, instance, job, node, release; the scrape configs set them);
  - the metric list of deploy/grafana/check_dashboard.py (the series its test feeds) is exported;
  - every exported metric family is listed in the metrics table of docs/DEPLOY.md, and every
    dlrm_ name that table lists is exported;
  - each name of that table is exported with the table's type and exactly its labels, and (for
    scrapes given as ROLE=FILE, ROLE coordinator, ps or worker) by exactly the roles of its
    "from" column.
Prints one line per problem and exits 1 if any.
"""

import argparse
import json
import os
import re
import sys

import yaml

TARGET_LABELS = {"component", "pod", "namespace", "instance", "job", "node", "release", "le"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def read_scrapes(files):
    """{family: set of label names}, {family: type} and {family: set of roles} from text-format
    scrapes, each FILE or ROLE=FILE."""
    labels, types, roles = {}, {}, {}
    for spec in files:
        role, _, f = spec.rpartition("=")
        for line in open(f):
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                if types.get(m.group(1), m.group(2)) != m.group(2):
                    types[m.group(1)] = f"{types[m.group(1)]} and {m.group(2)}"
                else:
                    types[m.group(1)] = m.group(2)
                labels.setdefault(m.group(1), set())
                if role:
                    roles.setdefault(m.group(1), set()).add(role)
                continue
            if line.startswith("#") or not line.strip():
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(\{([^}]*)\})?", line)
            name = m.group(1)
            family = name
            for suffix in HISTOGRAM_SUFFIXES:
                if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                    family = name[: -len(suffix)]
            names = set(re.findall(r"(\w+)=\"", m.group(3) or ""))
            labels.setdefault(family, set()).update(names)
    return labels, types, roles


def documented_table(deploy_md):
    """{name: (type, label names, roles)} from the metrics table of docs/DEPLOY.md: a row names
    one or more metrics, one type for all or one per metric, the label names in backquotes (the
    values in parentheses after them are not labels), and the roles before any parenthesis of
    its "from" column."""
    table = {}
    for line in deploy_md.splitlines():
        if not line.startswith("| `dlrm_"):
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`(dlrm_\w+)`", cols[0])
        kinds = [k.strip() for k in cols[1].split(",")]
        if len(kinds) == 1:
            kinds *= len(names)
        label_names = set(re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", cols[2])))
        where = re.sub(r"\(.*", "", cols[3]).lower()
        row_roles = {r for w, r in (("coordinator", "coordinator"), ("ps", "ps"),
                                    ("worker", "worker")) if re.search(rf"\b{w}\b", where)}
        for i, name in enumerate(names):
            table[name] = (kinds[i] if i < len(kinds) else "?", label_names, row_roles)
    return table


def family_of(name, types):
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
            return name[: -len(suffix)]
    return name


def expr_problems(where, expr, labels, types):
    problems = []
    for m in re.finditer(r"\b(dlrm_\w+)(\{([^}]*)\})?", expr):
        name = m.group(1)
        family = family_of(name, types)
        if family not in labels:
            problems.append(f"{where}: {name} is exported by no process")
            continue
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", m.group(3) or ""):
            if label not in labels[family] | TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {label!r} "
                                f"(has {sorted(labels[family])})")
    # Grouping labels: each must be on some dlrm_ metric of the expression (or a target label).
    used = {family_of(n, types) for n in re.findall(r"\b(dlrm_\w+)", expr)}
    known = set(TARGET_LABELS)
    for family in used:
        known |= labels.get(family, set())
    if re.search(r"\blabel_replace\b", expr):
        known |= set(re.findall(r"label_replace\([^,]+,\s*\"(\w+)\"", expr, re.S))
    for m in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        for label in re.findall(r"\w+", m.group(1)):
            if label not in known:
                problems.append(f"{where}: groups by {label!r}, a label of none of "
                                f"{sorted(used)}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrape", action="append", required=True)
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args()
    labels, types, roles = read_scrapes(args.scrape)
    exported = {f for f in labels if f.startswith("dlrm_")}
    problems = []

    rules = yaml.safe_load(open(os.path.join(args.repo, "deploy/prometheus/alerts.yml")))
    n_rules = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            n_rules += 1
            name = rule.get("alert") or rule.get("record")
            problems += expr_problems(f"alerts.yml {name}", rule["expr"], labels, types)

    dashboard = json.load(open(os.path.join(args.repo, "deploy/grafana/dlrm-dashboard.json")))
    n_queries = 0

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            n_queries += 1
            problems += expr_problems(f"dashboard panel '{panel['title']}' {target['refId']}",
                                      target["expr"], labels, types)
    for var in (dashboard.get("templating") or {}).get("list", []):
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        m = re.match(r"label_values\((dlrm_\w+),\s*(\w+)\)", query or "")
        if m and m.group(1) not in exported:
            problems.append(f"dashboard variable {var['name']}: {m.group(1)} is exported by "
                            f"no process")

    sys.path.insert(0, os.path.join(args.repo, "deploy/grafana"))
    import check_dashboard  # noqa: E402 (its METRICS list)
    for name in check_dashboard.METRICS:
        if name not in exported:
            problems.append(f"check_dashboard.py METRICS: {name} is exported by no process")

    deploy_md = open(os.path.join(args.repo, "docs/DEPLOY.md")).read()
    table = [line for line in deploy_md.splitlines() if line.startswith("| `dlrm_")]
    documented = set()
    for line in table:
        documented |= set(re.findall(r"`(dlrm_\w+)`", line.split("|")[1]))
    for name in sorted(exported - documented):
        problems.append(f"docs/DEPLOY.md: {name} ({types.get(name)}) is exported but not in the "
                        f"metrics table of section 4")
    for name in sorted(documented - exported):
        problems.append(f"docs/DEPLOY.md: the metrics table lists {name}, which no process "
                        f"exports")
    for name, (kind, label_names, row_roles) in sorted(documented_table(deploy_md).items()):
        if name not in exported:
            continue
        if kind != types.get(name):
            problems.append(f"docs/DEPLOY.md: the metrics table says {name} is a {kind}; it is "
                            f"exported as a {types.get(name)}")
        served_labels = labels[name] - {"le"}
        if label_names != served_labels:
            problems.append(f"docs/DEPLOY.md: the metrics table gives {name} the labels "
                            f"{sorted(label_names)}; it is exported with {sorted(served_labels)}")
        if name in roles and row_roles != roles[name]:
            problems.append(f"docs/DEPLOY.md: the metrics table says {name} comes from "
                            f"{sorted(row_roles)}; it is exported by {sorted(roles[name])}")

    for p in problems:
        print(p)
    print(f"{len(exported)} exported metric families; {n_rules} rules, {n_queries} dashboard "
          f"queries and {len(documented)} documented names checked; {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
