#!/usr/bin/env python3
"""Chaos soak of a local cluster: jobs with checkpoints while children are killed and stopped.

Starts `dlrm local --keep-running` (2 parameter servers, 2 workers, mutual TLS) in a temporary
folder, runs one undisturbed job of each spec variant (the references), then for --seconds submits
small checkpointing jobs one after another (sometimes two at once) through dlrmctl while, at random
intervals of a few seconds, one fault hits one child: kill -9 of a parameter server or worker,
SIGSTOP of any child for a few seconds (one in five: a few seconds longer than the 14 s lease)
then SIGCONT, or kill -9 of the coordinator. Then it stops
the faults, lets the jobs end, stops the cluster and checks what a user would see:

  jobs_end         every job ends; none sits in PENDING/RUNNING/RECOVERING without any change
                   (state, step, recoveries) for longer than STUCK_S (see below)
  auc              a SUCCEEDED job's AUC is within AUC_TOLERANCE of the reference of its spec
                   and number of workers (run undisturbed first, on the same cluster)
  dlrmctl          every dlrmctl call returned within its --timeout (+ slack) and either
                   answered, or failed with exit 4 (coordinator unavailable) and a message while
                   the coordinator was down or restarting
  crashes          no child ends other than by this script's kill -9 (dlrm local logs each exit)
  no_leftovers     no process the cluster started is alive after the cluster stopped, and dlrm
                   local stopped every child without having to kill it
  resources        no child grows without bound in open fds, RSS or threads (/proc every 10 s;
                   an instance that lived 120 s must not grow by half and by 64 fds / 256 MiB /
                   32 threads from its first to its last quarter, and none may pass 512 fds,
                   2 GiB, 256 threads)
  ps_stores        the parameter servers' data folders hold no store of a finished job
  ps_job_folders   ... nor an (empty) folder of a finished job
  failures         a FAILED job failed for a reason the design allows (docs/DESIGN.md: a job
                   fails after training.max_recoveries losses; here the limit is far above the
                   faults, so any failure is reported)

Prints the seed first (replay: --seed N, same --seconds) and one JSON summary last; exit 1 when
a check fails, 2 on a set-up error. Only the processes it started are signalled; the folder is
removed on exit (also on Ctrl-C or failure) unless --keep.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# A job with no change of state, step or recoveries for this long is stuck. The longest pause the
# design allows: a lost member is noticed when its lease ends (14 s, LEASE_S), a call to a dead
# parameter server is retried for the PS client's budget (30 s) before a worker reports it, and a
# restarted coordinator gives every member a fresh lease before it expires anyone (another 14 s);
# the replacement then registers and every rank reloads the last checkpoint (a few seconds on
# these tables). 14 + 30 + 14 + 10 = 68 s; twice that leaves room for a loaded 2-core machine.
LEASE_S = 14
STUCK_S = 150
# Two runs of the same spec differ because the servers apply two workers' pushes in arrival
# order, and a recovered run retrains the steps after its checkpoint in another order again:
# docs/CHECKPOINTS.md measured 0.0015-0.0017 (bound 0.003) for one resume of a 2+2 job with hot
# rows, and docs/DESIGN.md up to 0.0037 between runs at aggressive learning rates. A job here may
# recover several times, so 0.01; a lost rank's data, a rollback to a wrong step or rows reset
# to their initial values moves the AUC of these jobs by far more (untrained: 0.5).
AUC_TOLERANCE = 0.01
TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"}


class Interrupted(Exception):
    pass


def log(msg):
    sys.stderr.write(time.strftime("%H:%M:%S ") + msg + "\n")
    sys.stderr.flush()


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


class Soak:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="dlrm-soak-")
        # Copies of the binaries: a rebuild during the soak (ninja writes build/bin in place)
        # neither fails a dlrmctl call nor restarts children from another build.
        self.bin = os.path.join(self.work, "bin")
        try:
            os.makedirs(self.bin)
            for b in ("dlrm", "dlrmctl"):
                shutil.copy2(os.path.join(os.path.abspath(args.build_dir), "bin", b), self.bin)
        except OSError:
            shutil.rmtree(self.work, ignore_errors=True)
            raise
        self.cluster_dir = os.path.join(self.work, "cluster")
        self.local = None  # Popen of dlrm local
        self.address = None
        self.tls = None
        self.seen_pids = {}  # pid -> (name, start time in clock ticks)
        self.stopped = {}  # pid -> time to SIGCONT
        self.jobs = {}  # job_id -> record
        self.job_seq = 0
        self.faults = []
        self.ctl_calls = 0
        self.ctl_problems = []
        self.coord_down_until = 0.0  # monotonic time before which exit 4 is expected
        self.samples = {}  # (name, pid) -> [(t, fds, rss_kib, threads)]
        self.references = {}  # variant -> auc
        self.checks = {}
        self.t0 = time.monotonic()

    # ---- set-up ----
    def spec(self, name, variant, epochs):
        v = {
            # the bench's job: PS only, staleness 0
            "plain": "staleness: 0, hot_budget: 0",
            # pipelined with a stale step, hot rows replicated on the workers, incremental chain
            "hot": "staleness: 1, hot_budget: auto, hot_refresh_steps: 40",
        }[variant]
        full_every = 1 if variant == "plain" else 3
        ckpt = os.path.join(self.work, "ckpt", name)
        path = os.path.join(self.work, "specs", name + ".yaml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(f"""name: {name}
