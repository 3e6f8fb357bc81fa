"""The `slurm` baseline: Slurm's age priority with sched/backfill judged by time limits.

Hand-made scenarios pin the semantics; a plain, slow re-statement of backfill (every examined job
gets its reservation, no shortcuts) must make the same decisions as the fast policy on random traces.
"""

import random

import pandas as pd
import pytest

from lucidd.cluster import ClusterSpec, VCSpec, place_consolidated
from lucidd.errors import ConfigError
from lucidd.policies.base import Policy, Start
from lucidd.policies.baselines import BASELINES
from lucidd.policies.slurm_backfill import LimitRule, SlurmBackfill, SlurmConfig, parse_limit_rule
from lucidd.simulator import jobs_from_frame, simulate

H = 3600


def frame(rows):
    df = pd.DataFrame(rows, columns=["job_id", "gpu_num", "submit_time", "duration"])
    df["vc"] = "a"
    df["seq"] = range(len(df))
    return df


def run(rows, nodes=1, gpn=8, rule="exact", policy=None, **cfg):
    spec = ClusterSpec({"a": VCSpec("a", nodes, gpn)})
    jobs = jobs_from_frame(frame(rows))
    make = policy or (lambda: SlurmBackfill(SlurmConfig(limit_rule=parse_limit_rule(rule), **cfg)))
    return simulate(jobs, spec, lambda vc: make()).jobs.set_index("job_id")


# ----- limit rule ----------------------------------------------------------------------------

def test_default_rule_rounds_up_to_the_next_step():
    rule = LimitRule()
    assert rule.describe() == "1,2,4,8,12,24,48,72,168"
    assert [rule.limit(d) for d in (0, 1, H, H + 1, 3 * H, 5 * H, 13 * H, 30 * H, 49 * H, 100 * H, 168 * H)] == \
        [H, H, H, 2 * H, 4 * H, 8 * H, 24 * H, 48 * H, 72 * H, 168 * H, 168 * H]
    # past the last step: whole multiples of it, so no job outlives its limit
    assert rule.limit(168 * H + 1) == 336 * H and rule.limit(1285 * H) == 8 * 168 * H
    assert parse_limit_rule(None) == rule and parse_limit_rule("1,2,4,8,12,24,48,72,168") == rule


def test_exact_and_factor_rules():
    exact = parse_limit_rule("exact")
    assert [exact.limit(d) for d in (0, 1, 59, 7200)] == [1, 1, 59, 7200]
    x2 = parse_limit_rule("x2")
    assert [x2.limit(d) for d in (0, 1, 59, 7200)] == [1, 2, 118, 14400]
    assert parse_limit_rule("X1.5").limit(3) == 5 and parse_limit_rule(" x1 ").limit(10) == 10
    steps = parse_limit_rule("0.5, 1,3")
    assert steps.steps_s == (1800, 3600, 10800) and steps.limit(4000) == 10800 and steps.limit(11000) == 21600
    for rule in (LimitRule(), exact, x2, steps):
        for d in (0, 1, 1799, 1800, 1801, 10**7):
            assert rule.limit(d) >= d  # never killed at its limit


@pytest.mark.parametrize("text", ["", "abc", "x", "x0.5", "x-2", "xnan", "2,1", "1,1", "1,-2", "0", "1,,2",
                                  "1,inf", "exact,1"])
def test_bad_limit_rules_are_refused_naming_the_flag(text):
    with pytest.raises(ConfigError, match="--limit-rule"):
        parse_limit_rule(text)


# ----- backfill on hand-made scenarios ---------------------------------------------------------

def test_short_job_backfills_before_the_reservation_and_long_one_does_not():
    # A holds 4 of 8 GPUs until 100; B (8 GPUs) is reserved at 100. C (4 GPUs, 50 s) ends before
    # that and backfills; D (4 GPUs, 200 s) would delay B and waits for it.
    r = run([("A", 4, 0, 100), ("B", 8, 1, 100), ("C", 4, 2, 50), ("D", 4, 3, 200)])
    assert r.loc["C", "start_time"] == 2 and r.loc["B", "start_time"] == 100
    assert r.loc["D", "start_time"] == 200  # after B, although it fitted beside A at t=3


