"""What an admin found replaying their own history before turning lucidd on (28 November 2026,
a helper's trial): one stray submit time re-sized the cluster without a word (and one in
milliseconds hung `lucid`), and a file cut off mid-row made a phantom VC."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lucidd.cluster import size_cluster_from_trace
from lucidd.errors import TraceError
from lucidd.traces import load_trace
from models.duration import rolling_estimates

HEAD = "job_id,submit_time,duration,gpu_num,user,vc\n"


def rows(n=60, gap=130):
    return [f"j{k},{1_795_824_068 + k * gap},{600 + 37 * k},{1 + k % 4},u{k % 5},vcA" for k in range(n)]


def test_a_file_cut_off_mid_row_is_a_bad_row_not_a_phantom_vc(tmp_path):
    p = tmp_path / "cut.csv"
    p.write_text(HEAD + "\n".join(rows()) + "\nj60,1795831000,1856,1,u")  # cut inside the user
    with pytest.raises(TraceError, match="ends in the middle of this row") as e:
        load_trace(p)
    assert e.value.row == 62
    t = load_trace(p, skip_bad_rows=True)
    assert len(t.jobs) == 60 and t.dropped == {"truncated last line": 1} and set(t.jobs["vc"]) == {"vcA"}


def test_a_whole_last_row_without_a_line_end_is_a_row(tmp_path):
    p = tmp_path / "whole.csv"
    p.write_text(HEAD + "\n".join(rows()))
    assert len(load_trace(p).jobs) == 60


def test_one_stray_submit_time_is_named_when_it_sizes_the_cluster(tmp_path):
    p = tmp_path / "stray.csv"
    p.write_text(HEAD + "\n".join(rows() + ["stray,0,100,1,u0,vcA"]) + "\n")
    spec = size_cluster_from_trace(load_trace(p).jobs)
    assert any("one gap between submissions" in n and "stray submit time" in n for n in spec.notes), spec.notes
    fine = tmp_path / "fine.csv"
    fine.write_text(HEAD + "\n".join(rows()) + "\n")
    assert not any("gap" in n for n in size_cluster_from_trace(load_trace(fine).jobs).notes)


def test_a_vc_sized_for_its_largest_job_says_so(tmp_path):
    p = tmp_path / "wide.csv"
    p.write_text(HEAD + "\n".join(rows() + ["wide,1795824100,60,4096,u0,vcA"]) + "\n")
    spec = size_cluster_from_trace(load_trace(p).jobs)
    assert spec.vcs["vcA"].nodes == 512
    assert any("largest job" in n and "vcA (512 nodes for a 4096-GPU job)" in n for n in spec.notes), spec.notes


def test_the_weekly_refits_are_made_where_jobs_are_not_for_every_empty_week():
    """A submit time in milliseconds asked for 165 million weekly refit points: `lucid` never ended."""
    n = 300
    t = np.arange(n) * 3600  # 12 days: two weekly refits before the stray one
    jobs = pd.DataFrame({"job_id": [str(k) for k in range(n)], "submit_time": np.append(t[:-1], 99_999_999_999_999),
                         "duration": 100 + np.arange(n) % 50, "gpu_num": 1, "user": "u", "vc": "v", "name": "x"})
    out = rolling_estimates(jobs)  # the refit points are the periods with jobs: 2, not 165 million
    assert len(out) == n and [r["version"] for r in out.attrs["refits"]] == [1, 99_999_999_999_999 // 604_800]


def test_explain_suggests_real_ids_for_array_tasks():
    """`explain job 32_9` suggested 321-325: int("32_1") is 321 in Python."""
    from lucidd.explain_cli import nearby_ids

    ids = ["29", "30", "31", "32_0", "32_1", "32_9", "34", "35"]
    assert "321" not in "".join(nearby_ids(ids, "32_5")) and set(nearby_ids(ids, "32_5")) <= set(ids)
    assert nearby_ids(ids, "32") == ["32_0", "32_1", "32_9"]  # a job's own tasks first
    assert nearby_ids(["1", "2", "5", "9", "40"], "4") == ["1", "2", "5", "9", "40"]


def test_the_timeline_of_lucid_standalone_counts_the_jobs_waiting_for_the_profiler():
    """Its timeline showed no queued job while summary.csv gave it the longest queueing of all:
    only the main cluster's queue was counted (an admin trial)."""
    from lucidd.experiment import make_experiment
    from lucidd.traces import sample_trace_path, sample_vc_config_path

    exp = make_experiment(load_trace(sample_trace_path(), start=2 * 86400, end=3 * 86400),
                          vc_config=sample_vc_config_path())
    res = exp.run("lucid-standalone")
    s = res.series.sort_values("time")
    span = s["time"].iloc[-1] - s["time"].iloc[0]
    waited = float((s["queued_jobs"].to_numpy()[:-1] * np.diff(s["time"].to_numpy())).sum())  # job-seconds
    queue_s = float(res.jobs["queue_s"].sum())
    assert span > 0 and queue_s > 0
    # every wait is in the series: job-seconds queued = the jobs' queueing delays (summary's queue)
    assert waited == pytest.approx(queue_s, rel=0.01)


def test_an_empty_vc_config_and_limits_no_kill_grace_explains_are_said_plainly(tmp_path):
    from lucidd.cluster import load_vc_config
    from lucidd.errors import ConfigError

    empty = tmp_path / "vcs.csv"
    empty.write_text("")
    with pytest.raises(ConfigError, match="VC config is an empty file"):
        load_vc_config(empty)
    p = tmp_path / "limits.csv"
    p.write_text(HEAD.rstrip("\n") + ",time_limit\n" + "\n".join(f"{r},60" for r in rows(5)) + "\n")
    text = load_trace(p).report()
    assert "ran more than twice theirs" in text and "is time_limit in seconds?" in text


def test_a_complete_last_row_with_a_quoted_line_break_is_not_a_cut_row(tmp_path):
    """The cut-row check took the last physical line for the last record (a review)."""
    p = tmp_path / "t.csv"
    p.write_text('job_id,name,submit_time,duration,gpu_num,vc\n1,x,0,10,1,a\n2,"multi\nline",5,10,1,a')
    assert list(load_trace(p, "csv").jobs["job_id"]) == ["1", "2"]
