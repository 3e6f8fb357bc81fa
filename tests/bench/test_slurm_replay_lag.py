"""bench/slurm_replay.py's start_lag diagnostic (pure; no Slurm)."""

import importlib.util
import sys
from pathlib import Path

import pandas as pd

_PATH = Path(__file__).resolve().parents[2] / "bench" / "slurm_replay.py"
_spec = importlib.util.spec_from_file_location("slurm_replay", _PATH)
sr = sys.modules.get("slurm_replay")
if sr is None:
    sr = importlib.util.module_from_spec(_spec)
    sys.modules["slurm_replay"] = sr  # dataclasses look their module up there
    _spec.loader.exec_module(sr)


def test_start_lag_counts_sides_and_slurms_latency():
    # compression 60: one real second is 60 trace seconds
    real = pd.DataFrame({"job_id": ["a", "b", "c", "d"],
                         "real_start": [60, 1000, 5000, 7000],
                         "real_queue_s": [60.0, 0.0, 120.0, 3000.0]})
    sim = pd.DataFrame({"job_id": ["d", "c", "b", "a"],
                        "start_time": [7120, 4880, 1000, 0],
                        "queue_s": [3120, 0, 0, 0]})
    lines = sr.start_lag(real, sim, 60.0)
    assert lines[0] == "simulated start vs Slurm's: 2 earlier, 1 within one real second, 1 later"
    # a, b, c start at submission in the simulator; Slurm took 1, 0 and 2 real seconds
    assert lines[1].startswith("Slurm's start latency (real queue of the 3 jobs")
    assert "mean 1.00 s, max 2 s real" in lines[1]
