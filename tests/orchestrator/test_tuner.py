"""System tuner: proposals come from replays, respect monotone constraints and change nothing."""

import json

import numpy as np
import pytest

from lucidd.live.config import config_from_dict

from lucidd.cli import main
from lucidd.experiment import make_experiment
from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path
from orchestrator.tuner import HOUR, TunableParam, Tuner, format_proposal, history_window, isotonic, write_proposal


def test_isotonic_respects_direction():
    y = [5.0, 3.0, 4.0, 6.0, 5.5]
    up = isotonic(range(5), y, "up")
    down = isotonic(range(5), y, "down")
    assert np.all(np.diff(up) >= 0)
    assert np.all(np.diff(down) <= 0)
    assert up.mean() == pytest.approx(np.mean(y))  # PAV keeps the mean


@pytest.fixture(scope="module")
def small_experiment():
    full = load_trace(sample_trace_path())
    exp = make_experiment(load_trace(sample_trace_path(), start=2 * 86400, end=3 * 86400),
                          vc_config=sample_vc_config_path(), prior=full)
    return exp


def test_tuner_proposes_from_replays_and_leaves_options_alone(small_experiment, tmp_path):
    exp = small_experiment
    before = {k: v for k, v in exp.options.items() if not k.startswith("_")}
    space = [TunableParam("starvation_s", (12 * HOUR, 72 * HOUR), {"p999_queue_s": "up", "avg_jct_s": "down"})]
    proposal = Tuner(exp, space=space, workers=1).run()
    assert {k: v for k, v in exp.options.items() if not k.startswith("_")} == before  # nothing changed
    assert proposal.proposed_params["starvation_s"] in (12 * HOUR, 72 * HOUR)
    # lucidd's default (the tuner replays `lucid`, Lucid as lucidd runs it, not lucid-standalone's engine)
    assert proposal.current_params["starvation_s"] == config_from_dict({}).ordering.starvation_s == 12 * HOUR
    # the proposal's metrics are those of a replay the tuner actually ran
    tried = {p["params"]["starvation_s"]: p["metrics"] for p in proposal.points}
    assert proposal.proposed == tried[proposal.proposed_params["starvation_s"]]
    curve = proposal.curves["starvation_s"]
    assert [c["value"] for c in curve] == [12 * HOUR, 72 * HOUR]
    smoothed = [c["smoothed"]["p999_queue_s"] for c in curve]
    assert smoothed[0] <= smoothed[1]
    d = write_proposal(proposal, tmp_path)
    on_disk = json.loads((tmp_path / "proposal.json").read_text())
    assert on_disk["proposed_params"] == d["proposed_params"]
    assert (tmp_path / "tuning_points.csv").read_text().count("\n") == len(proposal.points) + 1
    text = format_proposal(proposal)
    assert "no configuration was changed" in text


def test_history_window_drops_jobs_the_cluster_cannot_hold(small_experiment):
    full = load_trace(sample_trace_path()).jobs
    jobs = full.copy()
    jobs.loc[jobs.index[200], "vc"] = "gone"
    start, end = int(jobs["submit_time"].iloc[150]), int(jobs["submit_time"].iloc[400])
    exp = history_window(jobs, small_experiment.spec, start, end)
    assert (exp.trace["vc"] != "gone").all()
    assert exp.prior is not None and (exp.prior["submit_time"] < start).all()
    assert any("dropped" in n for n in exp.notes)


def test_tune_cli_writes_a_proposal(tmp_path, capsys):
    rc = main(["--json", "tune", "--start", str(2 * 86400), "--end", str(int(2.5 * 86400)), "--workers", "1",
               "--out", str(tmp_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("reference", "current_params", "proposed_params", "proposed", "feasible", "jct_gain_vs_current",
                "changes", "reasons", "curves"):
        assert key in out
    assert set(out["proposed_params"]) >= {"tprof", "cprof", "starvation_s", "aging_halflife_s"}
    assert (tmp_path / "proposal.json").exists()


def test_no_tprof_change_is_proposed_without_a_profiler(small_experiment):
    space = [TunableParam("tprof", (60, 200)), TunableParam("cprof", (0,))]  # neither is the current 600
    proposal = Tuner(small_experiment, space=space, workers=1).run()
    assert proposal.proposed_params["cprof"] == 0
    assert proposal.proposed_params["tprof"] == proposal.current_params["tprof"]
    assert any(r.startswith("tprof=") and "no effect" in r for r in proposal.reasons)


def test_jittered_replays_are_averaged_and_leave_the_window_alone(small_experiment):
    from orchestrator.tuner import replay_metrics

    exp = small_experiment
    trace_before = exp.trace.copy()
    space = [TunableParam("starvation_s", (12 * HOUR,))]
    proposal = Tuner(exp, space=space, workers=1, jitter_seeds=1, jitter_s=30).run()
    assert proposal.replays == 2
    assert exp.trace.equals(trace_before)  # the window itself is never moved
    params = {"starvation_s": 12 * HOUR}
    one = replay_metrics(exp, "lucid", params)
    two = replay_metrics(exp.jittered(1, 30), "lucid", params)
    assert proposal.proposed == {k: (one[k] + two[k]) / 2 for k in one}
    assert "means over 2 replays (the window and 1 jittered copies)" in format_proposal(proposal)


def test_a_jittered_copy_moves_each_submission_by_at_most_the_bound(small_experiment):
    exp = small_experiment
    copy = exp.jittered(3, 45)
    a = exp.trace.set_index("job_id")["submit_time"]
    b = copy.trace.set_index("job_id")["submit_time"]
    assert set(a.index) == set(b.index) and len(copy.trace) == len(exp.trace)
    moved = (b - a.reindex(b.index)).abs()
    assert moved.max() <= 45 and moved.max() > 0
    assert copy.trace["submit_time"].is_monotonic_increasing
    assert sorted(copy.trace["seq"]) == sorted(exp.trace["seq"]) and copy.trace["seq"].is_monotonic_increasing
    assert copy.trace.equals(exp.jittered(3, 45).trace)  # reproducible by seed
    assert "_cache" not in copy.options and copy.prior is exp.prior
