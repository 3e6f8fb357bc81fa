"""bench/slurm_replay.py's pure parts: window selection, scaling, limit rounding, sacct conversion,
and the comparison. The replay against a real cluster is a benchmark (docs/slurm-replay.md)."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lucidd.policies.slurm_backfill import LimitRule, SlurmBackfill, SlurmConfig, parse_limit_rule

_PATH = Path(__file__).resolve().parents[2] / "bench" / "slurm_replay.py"
_spec = importlib.util.spec_from_file_location("slurm_replay", _PATH)
sr = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("slurm_replay", sr)  # dataclasses look their module up there
_spec.loader.exec_module(sr)

H = 3600


def trace(rows):
    """rows: (job_id, vc, gpu_num, submit_time, duration)"""
    df = pd.DataFrame(rows, columns=["job_id", "vc", "gpu_num", "submit_time", "duration"])
    df["seq"] = range(len(df))
    return df


def scaled(compression, text=None):
    base = parse_limit_rule(text)
    return sr.ScaledLimitRule(kind=base.kind, steps_s=base.steps_s, factor=base.factor, text=base.text, base=base,
                              compression=compression)


# ----- window -------------------------------------------------------------------------------------

def test_window_keeps_one_vc_in_submission_order_and_renumbers():
    t = trace([("a", "x", 1, 50, 10), ("b", "y", 1, 10, 10), ("c", "x", 2, 20, 10), ("d", "x", 1, 20, 5)])
    w, notes = sr.select_window(t, nodes=1, vc="x")
    assert list(w["job_id"]) == ["c", "d", "a"]  # submit order, trace order on ties
    assert list(w["seq"]) == [0, 1, 2] and set(w["vc"]) == {"all"}
    assert notes == []


def test_window_takes_the_first_n_jobs_and_all_vcs():
    t = trace([("a", "x", 1, 0, 10), ("b", "y", 1, 10, 10), ("c", "x", 1, 20, 10)])
    w, _ = sr.select_window(t, nodes=1, jobs=2)
    assert list(w["job_id"]) == ["a", "b"]


def test_window_drops_too_big_rounds_multi_node_and_caps_durations():
    t = trace([("a", "x", 40, 0, 10), ("b", "x", 12, 1, 10), ("c", "x", 16, 2, 10), ("d", "x", 3, 3, 100 * H)])
    w, notes = sr.select_window(t, nodes=4, max_duration_s=12 * H)
    assert list(w["job_id"]) == ["b", "c", "d"]
    assert list(w["gpu_num"]) == [16, 16, 3]
    assert list(w["duration"]) == [10, 10, 12 * H]
    assert len(notes) == 3 and "dropped" in notes[0] and "rounded up" in notes[1] and "capped" in notes[2]


def test_window_of_a_missing_vc_is_refused():
    with pytest.raises(SystemExit):
        sr.select_window(trace([("a", "x", 1, 0, 10)]), nodes=1, vc="nope")


# ----- scaling and limits --------------------------------------------------------------------------

@pytest.mark.parametrize("limit_s,c,minutes", [
    (H, 60, 1), (H, 120, 1), (2 * H, 120, 1), (4 * H, 120, 2), (12 * H, 120, 6), (H, 240, 1), (8 * H, 240, 2),
    (12 * H, 150, 5), (1, 600, 1), (60, 1, 1), (61, 1, 2),
])
def test_limits_become_whole_minutes_rounded_up(limit_s, c, minutes):
    assert sr.minutes_limit(limit_s, c) == minutes


def test_scaled_rule_is_what_slurm_was_given_back_in_trace_seconds():
    rule = scaled(120)
    assert rule.limit(100) == 120 * 60  # 1 h step -> 30 s -> 1 min -> 2 h of trace time
    assert rule.limit(2 * H) == 2 * H
    assert rule.limit(3 * H) == 4 * H  # 4 h -> 2 min exactly
    assert rule.limit(11 * H) == 12 * H
    assert rule.min_limit == 2 * H
    for d in (0, 1, 59, 3599, 3600, 3601, 7 * H, 30 * H, 200 * H):
        assert rule.limit(d) >= d and rule.limit(d) >= LimitRule().limit(d)
        assert rule.limit(d) % (60 * 120) == 0


def test_scaled_rule_drives_the_slurm_policy():
    pol = SlurmBackfill.from_options({"limit_rule": scaled(300)})
    assert pol.config.limit_rule.limit(10) == 300 * 60
    assert "rounded up to whole minutes" in pol.describe()


def test_plan_scales_offsets_sleeps_and_limits():
    w, _ = sr.select_window(trace([("a", "x", 1, 1000, 3600), ("b", "x", 8, 1600, 7200), ("c", "x", 16, 2200, 60)]),
                            nodes=2)
    plan = sr.plan_jobs(w, 120, LimitRule())
    assert list(plan["offset_s"]) == [0, 5, 10]
    assert list(plan["sleep_s"]) == [30, 59.5, 0.5]  # b: 60 s would meet its 1 min limit: kept 0.5 s short
    assert list(plan["limit_min"]) == [1, 1, 1]
    assert list(plan["nodes"]) == [1, 1, 2]
    trimmed = sr.plan_jobs(w, 120, LimitRule(), sleep_trim_s=0.7)
    assert list(trimmed["sleep_s"]) == [29.3, 59.3, 0.0]


def test_sbatch_lines():
    row = {"seq": 3, "gpu_num": 2, "limit_min": 4, "sleep_s": 1.25, "nodes": 1}
    argv = sr.sbatch_argv(row, "main")
    assert argv[:2] == ["sbatch", "--parsable"]
    assert ["-t", "4"] == argv[argv.index("-t"):argv.index("-t") + 2]
    assert "--gres=gpu:2" in argv and argv[argv.index("-c") + 1] == "8" and argv[-2:] == ["--wrap", "sleep 1.250"]
    assert ["-p", "main"] == argv[argv.index("-p"):argv.index("-p") + 2]
    multi = sr.sbatch_argv({"seq": 4, "gpu_num": 24, "limit_min": 1, "sleep_s": 2, "nodes": 3}, None,
                           comment="lucid:noprofile")
    assert "-p" not in multi and "--comment=lucid:noprofile" in multi
    assert multi[multi.index("-N") + 1] == "3" and "--gres=gpu:8" in multi and "--ntasks-per-node=1" in multi


def test_scheduler_parameters_reach_the_model():
    p = sr.sched_params("bf_interval=1,bf_resolution=1,bf_window=10")
    assert p == {"bf_interval": "1", "bf_resolution": "1", "bf_window": "10"}
    opts = sr.model_options(p, 150, LimitRule())
    assert opts["bf_window_s"] == 10 * 60 * 150 and opts["bf_max_job_test"] == 500
    assert sr.model_options(sr.sched_params("(null)"), 60, LimitRule())["bf_window_s"] == 86400 * 60
    pol = SlurmBackfill.from_options(opts)
    assert isinstance(pol.config, SlurmConfig) and pol.config.bf_window_s == 90000


# ----- sacct -> results ------------------------------------------------------------------------------

def rec(jid, submit, start, end, state="COMPLETED", partition="main", flags=("STARTED_ON_SCHEDULE",)):
    return {"job_id": jid, "partition": partition, "nodes": "gpu1", "flags": list(flags),
            "state": {"current": state, "reason": "None"},
            "time": {"submission": submit, "start": start, "end": end, "eligible": submit}}


def test_sacct_runs_merge_a_requeued_job():
    data = {"jobs": [rec(7, 100, 101, 110, "REQUEUED", "profiling"), rec(7, 110, 112, 130, "COMPLETED"),
                     rec(8, 105, 0, 0, "PENDING", flags=())]}
    runs = sr.sacct_runs(data)
    assert runs[7]["submit"] == 100 and runs[7]["start"] == 101 and runs[7]["last_start"] == 112
    assert runs[7]["end"] == 130 and runs[7]["state"] == "COMPLETED" and runs[7]["runs"] == 2
    assert runs[8]["start"] is None and runs[8]["end"] is None


def plan_of(rows):
    """rows: (seq, job_id, slurm_id, submit_time, duration)"""
    return pd.DataFrame([{"seq": s, "job_id": j, "slurm_id": i, "gpu_num": 1, "submit_time": t, "duration": d,
                          "submit_lag_s": 0.01} for s, j, i, t, d in rows])


def test_real_results_in_trace_seconds():
    plan = plan_of([(0, "a", 11, 5000, 600), (1, "b", 12, 5600, 1200)])
    data = {"jobs": [rec(11, 1000, 1000, 1005), rec(12, 1005, 1008, 1018, flags=("STARTED_ON_BACKFILL",))]}
    real = sr.real_results(plan, data, compression=120)
    a, b = real.iloc[0], real.iloc[1]
    assert a["real_queue_s"] == 0 and a["real_jct_s"] == 600 and a["real_start"] == 5000
    assert b["real_queue_s"] == 360 and b["real_jct_s"] == 1560 and b["real_start"] == 5960
    assert b["real_run_s"] == 1200 and b["started_on"] == "backfill"


def test_real_results_refuse_a_job_sacct_lacks():
    with pytest.raises(SystemExit):
        sr.real_results(plan_of([(0, "a", 11, 0, 60)]), {"jobs": []}, 60)


def test_compare_rows():
    real = pd.DataFrame({"seq": [0, 1, 2, 3], "job_id": list("abcd"), "real_jct_s": [100.0, 200, 300, 400],
                         "real_queue_s": [0.0, 100, 0, 7200], "real_start": [0.0, 100, 1000, 9000]})
    sim = pd.DataFrame({"job_id": list("dcba"), "jct_s": [400.0, 300, 200, 100], "queue_s": [3600.0, 0, 100, 0],
                        "start_time": [9000 - 3601.0, 1000, 100, 0]})
    rows = sr.compare(real, {"slurm": sim})
    assert rows[0]["avg_jct_s"] == 250 and rows[0]["jobs"] == 4
    r = rows[1]
    assert r["source"] == "sim slurm" and r["jct_vs_slurm_pct"] == pytest.approx(0)
    assert r["within_1h_pct"] == 75.0 and r["shift_mean_s"] == pytest.approx(3601 / 4)
    assert r["p99_queue_s"] == pytest.approx(np.percentile([3600, 0, 100, 0], 99))
    table = sr.format_rows(rows)
    assert "| sim slurm | 4 |" in table and "75.0 %" in table and "+0.00 %" in table


def test_report_roundtrip(tmp_path):
    """A replay directory (as `run` leaves it) is compared again by `report` without Slurm."""
    w, _ = sr.select_window(trace([("a", "x", 1, 0, 600), ("b", "x", 8, 60, 1200), ("c", "x", 8, 120, 600)]),
                            nodes=1)
    plan = sr.plan_jobs(w, 60, LimitRule())
    plan["slurm_id"] = [1, 2, 3]
    plan["submit_lag_s"] = 0.0
    # one 8-GPU node: a (1 GPU) runs 0-10 s, b waits for it (10-30 s), c after b (30-40 s)
    data = {"jobs": [rec(1, 1000, 1000, 1010), rec(2, 1001, 1010, 1030), rec(3, 1002, 1030, 1040)]}
    w.to_csv(tmp_path / "window.csv", index=False)
    plan.to_csv(tmp_path / "plan.csv", index=False)
    (tmp_path / "sacct.json").write_text(json.dumps(data))
    meta = {"window": {"trace": "t.csv", "vc": None, "start": None, "end": None}, "nodes": 1, "compression": 60,
            "limit_rule": None, "policies": "slurm,fifo", "wall_s": 40,
            "cluster": {"config": {"SchedulerParameters": "bf_interval=1"}}}
    (tmp_path / "replay.json").write_text(json.dumps(meta))
    assert sr.report(tmp_path) == 0
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [r["source"] for r in rows] == ["Slurm (sacct)", "sim slurm", "sim fifo"]
    assert rows[1]["jct_vs_slurm_pct"] == pytest.approx(0) and rows[1]["within_1h_pct"] == 100.0
    jobs = pd.read_csv(tmp_path / "jobs.csv")
    assert list(jobs["slurm_start"]) == [0, 600, 1800]


def test_a_profiled_job_starts_with_its_last_run_and_queues_without_the_profiling_run():
    """lucidd (--live) profiles a job, requeues it after Tprof and releases it: sacct -D shows two runs."""
    plan = plan_of([(0, "a", 21, 0, 600)])
    data = {"jobs": [rec(21, 1000, 1001, 1003, "REQUEUED", "profiling"), rec(21, 1003, 1005, 1015)]}
    real = sr.real_results(plan, data, compression=60).iloc[0]
    assert real["runs"] == 2
    assert real["real_start"] == 5 * 60  # the main run's start, from the original submission
    assert real["real_queue_s"] == (5 - 2) * 60  # the 2 s in profiling do not count as waiting
    assert real["real_jct_s"] == 15 * 60 and real["real_run_s"] == 10 * 60


def test_earlier_jobs_with_the_same_id_are_ignored():
    data = {"jobs": [rec(5, 100, 101, 200), rec(5, 5000, 5001, 5010)]}
    runs = sr.sacct_runs(data, since=4990)
    assert runs[5]["runs"] == 1 and runs[5]["submit"] == 5000
    assert sr.sacct_runs(data)[5]["runs"] == 2


def test_offset_rule_keeps_the_trace_limit_for_longer_jobs():
    base = scaled(150)
    rule = sr.OffsetLimitRule(kind=base.kind, steps_s=base.steps_s, text=base.text, base=base, offset=38)
    for d in (0, 100, 3600, 9000, 9000 - 38):
        assert rule.limit(d + 38) == max(base.limit(d), d + 38)
    assert rule.min_limit == base.min_limit


def test_robustness_of_an_uncontended_window_is_nil():
    w, _ = sr.select_window(trace([("a", "x", 1, 0, 600), ("b", "x", 1, 60, 1200)]), nodes=1)
    opts = sr.model_options({}, 60, scaled(60))
    (what, jct, within), (what2, jct2, within2) = sr.robustness(w, 1, opts, 60, dead_s=(0.5,))
    assert "0.5 s real (30 trace s)" in what and jct == pytest.approx(100 * 30 / 900) and within == 100.0
    # submits at whole real seconds (a: 0, b: 60) and decisions only then: nothing moves here
    assert "whole real seconds" in what2 and jct2 == pytest.approx(0) and within2 == 100.0


def test_lucid_options_scale_lucidds_durations(tmp_path):
    cfg = tmp_path / "lucidd.toml"
    cfg.write_text('[daemon]\ninterval_s = 0.5\nstate_dir = "%s"\nfailopen_after_s = 5.0\n'
                   '[profiler]\ntprof_s = 2\nnprof_gpus = 8\ncapacity_gpus = 16\n'
                   'long_tprof_s = 60\nroom_wait_s = 30\nlong_share = 0.05\n' % tmp_path)
    o = sr.lucid_options(str(cfg), 150)
    assert o["tprof"] == 300 and o["interval_s"] == 75 and o["restart_s"] == 150
    assert o["nprof"] == 8 and o["prof_capacity_gpus"] == 16 and o["profiling"] is True and o["prof_gate"] == 2
    assert o["starvation_s"] == 12 * 3600 * 150 and o["aging_halflife_s"] == 0
    # the lending keys, durations scaled like the others
    assert o["prof_long_tprof"] == 60 * 150 and o["prof_room_wait"] == 30 * 150 and o["prof_long_share"] == 0.05
    assert o["prof_lend"] is True and o["prof_reclaim"] is False and o["prof_max_job_share"] == 1.0


def test_live_comparison_takes_jobs_lucidd_never_estimated(tmp_path):
    """A job that finished inside Tprof in profiling has no estimate in lucidd's database: the
    simulator's lucid gets lucidd's fallback for it instead of refusing the comparison."""
    # b holds the node, so a cannot start at once: it is profiled (b ends before a's 2 x Tprof,
    # which would send it to its partition unprofiled) and ends there
    w, _ = sr.select_window(trace([("b", "x", 8, 0, 200), ("a", "x", 1, 30, 60), ("c", "x", 8, 60, 600)]), nodes=1)
    cfg = tmp_path / "lucidd.toml"
    cfg.write_text('[daemon]\ninterval_s = 1.0\nstate_dir = "%s"\nfailopen_after_s = 10.0\n'
                   '[profiler]\ntprof_s = 3\n' % tmp_path)
    opts = {**sr.model_options({}, 60, scaled(60)), **sr.lucid_options(str(cfg), 60)}
    sims = sr.simulate_with_estimates(w, 1, ["lucid"], opts, {"b": 7000.0, "c": 900.0}, fallback_s=3600.0 * 60)
    lucid = sims["lucid"].set_index("job_id")
    assert set(lucid.index) == {"a", "b", "c"} and lucid.loc["a", "estimate_s"] == 3600.0 * 60
    assert bool(lucid.loc["a", "profiler_finished"])  # 60 s < Tprof 180 trace s: it ends in profiling


# ----- several VCs, each its own partition -----------------------------------------------------------

def test_vc_and_node_lists_pair_up():
    assert sr.parse_vcs(None, "4") == 4 and sr.parse_vcs("x", "4") == 4
    assert sr.parse_vcs("x,y", "2,1") == {"x": 2, "y": 1}
    for vc, nodes in (("x,y", "2"), ("x", "2,2"), ("x,x", "1,1"), ("x,y", "2,0"), ("x,y", "a,b")):
        with pytest.raises(SystemExit):
            sr.parse_vcs(vc, nodes)


def test_window_of_several_vcs_keeps_their_names_and_sizes_jobs_by_their_own_partition():
    t = trace([("a", "x", 16, 0, 10), ("b", "y", 16, 1, 10), ("c", "z", 1, 2, 10), ("d", "y", 8, 3, 10)])
    w, notes = sr.select_window(t, {"x": 2, "y": 1})
    assert list(w["job_id"]) == ["a", "d"] and list(w["vc"]) == ["x", "y"] and list(w["seq"]) == [0, 1]
    assert len(notes) == 1 and "its partition's GPUs dropped" in notes[0]  # b: 16 GPUs, y has 8
    with pytest.raises(SystemExit):
        sr.select_window(t, {"x": 1, "nope": 1})
    plan = sr.plan_jobs(w, 60, LimitRule())
    assert list(plan["vc"]) == ["x", "y"]
    spec = sr.cluster_spec({"x": 2, "y": 1})
    assert {v: s.nodes for v, s in spec.vcs.items()} == {"x": 2, "y": 1}


class FakeRunner:
    def __init__(self, answers=None):
        self.calls, self.answers, self.next_id = [], answers or {}, 100

    def run(self, argv):
        self.calls.append(argv)
        if argv[0] == "sbatch":
            self.next_id += 1
            return f"{self.next_id}\n"
        return self.answers[tuple(argv)]


def test_each_vcs_jobs_go_to_its_partition():
    w, _ = sr.select_window(trace([("a", "x", 1, 0, 60), ("b", "y", 1, 0, 60), ("c", "x", 2, 0, 60)]),
                            {"x": 1, "y": 1})
    runner = FakeRunner()
    _, plan = sr.submit_all(runner, sr.plan_jobs(w, 60, LimitRule()), {"x": "px", "y": "py"}, lead_s=0,
                            log=lambda *_: None)
    parts = [c[c.index("-p") + 1] for c in runner.calls]
    assert parts == ["px", "py", "px"] and list(plan["slurm_id"]) == [101, 102, 103]


def test_partitions_are_named_one_per_vc_and_must_not_share_nodes():
    class A:
        pass

    args = A()
    args.partition, args.nodes = "px,py", {"x": 2, "y": 1}
    assert sr.partitions_of(args) == {"x": "px", "y": "py"}
    args.partition = "px"
    with pytest.raises(SystemExit):
        sr.partitions_of(args)
    args.partition, args.nodes = "main", 4
    assert sr.partitions_of(args) == "main"

    def runner(py_nodes):
        return FakeRunner({("sinfo", "-h", "-p", "px", "-o", "%N"): "gpu[1-2]\n",
                           ("sinfo", "-h", "-p", "py", "-o", "%N"): py_nodes + "\n",
                           ("scontrol", "show", "hostnames", "gpu[1-2]"): "gpu1\ngpu2\n",
                           ("scontrol", "show", "hostnames", "gpu3"): "gpu3\n",
                           ("scontrol", "show", "hostnames", "gpu2"): "gpu2\n"})

    parts = {"x": "px", "y": "py"}
    assert sr.check_partitions(runner("gpu3"), parts, {"x": 2, "y": 1}) == {"px": ["gpu1", "gpu2"], "py": ["gpu3"]}
    with pytest.raises(SystemExit, match="share node gpu2"):
        sr.check_partitions(runner("gpu2"), parts, {"x": 2, "y": 1})
    with pytest.raises(SystemExit, match="has 1 nodes"):
        sr.check_partitions(runner("gpu3"), parts, {"x": 2, "y": 2})


def test_hostnames():
    assert sr.hostnames("gpu3") == ["gpu3"]
    assert sr.hostnames("gpu[1-2,4]") == ["gpu1", "gpu2", "gpu4"]
    assert sr.hostnames("n[08-10],login") == ["n08", "n09", "n10", "login"]
    assert sr.hostnames("") == []


def test_a_busy_vcs_job_is_profiled_on_the_idle_vcs_gpus_and_the_report_counts_it():
    """x's node is full, y's idle: lucid (lending on) profiles x's short job on y's node, where it
    ends; vc_lines counts that run on both sides."""
    w, _ = sr.select_window(trace([("big", "x", 8, 0, 7200), ("short", "x", 1, 30, 300), ("late", "y", 1, 9000, 60)]),
                            {"x": 1, "y": 1})
    opts = {**sr.model_options({}, 60, scaled(60)), "tprof": 600, "interval_s": 60.0, "restart_s": 60}
    sims = sr.simulate(w, {"x": 1, "y": 1}, ["lucid"], opts)
    lucid = sims["lucid"].set_index("job_id")
    assert lucid.loc["short", "profiler_node"].startswith("y:") and bool(lucid.loc["short", "profiler_finished"])
    assert "nobody waits for" in lucid.loc["short", "profile_reason"]
    real = pd.DataFrame({"job_id": ["big", "short", "late"], "real_jct_s": [7200.0, 400.0, 60.0], "runs": [1, 1, 1],
                         "first_partition": ["px", "profiling", "py"], "first_nodes": ["gpu1", "gpu2", "gpu2"]})
    lines = sr.vc_lines(real, sims, w, {"x": "px", "y": "py"}, {"px": ["gpu1"], "py": ["gpu2"]})
    assert lines[0].startswith("VC x (partition px, 2 jobs): avg JCT s: Slurm 3,800")
    assert lines[-1] == "profiling runs on another VC's nodes: real 1 of 1 profiled, sim lucid 1 of 1"


def test_tprof_race_counts_jobs_ending_within_a_second_of_tprof():
    """Live run 6: four jobs sleeping 9.9 s against a 10 s Tprof were requeued live, where the
    simulator let them end in profiling; the report names such jobs."""
    plan = pd.DataFrame({"job_id": ["a", "b", "c", "d"], "sleep_s": [9.9, 9.5, 3.0, 59.4]})
    real = pd.DataFrame({"job_id": ["a", "b", "c", "d"], "runs": [2, 1, 1, 1],
                         "real_jct_s": [900.0, 600.0, 180.0, 3600.0]})
    lines = sr.tprof_race(real, plan, (10, 60))
    assert lines == ["jobs whose sleep ends within 1 real s of Tprof (10, 60 s): 3, of which 1 were requeued "
                     "live (a race the simulator does not model; their real JCT 900 trace s in all)"]
    assert sr.tprof_race(real, plan[plan["job_id"] == "c"], (10, 60)) == []
    assert sr.tprof_race(real, plan.drop(columns="sleep_s"), (10,)) == []


def test_keep_off_tprof_moves_durations_near_tprof_to_their_side():
    """At 60x a job 6 trace s short of a 600 s Tprof ends 0.1 real s before it: live that is a
    race (run 6), so the replay moves such durations a real second (60 trace s) off every Tprof,
    keeping the side: shorter ones still end in profiling, longer ones are still requeued."""
    w = trace([("a", "x", 1, 0, 594), ("b", "x", 1, 0, 540), ("c", "x", 1, 0, 600), ("d", "x", 1, 0, 659),
               ("e", "x", 1, 0, 3590), ("f", "x", 1, 0, 120), ("g", "x", 1, 0, 541)])
    out, moved = sr.keep_off_tprof(w, (10, 60), 60, 1.0)
    assert out["duration"].tolist() == [540, 540, 660, 660, 3540, 120, 540]
    assert moved == 5
    assert w["duration"].tolist()[0] == 594  # the caller's window is left alone
    plan = sr.plan_jobs(out, 60, LimitRule())
    assert sr.tprof_race(pd.DataFrame({"job_id": plan["job_id"], "runs": 1, "real_jct_s": 0.0}), plan, (10, 60)) == []
    assert sr.keep_off_tprof(w, (10, 60), 60, 0.0)[1] == 0
    assert sr.keep_off_tprof(w, (0,), 60, 1.0)[1] == 0
    assert sr.keep_off_tprof(trace([("h", "x", 1, 0, 50)]), (1,), 60, 2.0)[0]["duration"].tolist() == [0]


def test_each_job_gets_the_limit_it_is_submitted_with_and_a_traces_own_is_set_aside(tmp_path):
    """A live lucidd caps its estimates at each job's TimeLimit, the -t the replay submits: the
    prediction's jobs carry that same limit (in trace seconds), whatever the trace's own column says."""
    from argparse import Namespace

    path = tmp_path / "t.csv"
    pd.DataFrame({"job_id": ["a", "b", "c"], "submit_time": [0, 60, 120], "duration": [100, 5000, 30],
                  "gpu_num": [1, 2, 1], "time_limit": [10 ** 6, None, 40]}).to_csv(path, index=False)
    args = Namespace(trace=str(path), vc=None, start=None, end=None, jobs=None, max_duration_h=None, fmt=None,
                     nodes="1", limit_rule=None, compression=120.0, sleep_trim_s=0.0, live=False)
    spec, window, notes, rule, plan = sr.build(args)
    assert list(window["time_limit"]) == [rule.limit(d) for d in window["duration"]]
    assert list(window["time_limit"]) == list(plan["limit_min"] * 60 * 120.0)