def test_fifo_order_by_submit_time_without_backfill_room():
    r = run([("A", 8, 0, 100), ("B", 8, 1, 100), ("C", 1, 2, 10)])
    assert list(r.start_time) == [0, 100, 200]  # C would end by 210 > B's start: no backfill
    # same second: trace order (seq) decides
    r = run([("A", 8, 0, 10), ("B", 8, 5, 10), ("C", 8, 5, 1)])
    assert list(r.start_time) == [0, 10, 20]
    # a job that fits starts at once even when an earlier one ran long
    r = run([("A", 2, 0, 1000), ("B", 2, 1, 10)])
    assert r.loc["B", "start_time"] == 1


def test_backfill_is_judged_by_the_jobs_own_limit_not_its_duration():
    rows = [("A", 4, 0, 100), ("B", 8, 1, 100), ("C", 4, 2, 50)]
    assert run(rows, rule="exact").loc["C", "start_time"] == 2
    # with hour steps A's limit ends at 3600 and C's would end at 3602: C waits although it
    # would really have finished by 52
    r = run(rows, rule="1,2,4")
    assert r.loc["C", "start_time"] == 200 and r.loc["B", "start_time"] == 100


def test_top_jobs_reservation_uses_time_limits_not_true_durations():
    # x2: A (4 GPUs, 1000 s) has a 2000 s limit, so B's reservation is at 2000 although A really
    # ends at 1000. C (700 s, limit 1400) ends by 1402 <= 2000 and backfills; judged by true
    # durations (B at 1000) it would not have.
    r = run([("A", 4, 0, 1000), ("B", 8, 1, 100), ("C", 4, 2, 700)], rule="x2")
    assert r.loc["C", "start_time"] == 2 and r.loc["B", "start_time"] == 1000


def test_every_examined_higher_job_is_protected_not_only_the_top_one():
    # 2 nodes x 4 GPUs. A holds node 0 until 100, E 3 GPUs of node 1 until 1000. B (top) is
    # reserved on node 0 from 100, C (second) on node 1 from 1000. D (1 GPU, 1500 s) fits on
    # node 1's free GPU now and misses B's reservation, but would delay C's: it waits.
    rows = [("A", 4, 0, 100), ("E", 3, 0, 1000), ("B", 4, 1, 1000), ("C", 4, 2, 100), ("D", 1, 3, 1500)]
    r = run(rows, nodes=2, gpn=4)
    assert list(r.loc[["B", "C", "D"], "start_time"]) == [100, 1000, 1100]
    # with C's start beyond the window only B is protected: D backfills and C waits for node 0
    r = run(rows, nodes=2, gpn=4, bf_window_s=500)
    assert list(r.loc[["B", "C", "D"], "start_time"]) == [100, 1100, 3]


def test_reservation_beyond_bf_window_is_not_protected():
    rows = [("A", 4, 0, 100), ("B", 8, 1, 100), ("D", 4, 2, 500)]
    assert run(rows).loc["D", "start_time"] == 200
    r = run(rows, bf_window_s=50)  # B's start at 100 lies beyond now + 50: D backfills and delays B
    assert r.loc["D", "start_time"] == 2 and r.loc["B", "start_time"] == 502


def test_bf_max_job_test_bounds_the_examined_queue():
    rows = [("A", 4, 0, 100), ("B", 8, 1, 100), ("X", 8, 1, 10), ("C", 4, 2, 50)]
    assert run(rows).loc["C", "start_time"] == 2
    assert run(rows, bf_max_job_test=2).loc["C", "start_time"] == 210  # only B and X examined
    with pytest.raises(ConfigError):
        SlurmConfig(bf_max_job_test=0)


def test_no_job_outlives_its_limit_and_nothing_is_preempted():
    rng = random.Random(7)
    rows = [(f"j{i}", rng.choice([1, 2, 4, 8, 16]), rng.randrange(0, 20000), rng.randrange(0, 30000))
            for i in range(200)]
    for rule in ("1,2,4,8,12,24,48,72,168", "x2", "exact"):
        r = run(rows, nodes=3, rule=rule)
        lim = r["duration"].map(parse_limit_rule(rule).limit)
        assert (r["end_time"] - r["start_time"] <= lim).all()
        assert (r["preemptions"] == 0).all() and (r["queue_s"] >= 0).all()


