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
