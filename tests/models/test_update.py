"""Update engine: model store (versions, atomic pointer, fallback, pruning, log), refit/swap rule, drift."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from models.base import ModelError, make_stamp, save_model
from models.duration import DurationModel
from models.update import (
    DAY,
    WEEK,
    DriftReport,
    ModelStore,
    UpdateConfig,
    UpdateEngine,
    duration_metrics,
    psi,
    visible_jobs,
)

#: small, fast EBM settings (no worker processes, no pairs)
FAST = dict(interactions=0, max_rounds=100, smoothing_rounds=0, early_stopping_rounds=20, n_jobs=1)
#: a deliberately poor model: one boosting round with a tiny learning rate (about the intercept)
POOR = dict(interactions=0, max_rounds=1, learning_rate=1e-4, smoothing_rounds=0, n_jobs=1)

USERS = {"ua": 4.0, "ub": 5.5, "uc": 7.0, "ud": 8.0, "ue": 9.0}  # user -> log-duration base


def synth(n: int, t0: int, t1: int, seed: int, shift: bool = False, id0: int = 0) -> pd.DataFrame:
    """n jobs submitted uniformly in [t0, t1); shift=True: 8-GPU jobs, 20x longer, submitted at night."""
    rng = np.random.default_rng(seed)
    users = list(USERS)
    submit = np.sort(rng.integers(t0, t1, size=n))
    if shift:
        submit = (submit // DAY) * DAY + rng.integers(0, 6 * 3600, size=n)
        submit = np.sort(submit)
    u = rng.choice(users, size=n)
    gpu = np.full(n, 8) if shift else rng.choice([1, 2, 4], size=n)
    base = np.array([USERS[x] for x in u]) + 0.2 * np.log2(gpu) + 0.3 * rng.normal(size=n)
    dur = np.round(np.exp(base + (3.0 if shift else 0.0)))
    return pd.DataFrame({
        "job_id": [f"j{id0 + i}" for i in range(n)],
        "user": u,
        "vc": np.where(np.isin(u, ["ua", "ub"]), "vc0", "vc1"),
        "gpu_num": gpu,
        "cpu_num": 4 * gpu,
        "submit_time": submit.astype(np.int64),
        "duration": dur.astype(np.int64),
    })


def config(**kw) -> UpdateConfig:
    base = dict(min_train_jobs=100, min_holdout_jobs=20, min_drift_jobs=50, duration_params=FAST)
    base.update(kw)
    return UpdateConfig(**base)


def _end(df: pd.DataFrame) -> np.ndarray:
    return df["submit_time"].to_numpy() + np.maximum(df["duration"].to_numpy(), 1)


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    return synth(700, 0, 14 * DAY, seed=1)


@pytest.fixture(scope="module")
def model(jobs) -> DurationModel:
    train = jobs[_end(jobs) <= 7 * DAY]
    return DurationModel(**FAST).fit(train)


def strict_json(line: str) -> dict:
    def bad(c):
        raise ValueError(f"non-standard JSON constant {c}")

    return json.loads(line, parse_constant=bad)


# ------------------------------------------------------------------------------------------------
# store
# ------------------------------------------------------------------------------------------------
def test_publish_writes_versions_and_pointer_atomically(tmp_path, model):
    store = ModelStore(tmp_path, keep=5)
    assert store.load_current("duration") is None
    for expected in (1, 2, 3):
        v = store.publish("duration", model)
        assert v == expected
        ptr = (tmp_path / "duration.current").read_text().strip()
        assert ptr == f"duration-v{expected:04d}.joblib"
        assert (tmp_path / ptr).is_file()  # the pointer never names a missing file
        lm = store.load_current("duration")
        assert lm.version == expected and not lm.fallback and lm.message == ""
        assert isinstance(lm.model, DurationModel) and lm.stamp.model == "duration"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    # a crash after the model file was written but before the pointer moved: readers keep v3
    (tmp_path / "duration-v0004.joblib").write_bytes((tmp_path / "duration-v0003.joblib").read_bytes())
    (tmp_path / ".tmp-pointer-duration-x").write_text("half")
    assert store.load_current("duration").version == 3
    # the next publish does not reuse a number, and clears stale temp files
    assert store.publish("duration", model) == 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "wrong_kind", "wrong_format",
                                    "stamp_not_a_dict", "stamp_missing_a_field"])
def test_unusable_current_falls_back_to_previous(tmp_path, model, damage):
    store = ModelStore(tmp_path)
    store.publish("duration", model)
    store.publish("duration", model)
    cur = tmp_path / "duration-v0002.joblib"
    if damage == "garbage":
        cur.write_bytes(b"this is not a model")
    elif damage == "truncated":
        cur.write_bytes(cur.read_bytes()[:100])
    elif damage == "missing":
        cur.unlink()
    elif damage == "wrong_kind":
        save_model({"x": 1}, make_stamp("throughput", 1), cur)
    elif damage in ("stamp_not_a_dict", "stamp_missing_a_field"):
        import joblib  # another lucidd's stamp: it raised TypeError, past the fallback to v1

        payload = joblib.load(cur)
        if damage == "stamp_not_a_dict":
            payload["stamp"] = ["duration", 1]
        else:
            del payload["stamp"]["trained_at"]
        joblib.dump(payload, cur)
    else:
        stamp = make_stamp("duration", 1)
        stamp.format_version = 999
        save_model(model, stamp, cur)
    lm = store.load_current("duration")
    assert lm.version == 1 and lm.fallback
    assert "duration-v0002.joblib is unusable" in lm.message
    assert "using previous version duration-v0001.joblib" in lm.message
    assert (tmp_path / "duration.current").read_text().strip() == "duration-v0002.joblib"  # readers never write


def test_no_usable_model_raises_model_error_and_pointer_oddities(tmp_path, model):
    store = ModelStore(tmp_path)
    store.publish("duration", model)
    (tmp_path / "duration-v0001.joblib").write_bytes(b"junk")
    with pytest.raises(ModelError, match="no usable model"):
        store.load_current("duration")
    # the engine turns that into "no current model" instead of raising
    assert UpdateEngine(store, config()).current("duration") is None
    store2 = ModelStore(tmp_path / "b")
    store2.publish("duration", model)
    (tmp_path / "b" / "duration.current").write_text("../../etc/passwd\n")
    lm = store2.load_current("duration")
    assert lm.fallback and lm.version == 1 and "not a duration model file" in lm.message
    (tmp_path / "b" / "duration.current").unlink()
    lm = store2.load_current("duration")
    assert lm.fallback and "no pointer" in lm.message
    with pytest.raises(ModelError):
        store2.path_of("../x", 1)


def test_a_store_is_made_by_its_first_write_not_by_reading(tmp_path, model):
    """A check (`lucidd --once --dry-run`) reads the store: nothing may appear on disk until a
    model or a log line is written."""
    root = tmp_path / "state" / "models"
    store = ModelStore(root)
    engine = UpdateEngine(store, config())
    assert engine.current("duration") is None and store.load_current("duration") is None
    assert store.versions("duration") == [] and store.read_log() == [] and store.current_version("duration") is None
    assert not (tmp_path / "state").exists()
    assert store.publish("duration", model) == 1 and root.is_dir()
    assert store.load_current("duration").version == 1
    other = ModelStore(tmp_path / "log-only")
    other.log_event({"event": "note", "kind": "duration"})
    assert [r["event"] for r in other.read_log()] == ["note"]


def test_prune_keeps_last_n_and_the_current(tmp_path, model):
    store = ModelStore(tmp_path, keep=3)
    for _ in range(6):
        store.publish("duration", model)
    assert store.versions("duration") == [4, 5, 6]
    assert store.current_version("duration") == 6
    store.set_current("duration", 4, now=123, reason="admin rollback")
    assert store.load_current("duration").version == 4
    assert ModelStore(tmp_path, keep=1).prune("duration") == [5]
    assert store.versions("duration") == [4, 6]  # the newest and the current one
    with pytest.raises(ModelError):
        store.set_current("duration", 5)
    rb = store.read_log(event="rollback")
    assert rb[-1]["version"] == 4 and rb[-1]["previous_version"] == 6 and rb[-1]["time"] == 123


def test_other_kinds_share_the_store(tmp_path, model):
    store = ModelStore(tmp_path)
    with pytest.raises(ModelError, match="no model class"):
        store.publish("nosuchkind", model)
    store.publish("duration", model)
    assert store.load_current("packing") is None and store.load_current("throughput") is None
    # a duration file renamed into the packing slot is refused, not silently used
    (tmp_path / "packing-v0001.joblib").write_bytes((tmp_path / "duration-v0001.joblib").read_bytes())
    with pytest.raises(ModelError, match="holds a 'duration' model"):
        store.load_current("packing")


# ------------------------------------------------------------------------------------------------
# refit: no future, swap rule, failures
# ------------------------------------------------------------------------------------------------
def test_visible_jobs_hides_the_future(jobs):
    now = 5 * DAY
    view, end = visible_jobs(jobs, now)
    assert (view["submit_time"] <= now).all()
    known = np.isfinite(view["duration"].to_numpy(float))
    assert (end[known] <= now).all() and np.isnan(end[~known]).all()
    true_end = _end(jobs.set_index("job_id").loc[view["job_id"]])
    assert (true_end[~known] > now).all() and (true_end[known] <= now).all()
    assert len(view) == int((jobs["submit_time"] <= now).sum())


def test_refit_trains_only_on_jobs_ended_before_now_minus_holdout(tmp_path, jobs, monkeypatch):
    now, holdout = 9 * DAY + 3600, DAY
    cutoff = now - holdout
    seen = []
    orig_fit = DurationModel.fit

    def spy(self, jobs_df, origin=None, history_df=None):
        seen.append((jobs_df.copy(), None if history_df is None else history_df.copy()))
        return orig_fit(self, jobs_df, origin, history_df)

    monkeypatch.setattr(DurationModel, "fit", spy)
    res = UpdateEngine(tmp_path / "a", config(holdout_s=holdout)).refit_duration(jobs, now)
    assert res.decision == "swapped", res.reason
    train, hist = seen[0]
    assert len(train) == res.train_rows == int((_end(jobs) <= cutoff).sum())
    assert (_end(train) <= cutoff).all()
    # history: nothing submitted after now, no duration of a job still running at now
    assert (hist["submit_time"] <= now).all()
    h = hist[hist["duration"].notna()]
    assert (_end(h) <= now).all()
    assert res.holdout_rows == int(((_end(jobs) > cutoff) & (_end(jobs) <= now)).sum())
    assert res.train_window == (None, cutoff) and res.holdout_window == (cutoff, now)

    # changing every job that ends after the cutoff (it still ends after it) leaves the candidate identical
    monkeypatch.setattr(DurationModel, "fit", orig_fit)
    changed = jobs.copy()
    late = _end(changed) > cutoff
    changed.loc[late, "duration"] = changed.loc[late, "duration"] * 7 + 11
    changed.loc[changed["submit_time"] > now, "gpu_num"] = 8
    res2 = UpdateEngine(tmp_path / "b", config(holdout_s=holdout)).refit_duration(changed, now)
    assert res2.decision == "swapped" and res2.train_rows == res.train_rows
    m1 = ModelStore(tmp_path / "a").load_current("duration").model
    m2 = ModelStore(tmp_path / "b").load_current("duration").model
    probe = jobs[jobs["submit_time"] < cutoff]
    np.testing.assert_array_equal(m1.predict(probe), m2.predict(probe))


def test_window_limits_training_rows(tmp_path, jobs):
    now = 12 * DAY
    cfg = config(window_s=4 * DAY)
    res = UpdateEngine(tmp_path, cfg).refit_duration(jobs, now)
    cutoff = now - DAY
    expected = int(((_end(jobs) <= cutoff) & (jobs["submit_time"] >= cutoff - 4 * DAY)).sum())
    assert res.train_rows == expected and res.train_window == (cutoff - 4 * DAY, cutoff)


def test_worse_candidate_is_not_swapped_in(tmp_path, jobs):
    good = UpdateEngine(tmp_path, config())
    r1 = good.refit_duration(jobs, 8 * DAY)
    assert r1.decision == "swapped" and r1.version == 1 and r1.reason == "no current model"
    poor = UpdateEngine(tmp_path, config(duration_params=POOR))
    r2 = poor.refit_duration(jobs, 10 * DAY)
    assert r2.decision == "rejected", r2.reason
    assert "candidate worse than current" in r2.reason and "median |log error|" in r2.reason
    assert r2.version == r2.previous_version == 1 and r2.model_file is None
    cm, km = r2.metrics["candidate"], r2.metrics["current"]
    assert cm["median_abs_log_error"] > km["median_abs_log_error"] + 0.05
    assert ModelStore(tmp_path).current_version("duration") == 1
    assert ModelStore(tmp_path).versions("duration") == [1]  # rejected candidates are not written
    # a candidate as good as the current one is swapped in
    r3 = UpdateEngine(tmp_path, config()).refit_duration(jobs, 11 * DAY)
    assert r3.decision == "swapped" and r3.version == 2 and r3.previous_version == 1, r3.reason
    assert r3.reason.startswith("candidate within tolerance")
    assert r3.drift is not None and r3.drift["model_version"] == 1


def test_fit_failure_and_bad_data_keep_the_current_model(tmp_path, jobs, monkeypatch):
    eng = UpdateEngine(tmp_path, config())
    assert eng.refit_duration(jobs, 8 * DAY).decision == "swapped"

    def boom(self, *a, **k):
        raise RuntimeError("boom: EBM exploded")

    monkeypatch.setattr(DurationModel, "fit", boom)
    r = eng.refit_duration(jobs, 9 * DAY)
    assert r.decision == "failed" and r.version == 1
    assert "fit failed: RuntimeError: boom: EBM exploded" in r.reason and "current model v1 kept" in r.reason
    monkeypatch.undo()
    r = eng.refit_duration(jobs.drop(columns=["duration"]), 9 * DAY)
    assert r.decision == "failed" and "no 'duration' column" in r.reason and r.version == 1
    r = UpdateEngine(tmp_path, config(min_train_jobs=10_000)).refit_duration(jobs, 9 * DAY)
    assert r.decision == "skipped" and "min_train_jobs=10000" in r.reason and r.version == 1
    assert ModelStore(tmp_path).current_version("duration") == 1
    logged = ModelStore(tmp_path).read_log(kind="duration", event="refit")
    assert [x["decision"] for x in logged] == ["swapped", "failed", "failed", "skipped"]
    assert "boom" in logged[1]["reason"]


def test_no_holdout_rule_and_first_model(tmp_path, jobs):
    # no holdout jobs at all: swapped by default, kept with swap_without_holdout=False
    UpdateEngine(tmp_path, config()).refit_duration(jobs, 7 * DAY)
    r = UpdateEngine(tmp_path, config(min_holdout_jobs=10_000)).refit_duration(jobs, 8 * DAY)
    assert r.decision == "swapped" and "swap_without_holdout" in r.reason and r.version == 2
    r = UpdateEngine(tmp_path, config(min_holdout_jobs=10_000, swap_without_holdout=False)).refit_duration(
        jobs, 9 * DAY)
    assert r.decision == "rejected" and r.version == 2


def test_corrupt_current_model_during_refit(tmp_path, jobs):
    eng = UpdateEngine(tmp_path, config())
    eng.refit_duration(jobs, 7 * DAY)
    eng.refit_duration(jobs, 8 * DAY)
    (tmp_path / "duration-v0002.joblib").write_bytes(b"corrupt")
    r = UpdateEngine(tmp_path, config()).refit_duration(jobs, 9 * DAY)
    assert r.previous_version == 1  # compared against the previous good version
    assert any("using previous version duration-v0001.joblib" in n for n in r.notes)
    assert r.decision == "swapped" and r.version == 3


# ------------------------------------------------------------------------------------------------
# log
# ------------------------------------------------------------------------------------------------
def test_updates_jsonl_is_strict_json_with_every_field(tmp_path, jobs):
    eng = UpdateEngine(tmp_path, config())
    eng.refit_duration(jobs, 8 * DAY)
    eng.refit_duration(jobs, 9 * DAY)
    eng.measure_drift(jobs, 10 * DAY)
    UpdateEngine(tmp_path, config(min_train_jobs=10_000)).refit_duration(jobs, 11 * DAY)
    lines = (tmp_path / "updates.jsonl").read_text().splitlines()
    recs = [strict_json(x) for x in lines]
    assert [r["event"] for r in recs] == ["refit", "refit", "drift", "refit"]
    for r in recs:
        if r["event"] == "refit":
            for key in ("kind", "time", "trigger", "decision", "reason", "version", "previous_version",
                        "train_rows", "holdout_rows", "train_window", "holdout_window", "metrics", "drift",
                        "fit_seconds", "model_file", "notes"):
                assert key in r
    assert recs[1]["metrics"]["candidate"]["n"] > 0 and isinstance(recs[1]["drift"]["features"], list)
    assert recs[2]["kind"] == "duration" and "flagged" in recs[2]
    # a torn last line (crash mid-write) is skipped, not fatal
    with open(tmp_path / "updates.jsonl", "a") as f:
        f.write('{"event": "refit", "ti')
    assert len(ModelStore(tmp_path).read_log()) == 4
    UpdateEngine(tmp_path, config())  # restarts fine


# ------------------------------------------------------------------------------------------------
# schedule
# ------------------------------------------------------------------------------------------------
def test_due_schedule_survives_restart(tmp_path, jobs):
    cfg = config(refit_every_s=WEEK, retry_s=DAY)
    eng = UpdateEngine(tmp_path, cfg)
    assert eng.due(0) and eng.due_reason(0).startswith("first refit")
    r = eng.refit_duration(jobs, 3600)  # too early: nothing ended yet
    assert r.decision == "skipped" and r.trigger == "first"
    assert not eng.due(3600 + DAY - 1) and eng.due(3600 + DAY)
    r = eng.refit_duration(jobs, 8 * DAY)
    assert r.decision == "swapped" and r.trigger == "retry"
    eng2 = UpdateEngine(tmp_path, cfg)  # a restarted daemon reads its state back from the log
    assert not eng2.due(8 * DAY + WEEK - 1)
    assert eng2.due(8 * DAY + WEEK) and eng2.due_reason(8 * DAY + WEEK).startswith("scheduled")


def test_maybe_refit_drives_a_replay_without_the_future(tmp_path):
    trace = synth(900, 0, 21 * DAY, seed=3)
    eng = UpdateEngine(tmp_path, config(min_train_jobs=150))
    results = []
    for day in range(1, 21):
        results += eng.maybe_refit(trace, day * DAY)
    decisions = [(r.time // DAY, r.decision) for r in results]
    first_swap = next(d for d, x in decisions if x == "swapped")
    assert all(x == "skipped" for d, x in decisions if d < first_swap)
    swaps = [d for d, x in decisions if x in ("swapped", "rejected")]
    assert all(b - a == 7 for a, b in zip(swaps, swaps[1:]))  # weekly after the first model
    for r in results:
        assert r.train_window[1] == r.time - DAY
    drift = ModelStore(tmp_path).read_log(event="drift")
    assert drift and not any(d["flagged"] for d in drift)  # same distribution throughout


# ------------------------------------------------------------------------------------------------
# drift
# ------------------------------------------------------------------------------------------------
def test_psi_same_and_shifted():
    rng = np.random.default_rng(0)
    a = rng.normal(size=5000)
    assert psi(a, a) == pytest.approx(0.0, abs=1e-12)
    assert psi(a, rng.normal(size=5000)) < 0.02
    assert psi(a, rng.normal(1.0, 1.0, size=5000)) > 0.2
    g = rng.choice([1, 2, 4], size=2000)
    assert psi(g, rng.choice([1, 2, 4], size=2000)) < 0.02
    assert psi(g, np.full(500, 8)) > 1.0
    assert math.isnan(psi([], [1.0]))
    with pytest.raises(ModelError):
        psi(a, a, bins=1)


def test_drift_flags_a_shift_and_triggers_an_early_refit(tmp_path):
    before = synth(600, 0, 10 * DAY, seed=5)
    same = synth(400, 10 * DAY, 14 * DAY, seed=6, id0=600)
    shifted = synth(400, 10 * DAY, 14 * DAY, seed=6, shift=True, id0=600)
    cfg = config(drift_window_s=3 * DAY, min_refit_gap_s=DAY)
    eng = UpdateEngine(tmp_path / "same", cfg)
    assert eng.refit_duration(before, 10 * DAY).decision == "swapped"
    rep = eng.measure_drift(pd.concat([before, same]), 14 * DAY)
    assert isinstance(rep, DriftReport) and not rep.flagged, rep.reasons
    by = {f.feature: f for f in rep.features}
    assert set(by) == {"gpu_num", "cpu_num", "submit_hour", "log_duration"}
    assert all(f.psi is not None and f.psi < 0.2 for f in by.values())
    assert rep.error_ratio is not None and rep.error_ratio < 1.5
    assert rep.error_basis.startswith("holdout")
    assert not eng.due(14 * DAY)

    eng = UpdateEngine(tmp_path / "shift", cfg)
    eng.refit_duration(before, 10 * DAY)
    rep = eng.measure_drift(pd.concat([before, shifted]), 14 * DAY)
    by = {f.feature: f for f in rep.features}
    assert rep.flagged
    assert by["gpu_num"].flagged and by["gpu_num"].psi > 1.0
    assert by["log_duration"].flagged and by["submit_hour"].flagged
    assert rep.error_ratio > 1.5 and any("median |log error|" in r for r in rep.reasons)
    assert eng.due(14 * DAY) and eng.due_reason(14 * DAY).startswith("drift")
    r = eng.maybe_refit(pd.concat([before, shifted]), 14 * DAY)
    assert len(r) == 1 and r[0].trigger == "drift"
    assert not eng.due(14 * DAY + 1)  # the drift was acted on
    # too few recent jobs: PSI not computed, nothing flagged
    small = UpdateEngine(tmp_path / "shift", config(drift_window_s=3600, min_drift_jobs=50))
    rep = small.measure_drift(pd.concat([before, shifted]), 14 * DAY, log_it=False)
    assert not rep.flagged and all(f.psi is None and "too few" in f.note for f in rep.features)


def test_drift_without_model_and_metrics_helper(tmp_path, jobs):
    rep = UpdateEngine(tmp_path, config()).measure_drift(jobs, 5 * DAY)
    assert not rep.flagged and rep.model_version is None and "no current" in rep.reasons[0]
    m = duration_metrics(np.array([10.0, 100.0, 1000.0]), np.array([10.0, 100.0, 1000.0]))
    assert m["mae_s"] == 0 and m["median_abs_log_error"] == 0 and m["spearman"] == pytest.approx(1.0)
    assert duration_metrics(np.array([np.nan]), np.array([1.0])) == {"n": 0}


def test_config_validation():
    assert UpdateConfig().refit_every_s == WEEK and UpdateConfig().holdout_s == DAY
    assert UpdateConfig.from_dict({"holdout_s": 3600}).holdout_s == 3600
    with pytest.raises(ModelError, match="unknown key"):
        UpdateConfig.from_dict({"holdout": 3600})
    with pytest.raises(ModelError):
        UpdateConfig(refit_every_s=0)
    with pytest.raises(ModelError):
        UpdateConfig(kinds=("packing",))
    assert json.loads(json.dumps(UpdateConfig().to_dict()))["psi_threshold"] == 0.2


# ------------------------------------------------------------------------------------------------
# throughput
# ------------------------------------------------------------------------------------------------
THR_FAST = dict(n_jobs=1, outer_bags=1, max_rounds=100, interactions=0, early_stopping_rounds=20)


def test_throughput_refit_and_swap(tmp_path):
    rng = np.random.default_rng(0)
    t = np.arange(0, 6 * DAY, 600)
    rate = 3 + 2 * np.sin(2 * np.pi * ((t % DAY) / 3600 - 9) / 24)
    counts = rng.poisson(rate)
    submit = np.repeat(t, counts) + rng.integers(0, 600, size=counts.sum())
    jobs = pd.DataFrame({"submit_time": submit, "gpu_num": rng.choice([1, 2, 8], size=len(submit))})
    cfg = config(kinds=("throughput",), min_train_bins=0, throughput_params=THR_FAST)
    eng = UpdateEngine(tmp_path, cfg)
    assert eng.due(4 * DAY, "throughput")
    r = eng.refit_throughput(jobs, 2 * DAY)
    assert r.decision == "skipped" and "bins" in r.reason
    res = eng.maybe_refit(jobs, 4 * DAY)
    assert [x.decision for x in res] == ["swapped"], res[0].reason
    r1 = res[0]
    assert r1.train_window[1] == 3 * DAY and r1.train_rows == 3 * 144 and r1.metrics["candidate"]["n"] > 100
    r2 = eng.refit_throughput(jobs, 5 * DAY + 300)
    assert r2.decision in ("swapped", "rejected") and "current" in r2.metrics, r2.reason
    lm = ModelStore(tmp_path).load_current("throughput")
    assert lm.model.update_meta_["train_cutoff"] in (3 * DAY, 4 * DAY + 300)
    for line in (tmp_path / "updates.jsonl").read_text().splitlines():
        assert strict_json(line)["kind"] == "throughput"


def test_a_stamp_with_fields_of_a_newer_lucidd_loads(tmp_path, model):
    import joblib

    store = ModelStore(tmp_path)
    store.publish("duration", model)
    cur = tmp_path / "duration-v0001.joblib"
    payload = joblib.load(cur)
    payload["stamp"]["feature_hash"] = "abc"  # a field this lucidd does not know
    joblib.dump(payload, cur)
    lm = store.load_current("duration")
    assert lm.version == 1 and not lm.fallback


def test_a_clock_put_back_makes_the_refit_due(tmp_path, jobs):
    """A refit logged while the clock was a year ahead: waiting for the clock to catch up left the
    model stale for that year."""
    eng = UpdateEngine(tmp_path, config(refit_every_s=WEEK, retry_s=DAY))
    ahead = 8 * DAY + 365 * DAY
    eng.refit_duration(jobs, ahead)
    assert not eng.due(ahead + DAY)
    assert eng.due_reason(8 * DAY).startswith("clock went back")
    assert eng.refit_duration(jobs, 8 * DAY).trigger == "clock"
    assert not eng.due(8 * DAY + DAY) and eng.due(8 * DAY + WEEK)


def test_a_bad_byte_or_an_unreadable_log_costs_only_its_line(tmp_path, model, caplog):
    """A review (2 December 2026): one byte that is not UTF-8 in updates.jsonl made the whole log
    unreadable, so the update engine could not be built: no model served (the rule of means for
    every job) and no refit ever ran, until an admin edited the file."""
    store = ModelStore(tmp_path)
    store.log_event({"kind": "duration", "event": "note", "n": 1})
    with open(store.log_path, "ab") as f:
        f.write(b"\xff\xfe not text\n")
    store.log_event({"kind": "duration", "event": "note", "n": 2})
    assert [r["n"] for r in store.read_log()] == [1, 2]
    assert ":2: not JSON, skipped" in caplog.text
    store.log_path.unlink()
    store.log_path.mkdir()  # a directory where the log should be: read as empty, said
    assert store.read_log() == [] and "cannot be read" in caplog.text
