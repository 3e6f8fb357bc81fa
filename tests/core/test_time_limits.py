"""Users' own time limits: a trace's `time_limit` column (import-sacct writes it from sacct).

Slurm's backfill plans with a job's own limit where it has one (the modelled --limit-rule only for
the others), and every estimate-ordered policy caps its estimate there, as lucidd caps a live job's
at its TimeLimit. A modelled limit never caps an estimate: it is made from the true duration.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lucidd.cluster import ClusterSpec, VCSpec
from lucidd.errors import TraceError
from lucidd.experiment import Experiment
from lucidd.jobs import within_limit
from lucidd.policies.slurm_backfill import SlurmBackfill, SlurmConfig, parse_limit_rule
from lucidd.sacct_import import sacct_json_to_trace
from lucidd.simulator import job_time_limit, jobs_from_frame, simulate
from lucidd.traces import load_trace

from tests.core.test_slurm_baseline import PlainSlurm

DATA = Path(__file__).parent / "data"
H = 3600


def write(tmp_path, text):
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


# ----- the trace column ------------------------------------------------------------------------

def test_time_limit_column_is_read_in_seconds_and_unlimited_is_none(tmp_path):
    p = write(tmp_path, "job_id,submit_time,duration,gpu_num,time_limit\n"
                        "a,0,100,1,3600\nb,5,100,1,\nc,6,100,1,UNLIMITED\nd,7,100,1,60.2\ne,8,100,1,infinite\n")
    t = load_trace(p)
    lim = t.jobs.set_index("job_id")["time_limit"]
    assert lim["a"] == 3600 and lim["d"] == 61  # rounded up: a limit is never shorter than written
    assert lim[["b", "c", "e"]].isna().all()
    assert "time limits: 2 of 5 jobs have one" in t.report()
    assert "1 job(s) ran past theirs" in t.report()
    jobs = {j.job_id: j for j in jobs_from_frame(t.jobs)}
    assert jobs["a"].time_limit == 3600 and jobs["b"].time_limit is None
    # a job that ran past its limit (OverTimeLimit, the kill grace) keeps the limit it was given (an
    # estimate is capped there); Slurm's engine plans it with the duration it ran
    assert jobs["d"].time_limit == 61 and SlurmBackfill().limit(jobs["d"]) == 100


def test_no_time_limit_column_leaves_every_job_without_one(tmp_path):
    t = load_trace(write(tmp_path, "submit_time,duration,gpu_num\n0,10,1\n"))
    assert "time_limit" not in t.jobs and "time limits" not in t.report()
    assert jobs_from_frame(t.jobs)[0].time_limit is None


@pytest.mark.parametrize("cell", ["0", "-5", "abc", "0.5"])
def test_bad_time_limits_name_the_column_and_row(tmp_path, cell):
    p = write(tmp_path, f"submit_time,duration,gpu_num,time_limit\n0,10,1,3600\n1,10,1,{cell}\n")
    with pytest.raises(TraceError, match=r"time_limit") as e:
        load_trace(p)
    assert "row 3" in str(e.value) or "line 3" in str(e.value)
    assert len(load_trace(p, skip_bad_rows=True)) == 1


def test_job_time_limit_and_within_limit():
    assert job_time_limit(float("nan")) is None and job_time_limit(None) is None
    assert job_time_limit(3600.0) == 3600 and job_time_limit(30.2) == 31 and job_time_limit(0.2) == 1
    assert within_limit(5000.0, 3600) == 3600.0 and within_limit(100.0, 3600) == 100.0
    assert within_limit(5000.0, None) == 5000.0 and within_limit(None, 3600) is None


# ----- Slurm's backfill plans with the job's own limit -------------------------------------------

def frame(rows, limits=None):
    df = pd.DataFrame(rows, columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"] = "a"
    df["seq"] = range(len(df))
    if limits is not None:
        df["time_limit"] = [np.nan if v is None else float(v) for v in limits]
    return df


def experiment(rows, limits, nodes=1, gpn=8, rule="1,2,4", **options):
    spec = ClusterSpec({"a": VCSpec("a", nodes, gpn)})
    return Experiment(trace=frame(rows, limits), spec=spec, options={"limit_rule": rule, **options})


def test_backfill_uses_the_jobs_own_limit_and_looks_past_the_rules_smallest():
    # A holds 7 GPUs (limit 1 h by the rule); B (8 GPUs) is reserved at 3600. C, 1 GPU, has the
    # rule's smallest limit (1 h) and would end after 3600: it cannot start, and with modelled
    # limits alone nothing else could. D brings its own 10-minute limit and backfills at once.
    rows = [("A", 7, 0, 100), ("B", 8, 1, 100), ("C", 1, 2, 10), ("D", 1, 3, 10)]
    r = experiment(rows, [None, None, None, 600]).run("slurm").jobs.set_index("job_id")
    assert r.loc["D", "start_time"] == 3 and r.loc["C", "start_time"] > 3
    # without D's own limit it waits like C
    r = experiment(rows, [None, None, None, None]).run("slurm").jobs.set_index("job_id")
    assert r.loc["D", "start_time"] > 3
    # a long own limit keeps a short job out of a backfill slot the rule would have given it
    rows = [("A", 4, 0, 100), ("B", 8, 1, 100), ("C", 4, 2, 50)]
    assert experiment(rows, [None, None, None], rule="exact").run("slurm").jobs.set_index("job_id").loc[
        "C", "start_time"] == 2
    r = experiment(rows, [None, None, 7 * 24 * H], rule="exact").run("slurm").jobs.set_index("job_id")
    assert r.loc["C", "start_time"] == 200


@pytest.mark.parametrize("seed", range(8))
def test_fast_policy_with_own_limits_matches_plain_backfill(seed):
    """Random traces where some jobs bring limits (some below the rule's smallest): the fast policy
    makes the plain re-statement's decisions. The plain one reads limits per job through a
    duration-keyed table, so every job here has a distinct duration."""
    rng = random.Random(500 + seed)
    nodes, gpn = rng.choice([(1, 8), (2, 4), (4, 8)])
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= nodes * gpn]
    rule = parse_limit_rule(rng.choice(["0.5,1,2", "0.05,0.1,0.5,1,2"]))
    durations = rng.sample(range(1, 6000), 90)
    rows, limits = [], []
    for i, d in enumerate(durations):
        # many 1-GPU jobs: backfill's early stop (a 1-GPU job of the smallest limit cannot start)
        # is where a job's own limit below the rule's smallest matters
        rows.append((f"j{i}", rng.choice([1, 1, 1, *sizes]), rng.randrange(0, 4000), d))
        limits.append(rng.choice([None, d, d + rng.randrange(1, 600), 4 * d + 30]))
    df = frame(rows, limits)
    own = {d: (None if job_time_limit(v) is None else max(job_time_limit(v), d))
           for (_, _, _, d), v in zip(rows, df["time_limit"])}
    spec = ClusterSpec({"a": VCSpec("a", nodes, gpn)})
    min_own = int(df["time_limit"].min())

    class Table:
        def limit(self, duration):
            return own[duration] or rule.limit(duration)

    fast = simulate(jobs_from_frame(df), spec, lambda vc: SlurmBackfill(SlurmConfig(
        limit_rule=rule, min_time_limit_s=min_own))).jobs.set_index("job_id")
    plain_policy = PlainSlurm(Table())
    plain = simulate(jobs_from_frame(df), spec, lambda vc: plain_policy).jobs.set_index("job_id")
    pd.testing.assert_series_equal(fast["start_time"], plain["start_time"])
    for j in jobs_from_frame(df):  # and nobody outlives the limit Slurm planned with
        r = fast.loc[j.job_id]
        assert r["end_time"] - r["start_time"] <= (own[j.duration] or rule.limit(j.duration))


def test_min_limit_is_the_smaller_of_the_rules_and_the_jobs():
    rule = parse_limit_rule("1,2,4")
    assert SlurmConfig(limit_rule=rule).min_limit == H
    assert SlurmConfig(limit_rule=rule, min_time_limit_s=600).min_limit == 600
    assert SlurmConfig(limit_rule=rule, min_time_limit_s=7200).min_limit == H
    exp = experiment([("A", 1, 0, 10), ("B", 1, 1, 10)], [None, 900])
    assert exp.slurm_options()["min_time_limit_s"] == 900
    assert "min_time_limit_s" not in experiment([("A", 1, 0, 10)], None).slurm_options()


# ----- estimates are capped at the job's own limit, never at a modelled one -------------------------

def test_every_estimate_ordered_policy_caps_at_the_jobs_own_limit():
    """QSSF, `lucid` (Lucid on Slurm) and `lucid-standalone` read the same capped estimate: at the
    limit the user gave, not at the duration a job that overran it ran (that would be the truth)."""
    pytest.importorskip("orchestrator.simulation")
    rows = [(f"j{i}", 1, i, 100 + i) for i in range(6)]
    exp = experiment(rows, [None, 50, None, 50, 7 * 24 * H, None], rule="exact")
    exp._history = pd.Series([5000.0] * 6)  # QSSF's estimates: far above the short limits
    model = pd.DataFrame({"estimate": [5000.0] * 6, "source": ["test"] * 6}, index=exp.trace.index)
    exp.options["_cache"] = {"estimates": model, "duration_models": {}}
    want = [5000.0, 50.0, 5000.0, 50.0, 5000.0, 5000.0]  # j1 and j3 ran 101 and 103 s past their 50 s
    for policy in ("qssf", "lucid", "lucid-standalone"):
        got = exp.run(policy).jobs.set_index("job_id")["estimate_s"]
        assert [got[f"j{i}"] for i in range(6)] == want, policy


def test_lucid_on_slurm_orders_by_the_capped_estimate():
    """Two 8-GPU jobs wait behind a running one; the later one's estimate is far too long, but its
    own limit says it ends within 10 minutes, so lucid starts it first (under `slurm`'s age order
    the earlier one goes first)."""
    pytest.importorskip("orchestrator.simulation")
    from orchestrator.slurm_mode import LucidOnSlurm, live_config

    rows = [("R", 8, 0, 1000), ("old", 8, 10, 5000), ("new", 8, 20, 300)]
    spec = ClusterSpec({"a": VCSpec("a", 1, 8)})

    def starts(limits):
        jobs = jobs_from_frame(frame(rows, limits))
        for j in jobs:
            j.estimate = within_limit({"R": 1000.0, "old": 4000.0, "new": 90000.0}[j.job_id], j.time_limit)
        sim = LucidOnSlurm(jobs, spec, live_config({"profiling": False}))
        sim.run()
        return {j.job_id: j.start_time for j in jobs}

    s = starts([None, None, None])
    assert s["old"] < s["new"]
    s = starts([None, None, 600])
    assert s["new"] < s["old"]


# ----- import-sacct writes the column --------------------------------------------------------------

def test_import_sacct_writes_each_jobs_limit_in_seconds(tmp_path):
    data = json.loads((DATA / "sacct_2205_lucidd.json").read_text())
    df, rep = sacct_json_to_trace(data)
    by_id = df.set_index("job_id")["time_limit"]
    assert by_id["4"] == 525600 * 60 and pd.isna(by_id["5"])
    assert rep.with_limit == int(df["time_limit"].notna().sum()) > 0
    assert any(line.startswith(f"time limits: {rep.with_limit} of {rep.jobs} jobs") for line in rep.lines())
    out = tmp_path / "t.csv"
    df.to_csv(out, index=False)
    loaded = load_trace(out)
    assert loaded.jobs.set_index("job_id")["time_limit"].equals(by_id.astype(float).rename("time_limit")) or \
        (loaded.jobs.set_index("job_id")["time_limit"].fillna(-1) == by_id.astype(float).fillna(-1)).all()
