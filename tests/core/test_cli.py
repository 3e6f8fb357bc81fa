"""`lucidctl simulate`: the scripted contract, and clean errors for bad input."""

import subprocess
import sys

import pandas as pd
import pytest

from lucidd.cli import main

GOOD = "job_id,user,vc,gpu_num,submit_time,duration\n1,u,a,1,0,100\n2,u,a,2,10,50\n3,v,a,8,20,300\n"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "lucidd.cli", *args], capture_output=True, text=True, timeout=300)


def test_default_run_on_sample_writes_contract_files(tmp_path):
    out = tmp_path / "o"
    assert main(["simulate", "--out", str(out), "--no-progress", "--policies", "fifo,sjf,qssf,srtf,tiresias"]) == 0
    summary = pd.read_csv(out / "summary.csv")
    for col in ["policy", "jobs", "avg_jct_s", "avg_queue_s", "p999_queue_s", "p50_jct_s", "p99_jct_s", "makespan_s"]:
        assert col in summary
    assert list(summary["policy"]) == ["fifo", "sjf", "qssf", "srtf", "tiresias"]
    jobs = pd.read_csv(out / "jobs_fifo.csv")
    for col in ["job_id", "vc", "gpu_num", "submit_time", "start_time", "end_time", "queue_s", "jct_s"]:
        assert col in jobs
    assert (out / "jct_cdf.png").stat().st_size > 1000 and (out / "timeline.png").exists()


def test_lucid_policies_run_on_a_trace_without_workload_columns(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(GOOD)
    out = tmp_path / "o"
    rc = main(["simulate", "--trace", str(trace), "--nodes", "2", "--out", str(out), "--no-progress", "--no-plots",
               "--policies", "tiresias,lucid,lucid-nopacking,lucid-noprofiler,lucid-oracle"])
    assert rc == 0
    s = pd.read_csv(out / "summary.csv").set_index("policy")
    assert set(s.index) == {"tiresias", "lucid", "lucid-nopacking", "lucid-noprofiler", "lucid-oracle"}
    assert {"profiler_finished", "packed_jobs", "gpu_util"} <= set(s.columns)
    assert (s["jobs"] == 3).all()


@pytest.mark.parametrize("content,needle", [
    ("job_id,gpu_num,duration\n1,1,5\n", "submit_time"),
    ("job_id,gpu_num,submit_time,duration\n1,1,yesterday-ish,5\n", "row 2"),
    ("job_id,gpu_num,submit_time,duration\n1,1,0,-5\n", "duration"),
    ("job_id,gpu_num,submit_time,duration\n1,1,0,\n", "duration"),
    ("job_id,gpu_num,submit_time,duration\n1,0,0,5\n", "gpu_num"),
    ("job_id,gpu_num,submit_time,duration\n1,64,0,5\n", "gpu_num"),  # larger than the 1-node cluster
])
def test_bad_trace_gives_message_and_nonzero_exit(tmp_path, content, needle):
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    r = run_cli("simulate", "--trace", str(trace), "--format", "csv", "--nodes", "1", "--out", str(tmp_path / "o"),
                "--no-progress", "--no-plots")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "bad.csv" in r.stderr and needle in r.stderr


def test_unknown_policy_and_missing_file_are_clean_errors(tmp_path):
    r = run_cli("simulate", "--policies", "fifo,nope", "--no-progress")
    assert r.returncode == 2 and "nope" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("simulate", "--trace", str(tmp_path / "missing.csv"), "--no-progress")
    assert r.returncode == 2 and "missing.csv" in r.stderr and "Traceback" not in r.stderr


def test_prior_jobs_train_models_but_are_not_replayed():
    from lucidd.experiment import make_experiment
    from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

    window = load_trace(sample_trace_path(), start=3 * 86400)
    exp = make_experiment(window, vc_config=sample_vc_config_path(), prior=load_trace(sample_trace_path()))
    assert len(exp.trace) == len(window.jobs)
    assert exp.prior is not None and len(exp.prior) > 0
    assert (exp.prior["submit_time"] < exp.trace["submit_time"].min()).all()
    assert not set(exp.prior["job_id"]) & set(exp.trace["job_id"])