# ----- the fast policy equals a plain re-statement of backfill --------------------------------

class PlainSlurm(Policy):
    """Backfill as the docs state it, without the fast policy's shortcuts: every examined job is
    planned on an explicit list of busy intervals (running jobs to their limit, reservations)."""

    name = "plain"

    def __init__(self, rule, bf_max_job_test=500, bf_window_s=86400, priority=None):
        self.rule, self.max_test, self.window = rule, bf_max_job_test, bf_window_s
        self.pending_key = priority or (lambda job: (job.submit_time, job.seq))

    def schedule(self, view):
        now, gpn, n_nodes = view.now, view.cluster.gpus_per_node, len(view.cluster.free)
        busy = [(now, j.start_time + self.rule.limit(j.duration), [(n, len(g)) for n, g in j.alloc])
                for j in view.running]

        def free_at(t):
            f = [gpn] * n_nodes
            for s, e, lay in busy:
                if s <= t < e:
                    for n, k in lay:
                        f[n] -= k
            return f

        def window_min(t0, t1):  # free only drops where an interval starts
            points = {t0} | {s for s, _, _ in busy if t0 < s < t1}
            return [min(col) for col in zip(*(free_at(t) for t in points))]

        assert free_at(now) == view.cluster.free
        out, examined = [], 0
        for job in view.pending:
            if examined:
                examined += 1
                if examined > self.max_test:
                    break
            lim = self.rule.limit(job.duration)
            slot = None
            for t in sorted({now} | {e for _, e, _ in busy if e > now}):
                if t > now + self.window:
                    break
                lay = place_consolidated(window_min(t, t + lim), job.gpu_num, gpn)
                if lay is not None:
                    slot = (t, lay)
                    break
            if slot is not None and slot[0] == now:
                busy.append((now, now + lim, list(slot[1])))
                view.cluster.take(slot[1])
                out.append(Start(job, slot[1]))
                continue
            examined = examined or 1
            if slot is not None:
                busy.append((slot[0], slot[0] + lim, list(slot[1])))
        return out


@pytest.mark.parametrize("seed", range(12))
def test_fast_policy_matches_plain_backfill_on_random_traces(seed):
    rng = random.Random(seed)
    nodes, gpn = rng.choice([(1, 8), (2, 4), (3, 4), (4, 8)])
    sizes = [s for s in (1, 2, 3, 4, 6, 8, 12, 16) if s <= nodes * gpn]
    rule = parse_limit_rule(rng.choice(["exact", "x2", "x1.3", "0.05,0.1,0.5,1,2"]))
    cfg = dict(bf_max_job_test=rng.choice([2, 5, 500]), bf_window_s=rng.choice([300, 3000, 86400]))
    rows = []
    for i in range(rng.choice([40, 120])):
        d = rng.choice([0, rng.randrange(1, 300), rng.randrange(300, 6000)])
        rows.append((f"j{i}", rng.choice(sizes), rng.randrange(0, 4000), d))
    fast = run(rows, nodes=nodes, gpn=gpn, policy=lambda: SlurmBackfill(SlurmConfig(limit_rule=rule, **cfg)))
    plain = run(rows, nodes=nodes, gpn=gpn, policy=lambda: PlainSlurm(rule, **cfg))
    pd.testing.assert_series_equal(fast["start_time"], plain["start_time"])


@pytest.mark.parametrize("seed", range(6))
def test_pluggable_priority_matches_plain_backfill(seed):
    """Lucid on Slurm (orchestrator/slurm_mode.py) runs this engine in its own order: the fast policy
    with any static priority still makes the plain re-statement's decisions."""
    rng = random.Random(100 + seed)
    nodes, gpn = rng.choice([(2, 4), (4, 8)])
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= nodes * gpn]
    rule = parse_limit_rule(rng.choice(["exact", "x2", "0.05,0.1,0.5,1,2"]))
    rows = [(f"j{i}", rng.choice(sizes), rng.randrange(0, 4000), rng.randrange(0, 6000)) for i in range(100)]

    def smallest_first(job):  # e.g. a SiteFactor from GPU-seconds: higher value first
        return (job.gpu_num * job.duration, job.seq)

    fast = run(rows, nodes=nodes, gpn=gpn,
               policy=lambda: SlurmBackfill(SlurmConfig(limit_rule=rule), priority=smallest_first))
    plain = run(rows, nodes=nodes, gpn=gpn, policy=lambda: PlainSlurm(rule, priority=smallest_first))
    pd.testing.assert_series_equal(fast["start_time"], plain["start_time"])
    age = run(rows, nodes=nodes, gpn=gpn, policy=lambda: SlurmBackfill(SlurmConfig(limit_rule=rule)))
    assert not age["start_time"].equals(fast["start_time"])  # the order does reach the engine


