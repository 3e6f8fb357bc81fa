"""One lucidd reconcile with 1,000 and 10,000 pending jobs on the test cluster.

    scripts/testcluster.sh start && .venv/bin/python bench/bench_reconcile.py [--sizes 1000,10000]

Per size: four 8-GPU blockers fill the cluster, N plain `sbatch` jobs (1-8 GPUs, opted out of
profiling so they wait in `main`) are submitted, then lucidd runs reconcile cycles in-process
against the real slurmctld:
  first    every job is new: one move per partition, one SiteFactor write per distinct value
  steady   nothing changed: reads only (the target: <= 1 s at 1,000 and <= 5 s at 10,000)
  +10 new  ten new jobs: writes for those ten only
Printed: wall and CPU seconds of the cycle, Slurm calls by command, actions applied. Figures,
not a test (docs/deploy.md quotes them).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def sh(*argv, **kw):
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, **kw).stdout


def submit(n, script, gpus_cycle=(1, 2, 4, 8, 1, 1, 2)):
    """n sbatch calls, 4 at a time (process start-up, not slurmctld, is the slow part)."""
    lines = "\n".join(f"--gres=gpu:{gpus_cycle[k % len(gpus_cycle)]}" for k in range(n))
    subprocess.run(["xargs", "-P", "4", "-I", "{}", "sh", "-c",
                    f"sbatch -Q -J b -o /dev/null --comment lucid:noprofile {{}} {script} 60"],
                   input=lines, text=True, check=True)


def active():
    return [j for j in json.loads(sh("squeue", "--json"))["jobs"] if j["job_state"] in ("PENDING", "RUNNING")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    args = ap.parse_args()
    env = dict(line[len("export "):].split("=", 1) for line in sh(str(REPO / "scripts/testcluster.sh"), "env").splitlines())
    os.environ.update(env)
    from lucidd.daemon import Daemon
    from lucidd.live.config import config_from_dict

    tmp = Path(tempfile.mkdtemp(prefix="lucidd-bench-"))
    script = tmp / "job.sh"
    script.write_text("#!/bin/sh\nsleep $1\n")
    script.chmod(0o755)
    print(f"{'pending':>8} {'cycle':<9} {'wall_s':>7} {'cpu_s':>6} {'actions':>7}  slurm calls")
    for n in [int(x) for x in args.sizes.split(",")]:
        sh("scancel", "--user", "root")
        while active():
            time.sleep(1)
        cfg = config_from_dict({"daemon": {"state_dir": str(tmp / f"state{n}"), "record_cycles": 0},
                                "slurm": {"default_partition": "main"}})
        daemon = Daemon(cfg)
        daemon.start()
        for k in range(1, 5):  # blockers: every GPU busy, so the N jobs stay pending in main
            sh("sbatch", "-Q", "-J", "blocker", "-o", "/dev/null", "-w", f"gpu{k}", "--exclusive", "--gres=gpu:8",
               "--comment", "lucid:noprofile", str(script), "3600")
        daemon.reconciler.cycle()
        t0 = time.time()
        submit(n, script)
        print(f"# submitted {n} jobs in {time.time() - t0:.0f} s", flush=True)
        for label in ("first", "steady", "steady"):
            row = daemon.reconciler.cycle()
            print(f"{n:>8} {label:<9} {row.seconds:>7.2f} {row.cpu_seconds:>6.2f} {row.actions:>7}  {row.calls}",
                  flush=True)
        submit(10, script)
        row = daemon.reconciler.cycle()
        print(f"{n:>8} {'+10 new':<9} {row.seconds:>7.2f} {row.cpu_seconds:>6.2f} {row.actions:>7}  {row.calls}",
              flush=True)
    sh("scancel", "--user", "root")


if __name__ == "__main__":
    main()
