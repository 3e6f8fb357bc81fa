"""The real-Slurm tier: a Debian Slurm 22.05 controller, 4 slurmd with 8 fake GPUs each,
slurmdbd and PostgreSQL on loopback (scripts/testcluster.sh), and lucidd run as a real process.

The cluster is started once per session (or reused when SLURM_CONF already points at a live one,
as after `scripts/testcluster.sh start`). Without root or apt the tier skips with the reason;
under CI=true a skip fails the run (tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TC  # noqa: F401 - test modules import it from here; slurm_cluster lives there too

VENV_BIN = Path(sys.executable).parent


def sh(*argv, check=True, timeout=60, **kw) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv}: rc {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def squeue() -> list[dict]:
    return json.loads(sh("squeue", "--json"))["jobs"]


# squeue keeps an ended job a while (MinJobAge); every other state is a job still in play,
# including the REQUEUED / SUSPENDED / SIGNALING moments a requeue passes through
ENDED_STATES = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
                "OUT_OF_MEMORY", "SPECIAL_EXIT"}


def active_jobs() -> list[dict]:
    return [j for j in squeue() if j["job_state"] not in ENDED_STATES]


def wait_until(pred, timeout, what, step=0.5):
    """Poll `pred` until it returns something true. A busy slurmctld can fail one query ("Socket
    timed out", a cut-off --json), so a query that fails is retried like a false answer; the last
    failure is in the timeout's message."""
    end = time.time() + timeout
    last_error = None
    while time.time() < end:
        try:
            v = pred()
        except (AssertionError, json.JSONDecodeError, subprocess.TimeoutExpired) as e:
            v, last_error = None, e
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last query failed: {last_error})" if last_error else ""))


@pytest.fixture
def clean_cluster(slurm_cluster, tmp_path):
    """No job of an earlier test left, inbox DOWN, nodes idle."""
    sh("scancel", "--user", "root", check=False)
    sh("scancel", "--user", "nobody", check=False)
    wait_until(lambda: not active_jobs(), 60, "earlier jobs to end")
    sh("scontrol", "update", "partitionname=inbox", "state=DOWN")
    wait_until(lambda: "idle" in sh("sinfo", "-h", "-p", "main", "-o", "%t") and
               sh("sinfo", "-h", "-p", "main", "-t", "idle", "-o", "%D").strip() == "4", 60, "idle nodes")
    os.chmod(tmp_path, 0o777)  # job output files of uid nobody
    _wait_for_controller_to_settle()
    return slurm_cluster


def _wait_for_controller_to_settle():
    """lucidd holds requeues back while slurmctld has been up less than CONTROLLER_SETTLE_S (45 s): a
    test run first after the cluster's start saw its 14 s jobs end in profiling, never requeued."""
    from lucidd.backends.slurm import make_backend
    from lucidd.live.reconcile import CONTROLLER_SETTLE_S

    boot = make_backend("cli").controller_boot_time()
    if boot is not None:
        time.sleep(max(0.0, boot + CONTROLLER_SETTLE_S + 1 - time.time()))


JOB_SCRIPT = """#!/bin/bash
echo "start $(date +%s) part=$SLURM_JOB_PARTITION restarts=${SLURM_RESTART_COUNT:-0} gpus=$CUDA_VISIBLE_DEVICES"
sleep "$1"
echo "end $(date +%s)"
"""


@pytest.fixture
def job_script(tmp_path):
    p = tmp_path / "job.sh"
    p.write_text(JOB_SCRIPT)
    p.chmod(0o755)
    return p


def sbatch(script, seconds, *opts, name="t", cwd=None) -> int:
    out = sh("sbatch", "--parsable", "-J", name, "-o", f"{cwd or script.parent}/%j.out", *opts, str(script),
             str(seconds))
    return int(out.strip().split(";")[0])


def sacct_runs(job_ids, settle_s=60) -> dict:
    """job_id -> list of runs [(partition, state, start)] from `sacct -D` (requeued runs first).
    slurmdbd lags slurmctld by a moment: wait until every job's last run is recorded as ended.
    A run cancelled before it started has no start; it can only be the last (a requeued run
    started), so it sorts last, not first."""
    end = time.time() + settle_s
    while True:
        data = json.loads(sh("sacct", "--json", "--duplicates", "--allusers", "-j", ",".join(map(str, job_ids))))
        runs = {}
        for j in data["jobs"]:
            runs.setdefault(j["job_id"], []).append((j["partition"], j["state"]["current"], j["time"]["start"]))
        for v in runs.values():
            v.sort(key=lambda r: r[2] or math.inf)
        settled = all(j in runs and runs[j][-1][0] and runs[j][-1][1] not in ("RUNNING", "PENDING", "REQUEUED")
                      for j in job_ids)
        if settled:
            return runs
        if time.time() > end:  # slurmdbd far behind: say so, rather than fail later on a half-written record
            raise AssertionError(f"sacct has not recorded the end of every job after {settle_s}s: {runs}")
        time.sleep(0.5)


def write_config(path: Path, state_dir: Path, db_url: str | None = None, **sections) -> Path:
    cfg = {
        "daemon": {"interval_s": 1.0, "state_dir": str(state_dir), "failopen_after_s": 6.0, "history_interval_s": 2.0,
                   "log_level": "info"},
        # skip_when_free off: on this idle test cluster every job would start at once and skip
        # profiling; the tests that want that set it (test_a_job_that_would_start_at_once_skips_profiling).
        # long_tprof_s 0: the cases are written for one Tprof; lending (on, as shipped) then uses it too
        "profiler": {"tprof_s": 8, "nprof_gpus": 8, "capacity_gpus": 16, "skip_when_free": False,
                     "long_tprof_s": 0},
        "slurm": {"default_partition": "main"},
    }
    if db_url:
        cfg["database"] = {"url": db_url}
    for sec, vals in sections.items():
        cfg.setdefault(sec, {}).update(vals)
    lines = []
    for sec, vals in cfg.items():
        lines.append(f"[{sec}]")
        for k, v in vals.items():
            lines.append(f"{k} = {json.dumps(v)}")
    path.write_text("\n".join(lines) + "\n")
    return path


class Lucidd:
    """lucidd as a real process (what systemd would run)."""

    def __init__(self, config: Path, log: Path, *extra):
        self.config, self.log = config, log
        self.extra = extra
        self.proc = None

    def start(self):
        self.logf = open(self.log, "a")
        self.proc = subprocess.Popen([str(VENV_BIN / "lucidd"), "--config", str(self.config), *self.extra],
                                     stdout=self.logf, stderr=subprocess.STDOUT)
        return self

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self.logf.close()

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def started(self, timeout=60) -> "Lucidd":
        """Wait until lucidd has started (its database made) or exited. A test that reads the
        database right after the start needs it: since job_submit.lua 8, `-w` jobs skip the inbox and
        start at once, so a test that waited for such jobs no longer gave lucidd the time."""
        wait_until(lambda: re.search(r"lucidd \S+ started", self.text()) or self.proc.poll() is not None, timeout,
                   "lucidd to start")
        return self


@pytest.fixture
def lucidd_factory(tmp_path):
    made = []

    def make(config, *extra, log_name="lucidd.log"):
        d = Lucidd(config, tmp_path / log_name, *extra)
        made.append(d)
        return d

    yield make
    for d in made:
        d.stop(signal.SIGKILL, timeout=10)


def failopen(config) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "lucidd-failopen"), "--config", str(config)], capture_output=True,
                          text=True, timeout=120)


def partition_up(name) -> bool:
    return "State=UP" in sh("scontrol", "-o", "show", "partition", name)
