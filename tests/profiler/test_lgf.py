import pandas as pd

from lucidd.cluster import ClusterSpec, VCSpec
from lucidd.jobs import Job
from profiler.lgf import ProfilerConfig, carve_profiling_nodes, run_profiler


def test_short_jobs_finish_in_profiler_long_ones_requeue():
    jobs = [Job("short", "a", 1, 0, 50, 0), Job("long", "a", 2, 0, 5000, 1), Job("huge", "a", 16, 0, 10, 2)]
    out, stats = run_profiler(jobs, ProfilerConfig(time_limit=200, max_gpus=8, nodes=1, scaling=False))
    assert out["short"].finished and out["short"].end == 50
    assert out["long"].profiled and not out["long"].finished and out["long"].end == 200
    assert not out["huge"].profiled  # more GPUs than Nprof: goes straight to the main cluster
    assert stats == {"profiled": 2, "finished_in_profiler": 1, "borrowed_node_s": 0}


def test_least_gpus_first():
    jobs = [Job("eight", "a", 8, 0, 500, 0), Job("one", "a", 1, 0, 500, 1), Job("one-b", "a", 8, 1, 500, 2)]
    out, _ = run_profiler(jobs, ProfilerConfig(time_limit=100, nodes=1, scaling=False))
    assert out["one"].start == 0 and out["eight"].start == 100  # 1 GPU first; 8 waits for a whole node


def test_scaling_borrows_a_node_when_queue_grows():
    jobs = [Job(f"j{i}", "a", 8, 0, 1000, i) for i in range(14)]
    out, stats = run_profiler(jobs, ProfilerConfig(time_limit=100, nodes=1, scaling=True, max_extra_nodes=1))
    assert stats["borrowed_node_s"] > 0
    assert sorted(o.start for o in out.values())[:2] == [0, 0]  # the borrowed node starts a second job at once


def test_carve_takes_from_least_loaded_vc_that_still_fits():
    spec = ClusterSpec({"busy": VCSpec("busy", 4), "idle": VCSpec("idle", 4), "big": VCSpec("big", 2)})
    jobs = pd.DataFrame({"vc": ["busy", "idle", "big"], "gpu_num": [1, 1, 16], "duration": [10**6, 10, 1]})
    out = carve_profiling_nodes(spec, 1, jobs)
    assert out.vcs["idle"].nodes == 3 and out.vcs["busy"].nodes == 4 and out.vcs["big"].nodes == 2
