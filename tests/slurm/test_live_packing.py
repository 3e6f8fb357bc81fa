"""GPU packing against the real Slurm 22.05: job_submit.lua (LUCIDD_PACKING) turns 1-GPU requests
into 2 shards of one GPU, lucidd lowers profiled jobs that may share to 1 shard while their
partition waits for GPUs, and Slurm puts two such jobs on one GPU. The test cluster's gres.conf
has one Type per GPU and 2 shards each (scripts/testcluster.sh), as docs/deploy.md asks.
Only NVML is missing here: the profiling runs' figures are written to lucidd's database as the
sampler writes them (tests/slurm/test_sampler.py runs the sampler itself on real job processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from lucidd.live.store import Store

from .conftest import VENV_BIN, active_jobs, partition_up, sbatch, sh, squeue, wait_until, write_config

pytestmark = pytest.mark.slurm

SCRIPT = """#!/bin/bash
echo "part=$SLURM_JOB_PARTITION restarts=${SLURM_RESTART_COUNT:-0} cvd=$CUDA_VISIBLE_DEVICES shards=$SLURM_SHARDS_ON_NODE"
sleep "$1"
"""


@pytest.fixture
def packing_lua(clean_cluster):
    """The test cluster's job_submit.lua with LUCIDD_PACKING = true, put back as shipped after."""
    lua = Path(os.environ["SLURM_CONF"]).parent / "job_submit.lua"
    shipped = (Path(__file__).resolve().parents[2] / "lucidd" / "data" / "slurm" / "job_submit.lua").read_text()
    if "shard" not in sh("sinfo", "-h", "-o", "%G"):
        pytest.skip("the test cluster has no shards (started with LUCIDD_TC_SHARDS=0)")
    on = shipped.replace("local LUCIDD_PACKING = false", "local LUCIDD_PACKING = true")
    assert on != shipped
    lua.write_text(on)  # slurmctld reads the script again when its mtime changes
    try:
        yield lua
    finally:
        lua.write_text(shipped)


def _job(jid):
    return next((j for j in squeue() if j["job_id"] == jid), None)


