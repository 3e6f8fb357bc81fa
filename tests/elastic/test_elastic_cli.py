"""`lucidctl simulate --workload dl2`."""

import pandas as pd
import pytest

from lucidd.cli import main
from lucidd.metrics import SUMMARY_COLUMNS
from tests.conftest import SHARED

DL2 = SHARED / "dl2"
needs_dl2 = pytest.mark.skipif(not (DL2 / "config_speed.txt").is_file(), reason=f"needs DL2's data in {DL2}")


@needs_dl2
def test_simulate_dl2_writes_the_simulators_files(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["simulate", "--workload", "dl2", "--dl2-data", str(DL2), "--policies", "drf,optimus-oracle",
               "--out", str(out), "--no-plots", "--no-progress", "--jobs", "20", "--nodes", "24"])
    assert rc == 0
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert list(summary.policy) == ["drf", "optimus-oracle"] and set(summary.jobs) == {20}
    jobs = pd.read_csv(out / "jobs_drf.csv")
    assert {"model", "job_type", "epochs", "avg_ps", "avg_workers", "gpu_s"} <= set(jobs.columns)
    assert (jobs.jct_s > 0).all() and (out / "manifest.json").is_file()
    assert "optimus-oracle" in capsys.readouterr().out


def test_simulate_dl2_refuses_trace_flags_and_a_missing_model(tmp_path, capsys):
    assert main(["simulate", "--workload", "dl2", "--trace", "x.csv", "--out", str(tmp_path / "o")]) == 2
    assert "takes none of --trace" in capsys.readouterr().err
    assert main(["simulate", "--workload", "dl2", "--policies", "dl2", "--out", str(tmp_path / "o")]) == 2
    assert "needs --dl2-model" in capsys.readouterr().err
    assert main(["simulate", "--workload", "dl2", "--policies", "drf,lucid", "--out", str(tmp_path / "o")]) == 2
    assert "unknown policy lucid" in capsys.readouterr().err
