#!/usr/bin/env python3
"""Checks that every query of dlrm-dashboard.json parses and returns data, with promtool.

Each panel query (Grafana variables replaced: $namespace -> .*, $__rate_interval -> 1m) becomes an
alert `absent(<query>)` in a temporary rules file; synthetic series for every dlrm_ metric the
dashboard names (counters growing, gauges set, histograms with buckets) feed `promtool test rules`,
which expects none of those alerts to fire. The series come from the list of metrics the service
exports (METRICS below, kept in step with docs), not from the dashboard, so a misspelt metric or
label, a missing `_bucket`, or a query that does not parse fails the check and names the panel.

The eval gauges are fed as the workers serve them: every worker exports dlrm_eval_auc,
dlrm_eval_logloss and dlrm_eval_step, but only rank 0 evaluates; the others keep 0. A query that
names a dlrm_eval_ metric must leave those zeros out (alert `(<query>) == 0` must not fire), or
its panel draws an AUC and a log loss of 0 for every other worker.

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


# Rank 0 (pod p0) has evaluated at step 40; p1 has not and serves 0, as a worker that is not rank 0.
EVAL = {"dlrm_eval_auc": "0.8", "dlrm_eval_logloss": "0.45", "dlrm_eval_step": "40"}


def series_for(metric):
    base = 'namespace="dlrm", job="dlrm"'
    out = []
    for pod in ("p0", "p1"):
        labels = f'{base}, pod="{pod}"'
        if metric in EVAL:
            out.append((f"{metric}{{{labels}}}", f"{EVAL[metric] if pod == 'p0' else '0'}x30"))
        elif metric in HISTOGRAMS:
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
        if "dlrm_eval_" in concrete:
            rules.append({"alert": f"Z{i}", "expr": f"({concrete}) == 0",
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
            failed = sorted(set(re.findall(r"alertname: ([QZ]\d+)", test.stdout + test.stderr)))
            by_name = {r["alert"]: r for r in rules}
            for name in failed:
                r = by_name[name]
                what = "no data" if name[0] == "Q" else "shows the 0 of a worker that never evaluated"
                print(f"  {what}: panel '{r['labels']['panel']}' query {r['labels']['ref']}: "
                      f"{r['expr']}")
            sys.exit("check_dashboard: some queries return no data or a non-evaluating worker's 0")
    unused = [m for m in METRICS if m not in used]
    n_eval = sum(r["alert"][0] == "Z" for r in rules)
    print(f"check_dashboard: {len(rules) - n_eval} queries parse and return data ({n_eval} of "
          f"them leave out the 0 of workers that never evaluated); "
          f"{len(METRICS) - len(unused)} of {len(METRICS)} metrics shown"
          + (f" (not shown: {', '.join(unused)})" if unused else ""))


if __name__ == "__main__":
    main()