# ----- through the experiment path -------------------------------------------------------------

def test_slurm_is_a_default_baseline_and_runs_on_the_sample():
    from lucidd.experiment import DEFAULT_POLICIES, make_experiment
    from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

    assert BASELINES["slurm"] is SlurmBackfill and "slurm" in DEFAULT_POLICIES
    exp = make_experiment(load_trace(sample_trace_path()), vc_config=sample_vc_config_path())
    res = {p: exp.run(p).jobs for p in ("fifo", "slurm")}
    s = res["slurm"]
    assert len(s) == len(exp.trace) and s["end_time"].notna().all() and (s["preemptions"] == 0).all()
    assert s["jct_s"].mean() < res["fifo"]["jct_s"].mean()  # backfill beats strict FIFO here
    exp.options["limit_rule"] = "exact"  # the option reaches the policy (not always a gain: exact
    exact = exp.run("slurm").jobs  # limits also let long jobs slip ahead of later reservations)
    assert (exact["end_time"] - exact["start_time"] == exact["duration"]).all()
    assert not exact["start_time"].equals(s["start_time"])


# ----- CLI: --limit-rule and --scale-nodes ----------------------------------------------------

def test_cli_limit_rule_reaches_the_policy_and_bad_values_exit_2(tmp_path, capsys):
    from lucidd.cli import main

    out = tmp_path / "o"
    assert main(["simulate", "--policies", "slurm", "--limit-rule", "exact", "--out", str(out), "--no-progress",
                 "--no-plots"]) == 0
    jobs = pd.read_csv(out / "jobs_slurm.csv")
    assert len(jobs) == 2500
    capsys.readouterr()
    for bad in ("x0.5", "1,1", "hours"):
        assert main(["simulate", "--policies", "slurm", "--limit-rule", bad, "--out", str(tmp_path / "b"),
                     "--no-progress", "--no-plots"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("lucidctl: error: --limit-rule") and err.count("\n") == 1
    assert not (tmp_path / "b").exists()  # refused before any work


def test_scale_cluster_rounds_and_keeps_the_largest_job():
    from lucidd.cluster import scale_cluster

    spec = ClusterSpec({"a": VCSpec("a", 10, 8), "b": VCSpec("b", 2, 8), "c": VCSpec("c", 5, 4)})
    jobs = pd.DataFrame({"vc": ["a", "b", "b", "c"], "gpu_num": [8, 16, 1, 4]})
    small, raised = scale_cluster(spec, 0.45, jobs)
    assert {k: v.nodes for k, v in small.vcs.items()} == {"a": 5, "b": 2, "c": 2}  # 4.5 -> 5; b holds 16 GPUs
    assert raised == ["b"] and small.vcs["c"].gpus_per_node == 4
    big, raised = scale_cluster(spec, 1.2, jobs)
    assert {k: v.nodes for k, v in big.vcs.items()} == {"a": 12, "b": 2, "c": 6} and raised == []
    assert scale_cluster(spec, 0.01)[0].total_nodes == 3  # never below one node
    for bad in (0, -1, float("nan"), float("inf"), "abc", 1000):
        with pytest.raises(ConfigError, match="--scale-nodes"):
            scale_cluster(spec, bad, jobs)


def test_cli_scale_nodes_shrinks_the_cluster_and_bad_values_exit_2(tmp_path, capsys):
    import json

    from lucidd.cli import main

    assert main(["--json", "simulate", "--policies", "fifo", "--scale-nodes", "0.5", "--out", str(tmp_path / "o"),
                 "--no-progress", "--no-plots"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {k: v["nodes"] for k, v in d["cluster"].items()} == {"vcA": 2, "vcB": 4, "vcC": 1}  # from 4, 6, 2
    assert any("--scale-nodes 0.5: 12 -> 7 nodes" in n and "vcB" in n for n in d["notes"])
    for cmd in ("simulate", "tune"):
        for bad in ("0", "-0.2", "nan", "x"):
            try:
                rc = main([cmd, "--scale-nodes", bad, "--out", str(tmp_path / "b")])
            except SystemExit as exc:  # argparse's own refusal (not a number), same contract
                rc = exc.code
            assert rc == 2
            err = capsys.readouterr().err
            assert "--scale-nodes" in err and err.count("\n") == 1


def test_cli_bf_window_reaches_slurms_engine_in_the_baseline_and_in_lucid(tmp_path, capsys):
    """A 1-GPU job of 30 h holds the node; an 8-GPU job waits for it, its earliest start at the
    first job's 48 h limit. With Slurm's 1-day window it gets no reservation and a later 7-GPU job
    of 30 h is backfilled past it; with a 7-day window it is protected. (Lucid with true durations
    and no profiling, so that its order is B before C and C is not started in profiling.)"""
    from lucidd.cli import main

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,gpu_num,submit_time,duration\nA,1,0,108000\nB,8,10,3600\nC,7,20,108000\n")

    def starts(*flags):
        out = tmp_path / f"o{len(flags)}"
        assert main(["simulate", "--trace", str(trace), "--format", "csv", "--nodes", "1", "--policies",
                     "slurm,lucid-oracle", "--cprof", "0", "--out", str(out), "--no-progress", "--no-plots",
                     *flags]) == 0
        return {p: pd.read_csv(out / f"jobs_{p}.csv").set_index("job_id")["start_time"]
                for p in ("slurm", "lucid-oracle")}

    one_day, week = starts(), starts("--bf-window", "10080")
    for p in ("slurm", "lucid-oracle"):
        assert one_day[p]["C"] < 3600 < one_day[p]["B"], (p, one_day[p].to_dict())  # C passed B
        assert week[p]["B"] < week[p]["C"], (p, week[p].to_dict())  # B's reservation held
    capsys.readouterr()
    assert main(["simulate", "--policies", "slurm", "--bf-window", "0", "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.startswith("lucidctl: error: --bf-window 0: must be from 1 to 43200")


def test_the_array_profile_answers_as_the_list_profile():
    """Large partitions use the numpy profile (a review: 10,000 GPUs took 220 s for 10,000 jobs with
    the lists); on random profiles, takes and queries it answers exactly as the list one."""
    import random

    from lucidd.policies.slurm_backfill import _ArrayProfile, _Profile

    rnd = random.Random(7)
    for case in range(300):
        gpn = rnd.choice([1, 2, 4, 8])
        nodes = rnd.randint(1, 12)
        now = rnd.randint(0, 1000)
        free = [rnd.randint(0, gpn) for _ in range(nodes)]
        releases = []
        for _ in range(rnd.randint(0, 15)):
            node = rnd.randrange(nodes)
            n = rnd.randint(1, gpn)
            releases.append((now + rnd.choice([1, 5, 60, 300, 3600, rnd.randint(1, 9000)]), ((node, n),)))
        a, b = _Profile(now, free, releases, gpn), _ArrayProfile(now, free, releases, gpn)
        for _ in range(12):
            g = rnd.choice([1, 1, 2, gpn, gpn + 1, 2 * gpn, 3 * gpn - 1, rnd.randint(1, gpn * nodes)])
            lim = rnd.choice([1, 30, 300, 3600, 86400, rnd.randint(1, 20000)])
            horizon = now + rnd.choice([0, 600, 86400, 10**9])
            assert a.place_now(g, lim) == b.place_now(g, lim), case
            slot = a.earliest(g, lim, horizon)
            assert slot == b.earliest(g, lim, horizon), (case, g, lim, horizon)
            if slot is not None and slot[1] is not None and rnd.random() < 0.6:
                a.take(slot[0], slot[0] + lim, slot[1])
                b.take(slot[0], slot[0] + lim, slot[1])
                assert a.times == b.times and a.cols == b.cols.tolist(), case
