"""bench/bench_sweep.py's per-partition line (pure; no trace)."""

import importlib.util
import sys
from pathlib import Path

import pandas as pd

_PATH = Path(__file__).resolve().parents[2] / "bench" / "bench_sweep.py"
_spec = importlib.util.spec_from_file_location("bench_sweep", _PATH)
bs = sys.modules.get("bench_sweep")
if bs is None:
    bs = importlib.util.module_from_spec(_spec)
    sys.modules["bench_sweep"] = bs
    _spec.loader.exec_module(bs)


def test_per_vc_and_the_partition_that_loses_most():
    lucid = pd.DataFrame({"vc": ["a", "a", "b", "c"], "jct_s": [100.0, 300.0, 50.0, 900.0]})
    slurm = pd.DataFrame({"vc": ["a", "a", "b", "c"], "jct_s": [400.0, 400.0, 40.0, 1000.0]})
    lu, sl = {"vc_avg_jct_s": bs.per_vc(lucid)}, {"vc_avg_jct_s": bs.per_vc(slurm)}
    assert lu["vc_avg_jct_s"] == {"a": [2, 200.0], "b": [1, 50.0], "c": [1, 900.0]}
    line = bs.vc_line(lu, sl)
    # b: 50 / 40 = 1.25x, the only partition more than 10 % worse
    assert "worst b 1.25x (1 jobs)" in line and "1 of 3 partitions more than 10 % worse (1 jobs)" in line
    # one partition (a small cluster), or a summary cached without the key: no line
    assert bs.vc_line({"vc_avg_jct_s": {"a": [2, 1.0]}}, {"vc_avg_jct_s": {"a": [2, 1.0]}}) is None
    assert bs.vc_line({}, sl) is None


def test_idle_while_pending_counts_fragments_by_the_narrowest_pending_job():
    from lucidd.cluster import ClusterSpec, VCSpec

    spec = ClusterSpec({"a": VCSpec("a", 1, 8)})
    # one node of 8 GPUs. 0-100: job 1 (6 GPUs) runs, job 2 (8 GPUs) pends: 2 GPUs idle for 100 s,
    # the narrowest pending job asking 8. 100-150: job 2 runs (no idle); 150-160 job 3 (4 GPUs),
    # submitted at 100, runs; nothing pends after, so the idle then is not counted.
    jobs = pd.DataFrame({"vc": ["a", "a", "a"], "submit_time": [0, 0, 100], "start_time": [0.0, 100.0, 150.0],
                         "end_time": [100.0, 150.0, 160.0], "gpu_num": [6, 8, 4], "preemptions": [0, 0, 0]})
    got = bs.idle_while_pending(jobs, spec)
    assert got == {"gpu_h": round(200 / 3600, 1), "wide_gpu_h": round(200 / 3600, 1),
                   "wide_by_fewest_gpus": {"8": round(200 / 3600, 1)}}
    hours = jobs.assign(submit_time=jobs["submit_time"] * 3600, start_time=jobs["start_time"] * 3600,
                        end_time=jobs["end_time"] * 3600)
    assert bs.idle_while_pending(hours, spec) == {"gpu_h": 200.0, "wide_gpu_h": 200.0,
                                                  "wide_by_fewest_gpus": {"8": 200.0}}
    # a 1-GPU job pending beside the wide one: the idle is filed under 1 (it could have used it)
    more = pd.concat([hours, pd.DataFrame({"vc": ["a"], "submit_time": [50 * 3600], "start_time": [150.0 * 3600],
                                           "end_time": [151.0 * 3600], "gpu_num": [1], "preemptions": [0]})])
    got = bs.idle_while_pending(more, spec)
    assert got["gpu_h"] == 200.0 and got["wide_by_fewest_gpus"] == {"1": 100.0, "8": 100.0}
    # preemption or profiling runs: the frame does not list every run, so no figure
    assert bs.idle_while_pending(hours.assign(preemptions=[0, 1, 0]), spec) is None
    assert bs.idle_while_pending(hours.assign(profiled=[False, True, False]), spec) is None
