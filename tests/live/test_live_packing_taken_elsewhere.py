"""GPU packing: lowered jobs taken where lucidd does not judge them, and the time-limit rule without an
estimate of the job's own. Each failed before its fix: an audit of the packing path (28 November 2026),
also shown on the real test cluster (a lowered job given 2 nodes ran beside another 1-shard job on
GPU 0 of gpu1 after the fail-open)."""
from __future__ import annotations

from types import SimpleNamespace

from lucidd.backends.base import LiveJob
from lucidd.live.config import config_from_dict
from lucidd.live.reconcile import Reconciler, open_inbox
from lucidd.live.store import Store
from orchestrator.live import LucidDecider
from tests.live.memslurm import Clock, MemSlurm

ORIG = "lucid:orig=tres_per_node=gres:gpu:1 lucid:partition=main"


def _cluster(tmp_path, packing=True, managed=None, partitions=("inbox", "profiling", "main")):
    cfg = {"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
           "models": {"dir": str(tmp_path / "models")},
           "profiler": {"tprof_s": 60, "skip_when_free": False, "lend_idle_gpus": False, "long_tprof_s": 0},
           "packing": {"enabled": packing, "gpu_memory_mib": 24576}}
    if managed is not None:
        cfg["slurm"] = {"managed_partitions": managed}
    cfg = config_from_dict(cfg)
    clock = Clock()
    slurm = MemSlurm(clock, partitions=partitions)
    store = Store(cfg.database.url).create()
    rec = Reconciler(cfg, slurm, store, LucidDecider(cfg), clock=clock, monotonic=clock)
    return cfg, clock, slurm, store, rec