def test_two_profiled_jobs_that_may_share_run_on_one_gpu(packing_lua, tmp_path, lucidd_factory):
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    cfg = write_config(tmp_path / "lucidd.toml", tmp_path / "state", profiler={"tprof_s": 25, "lend_idle_gpus": False},
                       packing={"enabled": True})  # gpu_memory_mib 0: the samplers' heartbeats, below
    daemon = lucidd_factory(cfg).start()
    # gpu2-4 busy (not profiled, no GPU request changed: 8-GPU requests stay whole GPUs)
    blockers = [sbatch(script, 300, "-w", f"gpu{n}", "--exclusive", "--gres=gpu:8", "--comment", "lucid:noprofile",
                       name=f"block{n}") for n in (2, 3, 4)]
    wait_until(lambda: all((_job(b) or {}).get("job_state") == "RUNNING" for b in blockers), 60, "the blockers to run")
    a, b, c = (sbatch(script, 240, "--gres=gpu:1", name=n) for n in ("tinyA", "tinyB", "mediumC"))
    for jid in (a, b, c):
        rec = _job(jid)
        assert rec["tres_per_node"] == "gres:shard:2" and "lucid:orig=tres_per_node=gres:gpu:1" in rec["admin_comment"]
    wait_until(lambda: all((_job(j) or {}).get("job_state") == "RUNNING" and _job(j)["partition"] == "profiling"
                           for j in (a, b, c)), 60, "the three jobs to run in profiling (on gpu1)")
    # what the NVML sampler on gpu1 would write for their profiling runs (Tprof 25 s leaves time for
    # these rows and the waiting job below to be in place before the first requeue)
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}").create_gpu_profiles()
    # (dated now: a row from before lucidd first saw the job is an earlier job's of the same id)
    t = int(time.time())
    store.save_gpu_profiles([SimpleNamespace(job_id=jid, partition="profiling", node="gpu1", first_t=t - 10, last_t=t,
                                             samples=5, util_samples=5, gpu_util=util, gmem_util=10.0,
                                             gmem_max_mib=3000.0, gpus={k})
                             for k, (jid, util) in enumerate(((a, 10.0), (b, 12.0), (c, 45.0)))])
    # ... and each node's heartbeat: lucidd takes main's smallest GPU, over the nodes sinfo lists in it
    for node in sorted(set(sh("sinfo", "-h", "-N", "-p", "main", "-o", "%N").split())):
        # (flushed after the rows' last reading, reading since before their first: whole profiles)
        store.save_gpu_node(node, int(time.time()), 8, 24576.0, "FakeGPU", "535.183.01", flushed_at=t + 1,
                            sampling_since=t - 60)
    # a 16-GPU job waits for two whole nodes: its partition waits for GPUs (reason Resources)
    waiter = sbatch(script, 5, "-N", "2", "--gres=gpu:8", "--comment", "lucid:noprofile", name="waiter")
    wait_until(lambda: (_job(waiter) or {}).get("state_reason") in ("Resources", "Priority")
               and _job(waiter)["partition"] == "main", 60, "the wide job to wait in main")
    # Tprof: requeued, lowered (A, B: Tiny) or not (C: Medium, and the default GSS 1 lets only Tiny
    # jobs share), released to main, started again
    wait_until(lambda: all((_job(j) or {}).get("job_state") == "RUNNING" and _job(j)["partition"] == "main"
                           for j in (a, b, c)), 120, "the three jobs to run in main")
    detail = {j: " ".join(_job(j).get("gres_detail") or []) for j in (a, b, c)}
    assert _job(a)["tres_per_node"] == "gres:shard:1" and _job(b)["tres_per_node"] == "gres:shard:1", detail
    assert _job(c)["tres_per_node"] == "gres:shard:2", detail
    gpu = {j: re.search(r"shard:g(\d+):[12]\(IDX:(\d+)\)", detail[j]) for j in (a, b, c)}
    assert all(gpu.values()), detail
    # A and B on one GPU of one node; C on a GPU of its own
    assert _job(a)["nodes"] == _job(b)["nodes"] and gpu[a].group(2) == gpu[b].group(2), detail
    assert (_job(c)["nodes"], gpu[c].group(2)) != (_job(a)["nodes"], gpu[a].group(2)), detail

    def out(jid):
        return (tmp_path / f"{jid}.out").read_text()

    wait_until(lambda: all("part=main" in out(j) for j in (a, b, c)), 30, "the jobs' output")
    line = {j: next(ln for ln in out(j).splitlines() if "part=main" in ln) for j in (a, b, c)}
    cvd = {j: re.search(r"cvd=(\S*)", line[j]).group(1) for j in (a, b, c)}
    assert cvd[a] == cvd[b] == gpu[a].group(2) and "shards=1" in line[a] and "shards=1" in line[b], line
    assert "shards=2" in line[c], line
    # explain tells why
    r = subprocess.run([str(VENV_BIN / "lucidctl"), "--json", "explain", "job", str(a), "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (act,) = [x for x in json.loads(r.stdout)["actions"] if x["kind"] == "shards"]
    assert act["status"] == "applied" and "may share a GPU" in act["reason"] and f"job {waiter}" in act["reason"]
    assert json.loads(r.stdout)["packing"]["class"] == "Tiny"
    text = subprocess.run([str(VENV_BIN / "lucidctl"), "explain", "job", str(c), "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "GPU packing: a GPU of its own" in text and "Medium" in text and "GSS 1" in text, text
    # lucidd gone: fail-open opens the inbox and gives a waiting 1-shard job a GPU of its own again
    daemon.stop()
    # held until it is where the test wants it: the inbox is up now, and Slurm once started the job
    # on gpu1's free GPUs between its submission and the update (CI, 28 November 2026)
    late = sbatch(script, 60, "-H", "--gres=gpu:1", name="late")
    sh("scontrol", "update", f"jobid={late}", "gres=shard:1")  # as lucidd would have lowered it
    sh("scontrol", "update", f"jobid={late}", "partition=main", "nodelist=gpu2")  # waits behind a blocker
    sh("scontrol", "release", str(late))
    wait_until(lambda: (_job(late) or {}).get("state_reason") in ("Resources", "Priority", "ReqNodeNotAvail"), 30,
               "the late job to wait")
    sh("scontrol", "update", "partitionname=inbox", "state=DOWN")
    # --force: lucidd stopped a moment ago, so its heartbeat is still fresh
    r = subprocess.run([str(VENV_BIN / "lucidd-failopen"), "--config", str(cfg), "--force"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert partition_up("inbox") and _job(late)["tres_per_node"] == "gres:shard:2", (r.stderr, _job(late))
    for jid in [*blockers, a, b, c, waiter, late]:
        sh("scancel", str(jid), check=False)
    wait_until(lambda: not active_jobs(), 60, "the jobs to end")


def test_jobs_with_gpu_only_options_keep_their_gpu_request(packing_lua, tmp_path):
    """--gpu-freq and --ntasks-per-gpu beside shards are refused by Slurm 22.05 at submission, and
    --gpu-bind leaves the srun steps of a 2-task job with no GPU: job_submit.lua leaves those jobs'
    GPU requests as they were (held here: only the submission matters)."""
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    kept = [sbatch(script, 5, "-H", "--gres=gpu:1", *opts, name="kept")
            for opts in (["--gpu-freq=high"], ["--ntasks-per-gpu=2"], ["-n2", "--gpu-bind=closest"])]
    plain = sbatch(script, 5, "-H", "--gres=gpu:1", "-n2", name="plain")
    for jid in kept:
        rec = _job(jid)
        assert rec["tres_per_node"] == "gres:gpu:1" and "lucid:orig=" not in (rec["admin_comment"] or ""), rec
    assert _job(plain)["tres_per_node"] == "gres:shard:2"
    for jid in [*kept, plain]:
        sh("scancel", str(jid), check=False)
    wait_until(lambda: not active_jobs(), 60, "the jobs to end")
