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
