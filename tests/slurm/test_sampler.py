"""lucidd-sampler against real Slurm job processes and the real PostgreSQL: a job lucidd sends to
profiling is found from its processes (slurmd's environment here: the test cluster runs
proctrack/linuxproc, no job cgroups), its figures are written to lucidd's database, and `lucidctl
explain` shows them as the profiling run's. Only NVML is the stand-in (no GPU on this machine): it
reports the job's real process ids, as the driver would."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from lucidd.live.config import load_config
from lucidd.live.store import Store
from profiler.nvml_sampler import job_of_pid
from profiler.sampler_main import SamplerService
from tests.profiler.fake_nvml import FakeNvml

from .conftest import VENV_BIN, active_jobs, sbatch, sh, wait_until, write_config
from .test_live_daemon import _fresh_pg_database

pytestmark = pytest.mark.slurm


def test_a_profiling_runs_gpu_use_reaches_explain(clean_cluster, tmp_path, job_script, lucidd_factory):
    url = _fresh_pg_database(clean_cluster["LUCIDD_TEST_PG_URL"], f"lucidd_s{os.getpid()}")
    cfg_path = write_config(tmp_path / "lucidd.toml", tmp_path / "state", db_url=url,
                            profiler={"tprof_s": 30}, sampler={"node": "gpu1", "flush_s": 1.0})
    daemon = lucidd_factory(cfg_path).start()
    job = sbatch(job_script, 60, "--gres=gpu:2", name="sampled")
    running = wait_until(lambda: [j for j in active_jobs() if j["job_id"] == job and j["job_state"] == "RUNNING"
                                  and j["partition"] == "profiling"], 60, "the job to run in profiling")
    node = running[0]["nodes"]
    # the job's processes, as Slurm lists them (independent of how the sampler finds them). Right
    # after RUNNING slurmd may not know the step yet (listpids fails), lists it as pid -1 (seen in
    # CI), or lists a task not yet past slurmstepd's setup (its environment is still slurmstepd's);
    # and the script's `$(date)` child lives for milliseconds. So: the node's list, every pid the
    # job's, the same list twice in a row.
    seen = []

    def job_pids():
        out = subprocess.run(["scontrol", "listpids", str(job), node], capture_output=True, text=True, timeout=60)
        listed = sorted(int(line.split()[0]) for line in out.stdout.splitlines()[1:] if line.strip())
        ok = out.returncode == 0 and listed and all(p > 0 and job_of_pid(p) == (job, "profiling") for p in listed)
        seen.append(listed if ok else None)
        return listed if ok and len(seen) > 1 and seen[-2] == listed else None

    pids = wait_until(job_pids, 30, "slurmd to list the job's processes")
    assert pids and all(job_of_pid(p) == (job, "profiling") for p in pids)

    gib = 1024 ** 3
    nvml = FakeNvml([{"util": 70, "mem_util": 30, "procs": {pids[-1]: 3 * gib}},
                     {"util": 50, "mem_util": 10, "procs": {pids[0]: 1 * gib}},
                     {"util": 0, "mem_util": 0, "procs": {os.getpid(): gib}}])  # a process that is no job's
    cfg = load_config(str(cfg_path))
    svc = SamplerService(cfg, nvml, Store(url))
    svc.start()
    for _ in range(3):
        assert svc.step()
    svc.close()

    out = subprocess.run([str(VENV_BIN / "lucidctl"), "--json", "explain", "job", str(job), "--config", str(cfg_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    usage = json.loads(out.stdout)["gpu_usage"]
    assert len(usage) == 1, usage
    u = usage[0]
    assert (u["partition"], u["node"], u["profiling_run"], u["gpus"], u["samples"]) == ("profiling", "gpu1", True, "0,1", 3)
    assert u["gpu_util"] == 60 and u["gmem_util"] == 20 and u["gmem_mib"] == 3 * 1024
    text = subprocess.run([str(VENV_BIN / "lucidctl"), "explain", "job", str(job), "--config", str(cfg_path)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "GPUs (profiling run in profiling on gpu1" in text and "kernels running 60 % of the time" in text, text
    assert node  # the job really ran on a node of the cluster
    # the node's heartbeat, as lucidctl status reads it from the shared PostgreSQL
    out = subprocess.run([str(VENV_BIN / "lucidctl"), "--json", "status", "--config", str(cfg_path)],
                         capture_output=True, text=True, timeout=60)
    gs = json.loads(out.stdout)["gpu_samplers"]
    assert gs["heartbeat_nodes"] == 1 and gs["silent_nodes"] == [], gs
    assert gs["gpu_memory_mib"] == {"smallest": 24576.0, "largest": 24576.0}, gs
    sh("scancel", str(job))
    wait_until(lambda: not [j for j in active_jobs() if j["job_id"] == job], 60, "the job to end")
    daemon.stop()
