"""The only duration model file is unusable (truncated on disk, or a pickle the installed
InterpretML cannot read after an upgrade): the history is there, so the engine refits at once
instead of serving the rule of means until the next weekly refit."""

import os

import numpy as np
import pandas as pd

from models.update import DAY, UpdateConfig, UpdateEngine


def _jobs(n=400, seed=0):
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4, 8], n)
    users = [f"u{i % 7}" for i in range(n)]
    dur = np.array([60 * (i % 7 + 1) for i in range(n)]) * gpus * rng.uniform(0.8, 1.2, n)
    return pd.DataFrame({"job_id": [str(i) for i in range(n)], "submit_time": np.arange(n) * 3600,
                         "duration": dur.astype(int), "gpu_num": gpus, "user": users, "vc": "main",
                         "name": [f"train-{u}" for u in users]})


def test_an_unusable_only_model_is_refitted_at_once(tmp_path):
    jobs = _jobs()
    now = int(jobs["submit_time"].max()) + DAY
    eng = UpdateEngine(tmp_path, UpdateConfig(min_train_jobs=100))
    first = eng.maybe_refit(jobs, now)
    assert [r.decision for r in first] == ["swapped"]
    path = tmp_path / eng.store.file_name("duration", first[0].version)
    path.write_bytes(path.read_bytes()[:1000])  # truncated
    later = now + DAY  # long before refit_every_s (a week)
    fresh = UpdateEngine(tmp_path, UpdateConfig(min_train_jobs=100))  # lucidd restarted
    assert fresh.current("duration") is None
    assert fresh.due(later) and "unusable" in fresh.due_reason(later)
    again = fresh.maybe_refit(jobs, later)
    assert [r.decision for r in again] == ["swapped"] and again[0].version == first[0].version + 1
    assert fresh.current("duration") is not None and not fresh.due(later + 60)


def test_a_failed_refit_of_an_unusable_model_waits_retry_s(tmp_path, monkeypatch):
    jobs = _jobs()
    now = int(jobs["submit_time"].max()) + DAY
    eng = UpdateEngine(tmp_path, UpdateConfig(min_train_jobs=100))
    v = eng.maybe_refit(jobs, now)[0].version
    path = tmp_path / eng.store.file_name("duration", v)
    path.write_bytes(b"not a model")
    import models.duration as md

    monkeypatch.setattr(md.DurationModel, "fit", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    assert [r.decision for r in eng.maybe_refit(jobs, now + 3600)] == ["failed"]
    assert not eng.due(now + 7200)  # not a refit at every cycle: retry_s after a failure
    assert eng.due(now + 3600 + DAY)


def test_a_model_that_loads_but_cannot_predict_is_refitted_within_the_hour(tmp_path, monkeypatch):
    """A model file that unpickles but raises in predict (written by another scikit-learn): the live
    estimates fall back to the rule of means, and the engine refits within the hour, not at the next
    scheduled refit a week later (a review's leftover)."""
    from types import SimpleNamespace

    import models.duration as md
    from orchestrator.live import LiveEstimator

    jobs = _jobs()
    now = int(jobs["submit_time"].max()) + DAY
    est = LiveEstimator(str(tmp_path), default_s=600, refit_every_s=7 * DAY, min_jobs=100, history_days=30)
    eng = est.engine()
    v = eng.maybe_refit(jobs, now)[0].version
    assert not eng.due(now + 2 * 3600)

    def broken(self, *a, **k):
        raise AttributeError("'EBM' object has no attribute 'feature_types_in_'")

    monkeypatch.setattr(md.DurationModel, "predict_detailed", broken)
    job = SimpleNamespace(job_id=1, submit_time=now, gpu_num=1, user="u1", vc="main", name="train-u1", attrs={})
    rows = [SimpleNamespace(job_id=int(r.job_id), submit_time=int(r.submit_time), duration=int(r.duration),
                            gpus=int(r.gpu_num), user=r.user, partition=r.vc, name=r.name) for r in jobs.itertuples()]
    est.set_history(rows)
    seconds, source = est.estimate([job])[1]
    assert not source.startswith("ebm") and seconds > 0
    reason = eng.due_reason(now + 2 * 3600)
    assert reason and reason.startswith("unusable") and "cannot predict" in reason and f"v{v}" in reason
    assert eng.due_reason(now + 60) is None  # not at every cycle: within the hour
    monkeypatch.undo()
    again = eng.maybe_refit(jobs, now + 2 * 3600)
    assert [r.decision for r in again] == ["swapped"] and again[0].version == v + 1
    assert eng.due_reason(now + 4 * 3600) is None  # the new version is judged afresh
