"""The daemon's model upkeep: history from the database -> refit in a background thread ->
estimates from the new EBM, with every refit recorded in model_versions."""

from __future__ import annotations

import random
import threading

from lucidd.live.config import config_from_dict
from lucidd.live.store import Store
from orchestrator.live import LucidDecider, live_job
from lucidd.backends.base import LiveJob

NOW = 1_800_000_000


def _history(n=400, seed=1):
    rnd = random.Random(seed)
    rows = []
    for k in range(n):
        user = f"u{k % 7}"
        gpus = rnd.choice([1, 1, 2, 4, 8])
        dur = int(60 * (k % 7 + 1) * gpus * rnd.uniform(0.8, 1.2))  # users differ: something to learn
        submit = NOW - 20 * 86400 + k * 3600
        rows.append({"job_id": k + 1, "name": f"train-{user}", "user": user, "partition": "main", "gpus": gpus,
                     "submit_time": submit, "start_time": submit + 10, "end_time": submit + 10 + dur,
                     "duration": dur, "state": "COMPLETED"})
    return rows


def test_background_refit_records_a_version_and_estimates_use_it(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 100}})
    store = Store(cfg.database.url).create()
    store.add_history(_history())
    d = LucidDecider(cfg)
    before = d.estimator.estimate([live_job(LiveJob(9001, user="u3", gpus=2, submit_time=NOW, partition="main"),
                                            None)])
    assert before[9001][1] == "default"  # no history read yet: estimated again once it is
    d.background(store, NOW)
    d._refit_thread.join(300)
    versions = store.model_versions()
    assert versions and versions[0].kind == "duration" and versions[0].decision == "swapped"
    after = d.estimator.estimate([live_job(LiveJob(9001, user="u3", gpus=2, submit_time=NOW, partition="main"),
                                           None)])
    est, src = after[9001]
    assert src.startswith("ebm") and src.endswith(f":v{versions[0].version}")
    assert 60 < est < 5000
    # a job asking for `-p main,research` is estimated as one of main, where its like ran (sacct
    # names the partition a job ran in; the whole list was a VC the model had never seen)
    listed = d.estimator.estimate([live_job(LiveJob(9002, user="u3", gpus=2, submit_time=NOW,
                                                    partition="main,research"), None)])
    assert listed[9002] == (est, src)
    # not due again right away: a second call starts no new fit
    d.background(store, NOW + 60)
    d._refit_thread.join(60)
    assert len(store.model_versions()) == 1


def test_refit_failure_keeps_scheduling(tmp_path, monkeypatch):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 100}})
    store = Store(cfg.database.url).create()
    store.add_history(_history())
    d = LucidDecider(cfg)
    release = threading.Event()
    calls = []

    def failing_refit(now):
        calls.append(now)
        release.wait(60)  # held until the estimate below has answered (60 s only guards against a hang)
        raise RuntimeError("disk full")

    monkeypatch.setattr(d.estimator, "refit", failing_refit)
    d.background(store, NOW)
    est = d.estimator.estimate([live_job(LiveJob(1, gpus=1, submit_time=NOW, partition="main"), None)])
    # the estimate answered while the refit was still running: ordering never waits for a refit
    assert d._refit_thread.is_alive() and est[1][1].startswith("fallback")
    release.set()
    d._refit_thread.join(60)
    assert "disk full" in d.last_background
    assert len(calls) == 1  # estimating started no refit of its own


def test_a_broken_current_model_serves_the_previous_one_and_a_default_is_estimated_again(tmp_path):
    """The estimator threw away the previous good version that the store fell back to (the rule of
    means instead); and a job given the constant when no estimate could be made kept it for good."""
    import types

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 100}})
    store = Store(cfg.database.url).create()
    store.add_history(_history())
    d = LucidDecider(cfg)
    for when in (NOW - 8 * 86400, NOW):  # two versions
        d.background(store, when)
        d._refit_thread.join(300)
    engine = d.estimator.engine()
    assert engine.store.versions("duration") == [1, 2]
    current = engine.store.path_of("duration", 2)
    current.write_bytes(current.read_bytes()[:100])
    job = live_job(LiveJob(9001, user="u3", gpus=2, submit_time=NOW, partition="main"), None)
    est, src = d.estimator.estimate([job])[9001]
    assert src.endswith(":v1(fallback)") and 60 < est < 5000

    def record(source):
        return types.SimpleNamespace(original_submit=NOW, target_partition="main", estimate_s=3600.0,
                                     estimate_source=source)

    lj = LiveJob(9002, gpus=1, submit_time=NOW, partition="main")
    assert live_job(lj, record("fallback:same_gpu_mean")).estimate == 3600.0  # made once, kept
    assert live_job(lj, record("default")).estimate is None  # estimated again at this cycle


def test_the_daemon_measures_drift_and_refits_early_when_it_is_flagged(tmp_path):
    """A review (2 December 2026): the daemon asked the update engine for a refit only when one was
    due by the schedule, so the drift measure (docs/models-update.md) never ran live, and a model
    ten times off stayed until the weekly refit."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 100}})
    store = Store(cfg.database.url).create()
    store.add_history(_history(2000))
    d = LucidDecider(cfg)
    d.background(store, NOW)
    d._refit_thread.join(300)
    assert [v.decision for v in store.model_versions()] == ["swapped"]
    # from a day after the fit on, every job runs for 600-4,200 s, whatever its width
    shifted = []
    for k, r in enumerate(_history(2000, seed=2)):
        dur = 600 * (k % 7 + 1)
        start = NOW + 86400 + k * 60
        shifted.append(r | {"job_id": 100000 + k, "submit_time": start - 10, "start_time": start,
                            "end_time": start + dur, "duration": dur})
    store.add_history(shifted)
    later = NOW + int(2.5 * 86400)  # drift_check_every_s (1 day) after the fit; the weekly refit is not due
    d.background(store, later)
    d._refit_thread.join(300)
    engine = d.estimator.engine()
    (drift,) = engine.store.read_log(event="drift")
    assert drift["flagged"]
    assert [v.decision for v in store.model_versions()] == ["swapped", "swapped"]
    assert engine.store.read_log(event="refit")[-1]["trigger"] == "drift"


def test_a_rule_of_means_of_0_s_gives_the_default_said_as_such(tmp_path):
    """A review (2 December 2026): twelve finished 1-GPU jobs that all ended in their first second
    gave a mean of 0 s; the estimate became the default 3,600 s but kept the rule's name, and with
    it the job kept 3,600 s for good (a default is estimated again at the next cycle)."""
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 100}})
    store = Store(cfg.database.url).create()
    store.add_history([r | {"gpus": 1, "end_time": r["start_time"], "duration": 0} for r in _history(12)])
    d = LucidDecider(cfg)
    d.background(store, NOW)
    if d._refit_thread is not None:
        d._refit_thread.join(60)
    (got,) = d.estimator.estimate([live_job(LiveJob(9001, user="u3", gpus=1, submit_time=NOW, partition="main"),
                                            None)]).values()
    assert got == (cfg.ordering.default_estimate_s, "default")