def _cycles(rec, clock, seconds, step=10):
    for _ in range(int(seconds // step)):
        clock.t += step
        assert rec.cycle().ok


def _profiled_and_released(cluster, time_limit_s=None):
    """Job 5: a 1-GPU job lua turned into shard:2, profiled (Tiny, 3 GB), requeued and released to
    main while job 99 waits for GPUs there (as tests/live/test_live_packing.py)."""
    cfg, clock, slurm, store, rec = cluster
    slurm.jobs[99] = LiveJob(99, partition="main", gpus=8, reason="Resources", admin_comment="lucid:partition=main")
    slurm.submit(5, gpus=1, shards=2, time_limit_s=time_limit_s)
    slurm.jobs[5].admin_comment = ORIG
    _cycles(rec, clock, 10)
    assert slurm.jobs[5].partition == "profiling"
    slurm.start(5)
    store.create_gpu_profiles()
    store.save_gpu_profiles([SimpleNamespace(job_id=5, partition="profiling", node="gpu1", first_t=clock.t,
                                             last_t=clock.t + 50, samples=10, util_samples=10, gpu_util=10.0,
                                             gmem_util=5.0, gmem_max_mib=3000.0, gpus={0})])
    # its sampler read since before the run and wrote since it ended: the profile is whole
    store.save_gpu_node("gpu1", int(clock.t), 8, 24576.0, "FakeGPU", "535.183.01", flushed_at=int(clock.t) + 3600,
                        sampling_since=0)
    _cycles(rec, clock, 80)
    slurm.jobs[5].reason = "BeginTime"
    _cycles(rec, clock, 20)
    return cluster


def _lowered_in_main(tmp_path, **kw):
    """Job 5 as above, lowered to 1 shard in main."""
    cfg, clock, slurm, store, rec = _profiled_and_released(_cluster(tmp_path, **kw))
    j = slurm.jobs[5]
    assert (j.partition, j.pending, j.shards) == ("main", True, 1)
    return cfg, clock, slurm, store, rec


def test_a_lowered_job_moved_to_a_partition_lucidd_does_not_order_is_raised(tmp_path):
    """[slurm] managed_partitions = ["main"]; the owner moves the lowered job to `debug` (job_submit.lua
    lets users change a pending job's partition, and refuses them the GRES change that would undo the
    lowering). Nobody waits for GPUs anywhere: lucidd raises it (it is not in `waiting`, which holds
    the ordered partitions' jobs, and was left at one shard for good)."""
    cfg, clock, slurm, store, rec = _lowered_in_main(tmp_path, managed=["main"],
                                                     partitions=("inbox", "profiling", "main", "debug"))
    slurm.jobs[5].partition = "debug"     # owner: scontrol update jobid=5 partition=debug
    slurm.jobs[5].reason = "Priority"
    del slurm.jobs[99]                    # nobody waits for GPUs any more
    _cycles(rec, clock, 600)
    assert slurm.jobs[5].shards == 2, "lowered job left at shard:1 in an unmanaged partition with nobody waiting"


def test_packing_turned_off_raises_a_lowered_job_in_a_partition_lucidd_does_not_order(tmp_path):
    """docs/deploy.md: with [packing] enabled = false 'lucidd then raises every waiting job it had
    lowered back to a GPU of its own'. Not one its owner moved out of the managed partitions."""
    cfg, clock, slurm, store, rec = _lowered_in_main(tmp_path, managed=["main"],
                                                     partitions=("inbox", "profiling", "main", "debug"))
    slurm.jobs[5].partition = "debug"
    del slurm.jobs[99]
    cfg2 = config_from_dict({"daemon": {"state_dir": str(tmp_path), "interval_s": 10},
                             "models": {"dir": str(tmp_path / "models")},
                             "slurm": {"managed_partitions": ["main"]},
                             "profiler": {"tprof_s": 60, "skip_when_free": False, "lend_idle_gpus": False}})
    rec2 = Reconciler(cfg2, slurm, store, LucidDecider(cfg2), clock=clock, monotonic=clock)
    _cycles(rec2, clock, 120)
    assert slurm.jobs[5].shards == 2, "packing off, yet the job lucidd lowered still waits at shard:1"


def test_a_lowered_job_given_more_nodes_is_raised_by_lucidd_and_by_the_failopen(tmp_path):
    """`scontrol update jobid=N numnodes=2` (job_submit.lua now refuses it to users; an admin may) makes
    the lowered job `not packable` (nodes != 1): lucidd stopped judging it, and the fail-open's
    _raise_shared skipped it, so it ran with 1 shard per node, sharing a GPU on each."""
    cfg, clock, slurm, store, rec = _lowered_in_main(tmp_path)
    j = slurm.jobs[5]
    j.nodes, j.gpus = 2, 2               # as squeue reports it after the update (node_count 2, shard:1)
    del slurm.jobs[99]
    _cycles(rec, clock, 300)
    lucidd_raised = j.shards == 2
    open_inbox(slurm, cfg, "lucidd stopped")   # orderly stop / lucidd-failopen
    assert lucidd_raised and j.shards == 2, f"shards={j.shards}: a job lucidd lowered shares GPUs after lucidd stopped"


def test_the_time_limit_rule_does_not_trust_the_constant_default_estimate(tmp_path):
    """No history: the estimate is the constant [ordering] default_estimate_s (3600 s). A job with a
    80-min limit (4800 s) passes limit_blocker (3600 / 0.87 = 4138 s) and is lowered, whatever it really
    needs: one that runs 75 min alone takes 75 / 0.91 = 82 min beside the mildest measured Tiny partner
    (0.91, docs/deploy.md's table) and Slurm ends it (TIMEOUT). docs/deploy.md says only a job 'not yet
    estimated' is not held back; a made-up constant is not an estimate of this job: it keeps its GPU."""
    cfg, clock, slurm, store, rec = _profiled_and_released(_cluster(tmp_path), time_limit_s=4800)
    r = store.job(5)
    acts = [a.reason for a in store.actions_for(5) if a.kind == "shards"]
    assert slurm.jobs[5].shards == 2, (f"lowered on estimate {r.estimate_s} s ({r.estimate_source}) "
                                       f"against a {slurm.jobs[5].time_limit_s} s limit: {acts}")