model: {{dense_features: 13, bottom_mlp: [16, 8], top_mlp: [16, 1], embedding_dim: 8}}
tables:
  cardinalities: [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                  3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                  142572]
  max_rows: 1000
optimizer:
  dense: {{type: adam, learning_rate: 0.003}}
  sparse: {{type: rowwise_adagrad, learning_rate: 0.05}}
training: {{batch_size: 512, epochs: {epochs}, seed: 11, {v}, max_recoveries: 1000}}
data: {{train: [{self.work}/train.tsv], eval_fraction: 0.1}}
checkpoint: {{dir: {ckpt}, every_steps: 10, keep_last: 2, full_every: {full_every}}}
""")
        return path

    def start_cluster(self):
        subprocess.run([os.path.join(self.bin, "dlrm"), "gen-data", "--out",
                        os.path.join(self.work, "train.tsv"), "--rows", str(self.args.rows),
                        "--max-rows", "1000", "--seed", "21"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        boot = self.spec("boot", "plain", 1)
        # A few steps: the cluster is up once they are done.
        text = read(boot).replace("epochs: 1,", "epochs: 1, max_steps: 5,")
        with open(boot, "w") as f:
            f.write(text)
        self.local_out = os.path.join(self.work, "local.out")
        self.local_err = os.path.join(self.work, "local.err")
        cmd = [os.path.join(self.bin, "dlrm"), "local", "-c", boot, "--ps", "2", "--workers", "2",
               "--keep-running", "--no-progress", "--worker-threads", "1", "--lease-ttl",
               f"{LEASE_S}s", "--data-dir",
               self.cluster_dir]
        log("starting: " + " ".join(cmd))
        # A session of its own: a Ctrl-C reaches only this script, which stops the cluster.
        self.local = subprocess.Popen(cmd, stdout=open(self.local_out, "w"),
                                      stderr=open(self.local_err, "w"), start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            out = read(self.local_out)
            m = re.search(r"^coordinator: (\S+)$", out, re.M)
            t = re.search(r"^tls-dir: (\S+)$", out, re.M)
            if m and t:
                self.address, self.tls = m.group(1), t.group(1)
                log(f"cluster up: coordinator {self.address}")
                return
            if self.local.poll() is not None:
                raise RuntimeError("dlrm local exited at start-up:\n" + read(self.local_err)[-3000:])
            self.children()  # remember every pid it starts
            time.sleep(0.2)
        raise RuntimeError("dlrm local did not come up within 300 s")

    # ---- processes ----
    def children(self):
        """name -> pid of dlrm local's live children; remembers every pid seen."""
        out = {}
        if self.local is None:
            return out
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            stat = read(f"/proc/{d}/stat")
            if not stat:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if int(fields[1]) != self.local.pid:
                continue
            argv = read(f"/proc/{d}/cmdline").split("\0")
            if "--name" in argv:
                name = argv[argv.index("--name") + 1]
            elif "coordinator" in argv:
                name = "coordinator"
            else:
                continue
            pid = int(d)
            self.seen_pids[pid] = (name, fields[19])
            out[name] = pid
        return out

    def alive_seen(self):
        """Remembered cluster pids that still exist (the same process: same start time)."""
        left = []
        for pid, (name, start) in self.seen_pids.items():
            stat = read(f"/proc/{pid}/stat")
            if stat and stat[stat.rfind(")") + 2:].split()[19] == start:
                state = stat[stat.rfind(")") + 2:].split()[0]
                if state != "Z":
                    left.append({"pid": pid, "name": name})
        return left

    def sample_resources(self):
        now = time.monotonic() - self.t0
        for name, pid in self.children().items():
            try:
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except OSError:
                continue
            status = read(f"/proc/{pid}/status")
            rss = re.search(r"VmRSS:\s+(\d+)", status)
            thr = re.search(r"Threads:\s+(\d+)", status)
            if rss and thr:
                self.samples.setdefault((name, pid), []).append(
                    (now, fds, int(rss.group(1)), int(thr.group(1))))

    # ---- dlrmctl ----
    def ctl(self, *argv, timeout=5.0):
        cmd = [os.path.join(self.bin, "dlrmctl"), "--coordinator", self.address, "--tls-dir",
               self.tls, "--timeout", str(timeout), *argv]
        start = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 20)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired:
            rc, out, err = None, "", ""
        took = time.monotonic() - start
        self.ctl_calls += 1
        first = err.strip().splitlines()[0] if err.strip() else ""
        problem = None
        if rc is None:
            problem = f"no answer within {timeout + 20:.0f} s"
        elif took > timeout + 10:
            problem = f"took {took:.1f} s with --timeout {timeout}"
        elif rc == 4:
            if not first:
                problem = "exit 4 without a message"
            elif time.monotonic() > self.coord_down_until:
                problem = f"exit 4 while the coordinator was up: {first}"
        elif rc not in (0,):
            problem = f"exit {rc}: {first}"
        if problem:
            self.ctl_problems.append({"t": round(time.monotonic() - self.t0, 1),
                                      "call": " ".join(argv), "problem": problem})
        return rc, out

    # ---- jobs ----
    def submit(self, variant, reference=False, workers=2):
        self.job_seq += 1
        name = f"{'ref' if reference else 'soak'}-{self.job_seq}-{variant}-w{workers}"
        path = self.spec(name, variant, self.args.epochs)
        rc, out = self.ctl("submit", "-f", path, "--workers", str(workers), "--ps", "2", "-o",
                           "json", timeout=10)
        if rc != 0:
            log(f"submit of {name} failed (exit {rc}); will try again")
            return None
        job = json.loads(out)
        jid = job["job_id"]
        now = time.monotonic()
        self.jobs[jid] = {"id": jid, "name": name, "variant": variant, "reference": reference,
                          "workers": workers,
                          "state": job.get("state", "JOB_STATE_PENDING"), "step": 0,
                          "recoveries": 0, "changed": now, "submitted": now, "ended": None,
                          "auc": None, "message": "", "recovery_reasons": [], "stuck": False}
        log(f"submitted {jid} ({name})")
        return jid

    def poll(self, jid):
        rec = self.jobs[jid]
        rc, out = self.ctl("status", jid, "-o", "json")
        if rc != 0:
            return
        try:
            job = json.loads(out)
        except ValueError:
            self.ctl_problems.append({"call": f"status {jid}", "problem": "not JSON"})
            return
        state = job.get("state", "")
        step = int(job.get("progress", {}).get("step", 0))
        recs = int(job.get("recoveries", 0))
        now = time.monotonic()
        if (state, step, recs) != (rec["state"], rec["step"], rec["recoveries"]):
            if state != rec["state"]:
                log(f"{jid} ({rec['name']}) {rec['state']} -> {state} at step {step}")
            rec.update(state=state, step=step, recoveries=recs, changed=now)
        rec["recovery_reasons"] = [r.get("reason", "") for r in job.get("recovery_history", [])]
        if state in TERMINAL and rec["ended"] is None:
            rec["ended"] = now
            rec["message"] = job.get("message", "")
            rec["auc"] = job.get("final_metrics", {}).get("auc")
            rec["final_step"] = step
        if state not in TERMINAL and now - rec["changed"] > STUCK_S:
            rec["stuck"] = True

    def active(self):
        return [j for j, r in self.jobs.items() if r["ended"] is None and not r["stuck"]]

    def wait_jobs(self, limit_s):
        deadline = time.monotonic() + limit_s
        while self.active() and time.monotonic() < deadline:
            self.step_once(faults=False)
            time.sleep(1)

    # ---- faults ----
    def fault(self):
        kids = self.children()
        if not kids:
            return
        kind = self.rng.choices(["kill9", "stop", "kill9_coordinator"], weights=[5, 3, 1])[0]
        if kind == "kill9":
            victims = sorted(n for n in kids if n != "coordinator")
        else:
            victims = ["coordinator"] if kind == "kill9_coordinator" else sorted(kids)
        victims = [v for v in victims if kids.get(v) and kids[v] not in self.stopped]
        if not victims:
            return
        name = self.rng.choice(victims)
        pid = kids[name]
        t = round(time.monotonic() - self.t0, 1)
        if kind == "stop":
            # Mostly a few seconds (within the lease); one in five longer than the lease: the
            # member is expired (the coordinator: it expires nobody, a stall) and comes back.
            secs = round(self.rng.uniform(1.0, 6.0) if self.rng.random() < 0.8 else
                         self.rng.uniform(LEASE_S + 1, LEASE_S + 6), 1)
            os.kill(pid, signal.SIGSTOP)
            self.stopped[pid] = time.monotonic() + secs
            log(f"fault: SIGSTOP {name} (pid {pid}) for {secs} s")
            self.faults.append({"t": t, "kind": "stop", "target": name, "seconds": secs})
            if name == "coordinator":
                self.coord_down_until = max(self.coord_down_until, time.monotonic() + secs + 30)
        else:
            os.kill(pid, signal.SIGKILL)
            log(f"fault: kill -9 {name} (pid {pid})")
            self.faults.append({"t": t, "kind": kind, "target": name})
            if name == "coordinator":
                self.coord_down_until = max(self.coord_down_until, time.monotonic() + 60)

    def resume_stopped(self, all_now=False):
        for pid, at in list(self.stopped.items()):
            if all_now or time.monotonic() >= at:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                del self.stopped[pid]

    # ---- loop ----
    def step_once(self, faults):
        self.resume_stopped()
        for jid in self.active():
            self.poll(jid)
        now = time.monotonic()
        if now >= self.next_sample:
            self.sample_resources()
            self.ctl("members", "-o", "json")
            self.next_sample = now + 10
        if faults and now >= self.next_fault:
            self.fault()
            self.next_fault = now + self.rng.uniform(*self.args.fault_interval)

    def run(self):
        log(f"seed {self.args.seed} (replay: --seed {self.args.seed} --seconds "
            f"{self.args.seconds}); folder {self.work}")
        self.start_cluster()
        self.next_sample = time.monotonic()
        # The references: each variant once per number of workers, undisturbed, on the same
        # cluster. (One worker and two do not train the same model: a row both workers touch
        # gets two optimizer steps of half the gradient, docs/DESIGN.md "Update semantics".)
        for variant, workers in (("plain", 2), ("hot", 2), ("plain", 1), ("hot", 1)):
            jid = None
            while jid is None:
                jid = self.submit(variant, reference=True, workers=workers)
            self.wait_jobs(STUCK_S * 4)
            r = self.jobs[jid]
            if r["state"] != "JOB_STATE_SUCCEEDED" or r["auc"] is None:
                raise RuntimeError(f"reference job {jid} did not succeed: {r['state']} "
                                   f"{r['message']}")
            self.references[f"{variant}-w{workers}"] = r["auc"]
            log(f"reference {variant}-w{workers}: AUC {r['auc']:.4f} in {r['ended'] - r['submitted']:.0f} s")
        # The chaos.
        end = time.monotonic() + self.args.seconds
        self.next_fault = time.monotonic() + self.rng.uniform(*self.args.fault_interval)
        while time.monotonic() < end:
            if len(self.active()) == 0:
                # Sometimes two at once: of one worker each they run side by side on the same
                # parameter servers, of two the second waits in PENDING.
                two = self.rng.random() < 0.4
                for _ in range(2 if two else 1):
                    self.submit(self.rng.choice(["plain", "hot"]),
                                workers=self.rng.choice([1, 2]) if two else 2)
            self.step_once(faults=True)
            time.sleep(0.5)
        log("chaos over; letting the jobs end")
        self.resume_stopped(all_now=True)
        self.coord_down_until = max(self.coord_down_until, time.monotonic() + 5)
        self.wait_jobs(STUCK_S * 3)
        for jid in self.active():
            self.jobs[jid]["stuck"] = True
        # Parameter servers drop a finished job's tables when it leaves their heartbeat answer.
        deadline = time.monotonic() + 3 * LEASE_S
        while any(inside for _, inside in self.ps_leftovers()) and time.monotonic() < deadline:
            time.sleep(1)
        self.sample_resources()
        self.ps_left = self.ps_leftovers()

    def ps_leftovers(self):
        # Every job but the ones still running (the boot job of `dlrm local` included).
        running = {j for j, r in self.jobs.items() if r["ended"] is None}
        left = []
        for i in range(2):
            d = os.path.join(self.cluster_dir, f"ps-{i}")
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for n in names:
                if n not in running:
                    inside = sorted(os.listdir(os.path.join(d, n)))
                    left.append((f"ps-{i}/{n}", inside))
        return left

    def stop_cluster(self):
        if self.local is None:
            return
        self.resume_stopped(all_now=True)
        self.children()
        if self.local.poll() is None:
            os.kill(self.local.pid, signal.SIGINT)
            try:
                self.local.wait(60)
            except subprocess.TimeoutExpired:
                log("dlrm local did not stop within 60 s; killing it")
                os.kill(self.local.pid, signal.SIGKILL)
                self.local.wait()
        time.sleep(0.5)
        self.leftovers = self.alive_seen()
        for p in self.leftovers:  # ours (same pid and start time): do not leave them
            try:
                os.kill(p["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass

    # ---- checks ----
    def resource_growth(self):
        bad, summary = [], {}
        # Whatever an instance lived: far above what any child needs on these jobs (about 10-40
        # fds, 10-25 threads, 200-300 MiB).
        for (name, pid), s in self.samples.items():
            for i, key, cap in ((1, "fds", 512), (2, "rss_kib", 2 << 20), (3, "threads", 256)):
                top = max(x[i] for x in s)
                if top > cap:
                    bad.append(f"{name} (pid {pid}) {key} reached {top} (cap {cap})")
        for (name, pid), s in self.samples.items():
            if len(s) < 8 or s[-1][0] - s[0][0] < 120:
                continue
            q = max(2, len(s) // 4)
            head, tail = s[1:1 + q], s[-q:]  # the first sample is taken during start-up
            grow = {}
            for i, key, abs_lim in ((1, "fds", 64), (2, "rss_kib", 256 * 1024), (3, "threads", 32)):
                a, b = min(x[i] for x in head), min(x[i] for x in tail)
                grow[key] = [a, b]
                # Growth that persists through the last quarter (its minimum) and is large in
                # absolute and relative terms.
                if b - a > abs_lim and b > 1.5 * a:
                    bad.append(f"{name} (pid {pid}) {key} {a} -> {b} over "
                               f"{s[-1][0] - s[0][0]:.0f} s")
            summary[f"{name}/{pid}"] = grow
        return bad, summary

    def report(self):
        soak_jobs = [r for r in self.jobs.values() if not r["reference"]]
        stuck = [f"{r['id']} ({r['name']}) {r['state']} at step {r['step']}, unchanged for "
                 f"{time.monotonic() - r['changed']:.0f} s" for r in soak_jobs if r["stuck"]]
        auc_bad = []
        for r in soak_jobs:
            if r["state"] == "JOB_STATE_SUCCEEDED":
                ref = self.references[f"{r['variant']}-w{r['workers']}"]
                if r["auc"] is None or abs(r["auc"] - ref) > AUC_TOLERANCE:
                    auc_bad.append(f"{r['id']} ({r['name']}) AUC {r['auc']} vs reference "
                                   f"{ref:.4f} after {r['recoveries']} recoveries")
        failed = [{"job": r["id"], "name": r["name"], "state": r["state"],
                   "recoveries": r["recoveries"], "message": r["message"]}
                  for r in soak_jobs if r["state"] in ("JOB_STATE_FAILED", "JOB_STATE_CANCELLED")]
        growth_bad, growth = self.resource_growth()
        # dlrm local names how each child ended: only our kill -9 may end one.
        err = read(self.local_err)
        exits = re.findall(r"\] (\S+) (exited with code \d+|killed by signal \d+|stopped); "
                           r"restarting it", err)
        crashes = [f"{n} {how}" for n, how in exits if how != "killed by signal 9"]
        kills = sum(1 for f in self.faults if f["kind"].startswith("kill9"))
        unstoppable = re.findall(r"\] (\S+ \(pid \d+\) did not stop within \S+)", err)
        stores = [f"{d}: {' '.join(inside)}" for d, inside in self.ps_left if inside]
        folders = [d for d, inside in self.ps_left if not inside]
        kinds = {}
        for f in self.faults:
            kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        self.checks = {
            "jobs_end": {"ok": not stuck, "stuck": stuck, "bound_s": STUCK_S},
            "auc": {"ok": not auc_bad, "tolerance": AUC_TOLERANCE, "references": self.references,
                    "off": auc_bad},
            "failures": {"ok": not failed, "failed": failed},
            "dlrmctl": {"ok": not self.ctl_problems, "calls": self.ctl_calls,
                        "problems": self.ctl_problems[:20]},
            "crashes": {"ok": not crashes, "exits": len(exits), "kill9_sent": kills,
                        "crashed": crashes[:20]},
            "no_leftovers": {"ok": not self.leftovers and not unstoppable,
                             "left": self.leftovers, "killed_at_stop": unstoppable},
            "resources": {"ok": not growth_bad, "growth": growth_bad},
            # A finished job's store (shard-<i>) or snapshots (shard-<i>-snapshots) left behind.
            "ps_stores": {"ok": not stores, "left": stores},
            # A finished job's folder <data>/<job>, empty: one more entry per job, never removed.
            "ps_job_folders": {"ok": not folders, "left": folders[:10], "count": len(folders)},
        }
        ok = all(c["ok"] for c in self.checks.values())
        summary = {
            "seed": self.args.seed, "seconds": self.args.seconds, "ok": ok,
            "jobs": {"total": len(soak_jobs),
                     "succeeded": sum(r["state"] == "JOB_STATE_SUCCEEDED" for r in soak_jobs),
                     "failed": len(failed), "stuck": len(stuck),
                     "list": [{"job": r["id"], "name": r["name"], "state": r["state"],
                               "auc": r["auc"], "recoveries": r["recoveries"],
                               "seconds": round((r["ended"] or time.monotonic()) - r["submitted"])}
                              for r in self.jobs.values()]},
            "faults": {"total": len(self.faults), "by_kind": kinds},
            "recoveries": sum(r["recoveries"] for r in soak_jobs),
            "recovery_reasons": sorted({re.sub(r"\d+", "N", x) for r in soak_jobs
                                        for x in r["recovery_reasons"]}),
            "checks": self.checks,
            "resource_samples": growth,
            "folder": self.work if self.args.keep else None,
        }
        print(json.dumps(summary, indent=1))
        return ok


def main():
    env_seconds = os.environ.get("SOAK_SECONDS")
    env_seed = os.environ.get("SOAK_SEED")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--seconds", type=float, default=float(env_seconds or 600),
                   help="length of the chaos phase (env SOAK_SECONDS; default 600)")
    p.add_argument("--seed", type=int,
                   default=int(env_seed) if env_seed else random.SystemRandom().randrange(1 << 31),
                   help="seed of the faults and job choices (env SOAK_SEED; default random)")
    p.add_argument("--rows", type=int, default=32000, help="training rows generated")
    p.add_argument("--epochs", type=int, default=4, help="epochs of each job")
    p.add_argument("--fault-interval", type=float, nargs=2, default=[3.0, 10.0],
                   metavar=("MIN", "MAX"), help="seconds between faults (uniform)")
    p.add_argument("--keep", action="store_true", help="keep the folder (logs, checkpoints)")
    args = p.parse_args()

    try:
        soak = Soak(args)
    except OSError as e:
        log(f"error: {e} (build first: make build)")
        sys.exit(2)

    def on_signal(sig, _frame):
        raise Interrupted(signal.Signals(sig).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    code = 0
    try:
        soak.run()
    except Interrupted as e:
        log(f"interrupted ({e}); stopping the cluster")
        code = 130
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        log(f"error: {e}")
        code = 2
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        soak.leftovers = []
        try:
            soak.stop_cluster()
            if code == 0:
                code = 0 if soak.report() else 1
        finally:
            if args.keep:
                log(f"kept {soak.work}")
            else:
                shutil.rmtree(soak.work, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
