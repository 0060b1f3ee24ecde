#!/usr/bin/env python3
"""Checks that every query of dlrm-dashboard.json parses and returns data, with promtool.

Each panel query (Grafana variables replaced: $namespace -> .*, $__rate_interval -> 1m) becomes an
alert `absent(<query>)` in a temporary rules file; synthetic series for every dlrm_ metric the
dashboard names (counters growing, gauges set, histograms with buckets) feed `promtool test rules`,
which expects none of those alerts to fire. The series come from the list of metrics the service
exports (METRICS below, kept in step with docs), not from the dashboard, so a misspelt metric or
label, a missing `_bucket`, or a query that does not parse fails the check and names the panel.

  deploy/grafana/check_dashboard.py [--promtool PATH]

promtool is in Debian's `prometheus` package (`apt-get download prometheus && dpkg -x ...` gets it
without installing the server).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD = os.path.join(HERE, "dlrm-dashboard.json")

# The metrics the processes export (see docs/DEPLOY.md).
METRICS = ["dlrm_samples_trained_total", "dlrm_step_seconds", "dlrm_ps_lookup_seconds",
           "dlrm_ps_push_seconds", "dlrm_ps_lookup_rows_total", "dlrm_ps_push_rows_total",
           "dlrm_ps_memory_rows", "dlrm_ps_memory_bytes", "dlrm_ps_rocksdb_hits_total",
           "dlrm_ps_rows_created_total", "dlrm_ps_rocksdb_writes_total", "dlrm_members",
           "dlrm_jobs", "dlrm_pipeline_stage_busy_seconds_total",
           "dlrm_pipeline_stage_stall_seconds_total",
           "dlrm_pipeline_queue_depth", "dlrm_staleness_steps", "dlrm_hot_hit_ratio",
           "dlrm_hot_migrations_total", "dlrm_ps_bytes_per_sample", "dlrm_train_loss",
           "dlrm_train_epoch", "dlrm_eval_auc", "dlrm_eval_logloss", "dlrm_eval_step"]
HISTOGRAMS = {"dlrm_step_seconds", "dlrm_ps_lookup_seconds", "dlrm_ps_push_seconds",
              "dlrm_staleness_steps"}
# Extra label of each metric family that carries one, with two values.
LABELS = {"dlrm_members": ("role", ["ps", "worker"]), "dlrm_jobs": ("state", ["RUNNING", "FAILED"]),
          "dlrm_pipeline_stage_busy_seconds_total": ("stage", ["read", "lookup"]),
          "dlrm_pipeline_stage_stall_seconds_total": ("stage", ["read", "lookup"]),
          "dlrm_pipeline_queue_depth": ("queue", ["parsed", "looked_up"])}


def queries(dashboard):
    for panel in dashboard["panels"]:
        for sub in [panel] + panel.get("panels", []):
            for target in sub.get("targets", []):
                yield sub["title"], target["refId"], target["expr"]


def series_for(metric):
    base = 'namespace="dlrm", job="dlrm"'
    out = []
    for pod in ("p0", "p1"):
        labels = f'{base}, pod="{pod}"'
        if metric in HISTOGRAMS:
            for le, step in (("0.01", 5), ("0.1", 8), ("1", 10), ("+Inf", 10)):
                out.append((f'{metric}_bucket{{{labels}, le="{le}"}}', f"0+{step}x30"))
            out.append((f"{metric}_sum{{{labels}}}", "0+0.5x30"))
            out.append((f"{metric}_count{{{labels}}}", "0+10x30"))
        elif metric in LABELS:
            name, values = LABELS[metric]
            for v in values:
                grow = "0+3x30" if metric.endswith("_total") else "2x30"
                out.append((f'{metric}{{{labels}, {name}="{v}"}}', grow))
        elif metric.endswith("_total"):
            out.append((f"{metric}{{{labels}}}", "0+100x30"))
        else:
            out.append((f"{metric}{{{labels}}}", "0.5x30"))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--promtool", default="promtool")
    args = parser.parse_args()
    with open(DASHBOARD) as f:
        dashboard = json.load(f)

    rules, used = [], set()
    for i, (title, ref, expr) in enumerate(queries(dashboard)):
        concrete = expr.replace("$__rate_interval", "1m").replace('"$namespace"', '".*"')
        if "$" in concrete.replace("{{", ""):
            sys.exit(f"check_dashboard: panel '{title}' query {ref} has an unknown variable: {expr}")
        for name in re.findall(r"\bdlrm_[a-z_]+", concrete):
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            used.add(family if family in HISTOGRAMS else name)
        rules.append({"alert": f"Q{i}", "expr": f"absent({concrete})",
                      "labels": {"panel": title, "ref": ref}})
    if not rules:
        sys.exit("check_dashboard: no queries found")

    input_series = [{"series": s, "values": v} for m in METRICS for s, v in series_for(m)]
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": input_series,
        "alert_rule_test": [{"eval_time": "20m", "alertname": r["alert"], "exp_alerts": []}
                            for r in rules]}]}
    with tempfile.TemporaryDirectory() as tmp:
        # JSON is YAML: promtool reads both files as they are.
        with open(os.path.join(tmp, "rules.yml"), "w") as f:
            json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f, indent=1)
        with open(os.path.join(tmp, "test.yml"), "w") as f:
            json.dump(tests, f, indent=1)
        check = subprocess.run([args.promtool, "check", "rules", "rules.yml"], cwd=tmp,
                               capture_output=True, text=True)
        if check.returncode != 0:
            print(check.stdout + check.stderr)
            sys.exit("check_dashboard: a query does not parse (see above)")
        test = subprocess.run([args.promtool, "test", "rules", "test.yml"], cwd=tmp,
                              capture_output=True, text=True)
        if test.returncode != 0:
            print(test.stdout + test.stderr)
            failed = sorted(set(re.findall(r"alertname: (Q\d+)", test.stdout + test.stderr)))
            for name in failed:
                r = rules[int(name[1:])]
                print(f"  no data: panel '{r['labels']['panel']}' query {r['labels']['ref']}: "
                      f"{r['expr']}")
            sys.exit("check_dashboard: some queries return no data")
    unused = [m for m in METRICS if m not in used]
    print(f"check_dashboard: {len(rules)} queries parse and return data; "
          f"{len(METRICS) - len(unused)} of {len(METRICS)} metrics shown"
          + (f" (not shown: {', '.join(unused)})" if unused else ""))


if __name__ == "__main__":
    main()
