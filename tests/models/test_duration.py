"""Tests for the workload estimate (duration) model and job-name buckets.

Synthetic job tables are generated here: a few users with characteristic durations, each running a
couple of experiment families whose names vary only in hyper-parameters / seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from models.base import Explanation, ModelError, load_model
from models.duration import (
    DurationModel,
    compute_features,
    detect_missing_inputs,
    evaluate,
    fallback_estimates,
    load_artifact_estimates,
    rolling_estimates,
)
from models.names import NameBuckets, normalise_name

from tests.conftest import SHARED  # noqa: E402  (the one place that knows where ../shared is)
DAY = 86_400

# user -> (log-duration base, gpu choices, [(family name template, log offset), ...])
PROFILES = {
    "u_short": (4.0, [1], [("resnet_lr{lr}_seed{seed}", -0.6), ("mnist_bs{bs}", 0.6)]),
    "u_mid": (7.0, [1, 2], [("bert_ft_{lr}_run{seed}", -0.8), ("bert_pretrain_step{bs}", 0.8)]),
    "u_long": (9.5, [4, 8], [("gpt_train_v{seed}_lr{lr}", 0.0)]),
    "u_var": (6.0, [1, 8], [("ppo_atari_env{seed}", -1.2), ("dcgan_celeba_bs{bs}", 1.2)]),
    "u_rare": (8.0, [2], [("vit_b16_bs{bs}_seed{seed}", 0.0)]),
}


def synth_jobs(n: int = 1200, days: int = 21, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    users = list(PROFILES)
    weights = np.array([0.3, 0.25, 0.15, 0.25, 0.05])
    rows = []
    submit = np.sort(rng.integers(0, days * DAY, size=n))
    for i, t in enumerate(submit):
        u = users[rng.choice(len(users), p=weights)]
        base, gpus, fams = PROFILES[u]
        fam, off = fams[rng.integers(len(fams))]
        gpu = int(rng.choice(gpus))
        name = fam.format(lr=rng.choice([0.1, 0.01, 0.001]), seed=rng.integers(0, 10), bs=rng.choice([32, 64, 128]))
        dur = math.exp(base + off + 0.15 * math.log2(gpu) + 0.3 * rng.normal())
        rows.append(
            {
                "job_id": f"j{i}",
                "user": u,
                "vc": f"vc{users.index(u) % 2}",
                "gpu_num": gpu,
                "cpu_num": 4 * gpu,
                "submit_time": int(t),
                "duration": int(round(dur)),
                "state": "COMPLETED",
                "name": name,
                "seq": i,
            }
        )
    return pd.DataFrame(rows)


ORIGIN = pd.Timestamp("2020-09-01 00:00:00")


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    return synth_jobs()


@pytest.fixture(scope="module")
def rolled(jobs):
    return rolling_estimates(jobs, ORIGIN, min_train_jobs=50, return_models=True)


@pytest.fixture(scope="module")
def fitted(jobs) -> DurationModel:
    train = jobs[jobs.submit_time < 14 * DAY]
    train = train[train.submit_time + train.duration <= 14 * DAY]
    return DurationModel(random_state=0).fit(train, ORIGIN)


# ------------------------------------------------------------------------------------------------
# quality on synthetic data
# ------------------------------------------------------------------------------------------------
def test_rolling_estimates_beat_global_mean(jobs, rolled):
    est, _ = rolled
    assert list(est.columns) == ["estimate", "source", "model_version"]
    assert est.index.equals(jobs.index)
    assert (est["estimate"] > 0).all()
    modelled = (est["model_version"] > 0).to_numpy()
    assert modelled.sum() > 500
    y = jobs["duration"].to_numpy(float)[modelled]
    ours = est["estimate"].to_numpy(float)[modelled]
    # the global mean of *all* durations (it even sees the future) is the baseline to beat
    glob = np.full_like(y, jobs["duration"].mean())
    assert np.mean(np.abs(ours - y)) < np.mean(np.abs(glob - y))
    res = evaluate(est, jobs, {"global_mean": pd.Series(jobs["duration"].mean(), index=jobs.index)})
    assert res["ours"]["spearman"] > 0.8
    assert res["ours"]["mae_s"] < res["global_mean"]["mae_s"]
    assert set(res["ours_by_source"]) >= {"ebm"}


def test_rolling_schedule_and_metadata(jobs, rolled):
    est, models = rolled
    t = jobs["submit_time"]
    first_week = (t < t.min() + 7 * DAY).to_numpy()
    assert (est.loc[first_week, "model_version"] == 0).all()
    assert est.loc[first_week, "source"].str.startswith("fallback:").all()
    refits = est.attrs["refits"]
    assert [r["version"] for r in refits] == [1, 2]
    assert sorted(models) == [1, 2]
    for r in refits:
        assert r["train_rows"] == models[r["version"]].train_rows_
        # every training job of refit R ended by R
        assert models[r["version"]].train_span_[1] < r["refit_time"]
    week2 = ((t >= t.min() + 7 * DAY) & (t < t.min() + 14 * DAY)).to_numpy()
    assert (est.loc[week2, "model_version"] == 1).all()
    assert set(est["source"]) <= {"ebm", "fallback:same_gpu_mean", "fallback:overall_mean", "fallback:constant"}


def test_rolling_window_limits_training_rows(jobs):
    est = rolling_estimates(jobs, ORIGIN, window_s=7 * DAY, min_train_jobs=50)
    full = rolling_estimates(jobs, ORIGIN, min_train_jobs=50)
    assert est.attrs["refits"][1]["train_rows"] < full.attrs["refits"][1]["train_rows"]


# ------------------------------------------------------------------------------------------------
# no training on (or looking at) the future
# ------------------------------------------------------------------------------------------------
def test_no_future_leak(jobs):
    t_x = int(jobs["submit_time"].quantile(0.6))  # a submission in week 2, served by a fitted model
    end = jobs["submit_time"] + jobs["duration"]
    changed = jobs.copy()
    later = end > t_x
    changed.loc[later, "duration"] = changed.loc[later, "duration"] * 7 + 1000  # still ends after t_x
    a = rolling_estimates(jobs, ORIGIN, min_train_jobs=50)
    b = rolling_estimates(changed, ORIGIN, min_train_jobs=50)
    upto = (jobs["submit_time"] <= t_x).to_numpy()
    assert (a.loc[upto, "model_version"] > 0).any()
    np.testing.assert_array_equal(a.loc[upto, "estimate"].to_numpy(), b.loc[upto, "estimate"].to_numpy())
    assert (a.loc[upto, "source"].to_numpy() == b.loc[upto, "source"].to_numpy()).all()
    # the test is not vacuous: later jobs do see the change
    assert not np.allclose(a.loc[~upto, "estimate"].to_numpy(), b.loc[~upto, "estimate"].to_numpy())


def test_history_features_use_only_ended_jobs():
    hist = pd.DataFrame(
        {
            "job_id": ["a", "b", "c", "z"],
            "user": ["u", "u", "u", "u"],
            "vc": "v",
            "gpu_num": 1,
            "submit_time": [0, 10, 20, 100],
            "duration": [100, 50, 500, 0],  # ends 100 (== t: counts), 60, 520 (after t: ignored), 100
        }
    )
    query = hist[hist.job_id == "z"]
    f = compute_features(query, hist, None).iloc[0]
    assert f["user_n_ended"] == 2  # a and b; c has not ended; z (zero length) never sees itself
    assert f["user_recent_gmean_s"] == pytest.approx(math.expm1((math.log1p(100) + math.log1p(50)) / 2))
    assert f["user_recent_median_s"] == pytest.approx(math.expm1((math.log1p(100) + math.log1p(50)) / 2))
    assert f["user_last_s"] == pytest.approx(100)  # a ended last (at 100)
    assert f["user_prior_jobs"] == 3  # a, b, c were submitted before
    assert f["user_since_prev_s"] == 80


# ------------------------------------------------------------------------------------------------
# fallback
# ------------------------------------------------------------------------------------------------
HIST = pd.DataFrame(
    {
        "job_id": ["A", "B", "C", "D"],
        "user": ["x", "y", "y", "x"],
        "vc": "v",
        "gpu_num": [4, 4, 4, 1],
        "cpu_num": 8,
        "submit_time": [0, 10, 50, 0],
        "duration": [100, 300, 10_000, 50],  # C ends at 10,050: after the queries below
    }
)


def _newbie(t: int, gpu: int) -> pd.DataFrame:
    return pd.DataFrame([{"job_id": "N", "user": "newbie", "vc": "v", "gpu_num": gpu, "cpu_num": 8,
                          "submit_time": t, "duration": np.nan}])


def test_fallback_rule_chain():
    q = pd.concat([_newbie(1000, 4), _newbie(1000, 2), _newbie(5, 4)], ignore_index=True)
    fb = fallback_estimates(q, HIST, default_s=1234.0)
    assert fb["estimate"].tolist() == pytest.approx([200.0, 150.0, 1234.0])  # same-GPU, overall, constant
    assert fb["source"].tolist() == ["fallback:same_gpu_mean", "fallback:overall_mean", "fallback:constant"]


def test_new_user_gets_same_gpu_fallback(fitted):
    det = fitted.predict_detailed(_newbie(1000, 4), HIST, ORIGIN)
    assert det["source"].iloc[0] == "fallback:same_gpu_mean"
    assert det["estimate"].iloc[0] == pytest.approx(200.0)
    exp = fitted.explain(_newbie(1000, 4).iloc[0], HIST, ORIGIN)
    assert isinstance(exp, Explanation)
    assert exp.kind == "fallback" and exp.model == "duration"
    assert exp.prediction == pytest.approx(200.0)
    assert "newbie" in exp.reason and "4-GPU" in exp.reason


# ------------------------------------------------------------------------------------------------
# missing inputs
# ------------------------------------------------------------------------------------------------
def test_missing_user_and_name_columns(jobs):
    bare = jobs.drop(columns=["user", "name", "cpu_num"])
    assert set(detect_missing_inputs(bare)) == {"user", "name", "cpu_num"}
    est, models = rolling_estimates(bare, None, min_train_jobs=50, return_models=True)
    assert set(est.attrs["missing_inputs"]) == {"user", "name", "cpu_num"}
    m = models[max(models)]
    assert set(m.missing_inputs_) == {"user", "name", "cpu_num"}
    assert {"user", "user_recent_gmean_s", "name_bucket", "name_recent_gmean_s", "cpu_num"} <= set(m.dropped_features_)
    assert not set(m.features_) & set(m.dropped_features_)
    assert m.name_buckets_ is None
    # without users nobody is a "new user": every job after the first refit is served by the model
    assert (est.loc[est["model_version"] > 0, "source"] == "ebm").all()
    assert np.isfinite(est["estimate"]).all() and (est["estimate"] > 0).all()


def test_empty_user_and_name_values_count_as_missing(jobs):
    blank = jobs.assign(user="", name="")
    m = DurationModel().fit(blank.iloc[:300], None)
    assert {"user", "name"} <= set(m.missing_inputs_)
    assert len(m.predict(blank.iloc[300:400], blank)) == 100


# ------------------------------------------------------------------------------------------------
# explanation, persistence, errors
# ------------------------------------------------------------------------------------------------
def test_explain_returns_sorted_additive_terms(fitted, jobs):
    row = jobs.iloc[900]
    assert row["user"] in set(jobs.iloc[:900]["user"])
    exp = fitted.explain(row, jobs, ORIGIN)
    assert exp.kind == "ebm" and exp.model == "duration"
    mags = [abs(c.contribution) for c in exp.terms]
    assert mags == sorted(mags, reverse=True)
    assert any(" & " in c.term for c in exp.terms)  # pairwise (GA2M) terms are present
    total = exp.intercept + sum(c.contribution for c in exp.terms)
    assert exp.prediction == pytest.approx(max(math.expm1(total), fitted.min_estimate_s), rel=1e-6)
    pred = fitted.predict(jobs.iloc[[900]], jobs, ORIGIN)[0]
    assert exp.prediction == pytest.approx(pred, rel=1e-9)
    d = exp.to_dict()
    assert d["terms"][0]["term"] == exp.terms[0].term


def test_shape_functions_are_the_terms_explain_adds_up(fitted, jobs, tmp_path):
    """The global explanation (shape_functions, `lucidctl models --plot`) and a job's explanation
    are the same model: the job's contribution from a nominal input is that category's score,
    and from a continuous one the score of the bin its value falls in (or `missing`)."""
    import json

    shapes = fitted.shape_functions()
    json.loads(json.dumps(shapes, allow_nan=False))  # plain, strict JSON
    terms = {t["term"]: t for t in shapes["terms"]}
    assert [t["importance"] for t in shapes["terms"]] == sorted((t["importance"] for t in shapes["terms"]), reverse=True)
    assert set(terms) == set(fitted.term_importances())
    for t in shapes["terms"]:
        dims = [len(a["values"]) - (a["type"] == "continuous") for a in t["axes"]]
        assert np.shape(t["scores"]) == tuple(dims), t["term"]
    row = jobs.iloc[900]
    exp = fitted.explain(row, jobs, ORIGIN)
    assert shapes["intercept"] == pytest.approx(exp.intercept)
    checked = 0
    for c in exp.terms:
        t = terms[c.term]
        if len(t["axes"]) != 1:
            continue
        axis = t["axes"][0]
        if axis["type"] == "nominal":
            expected = t["scores"][axis["values"].index(str(c.value))]
        elif c.value is None:
            expected = t["missing"]
        else:
            edges = axis["values"]
            i = min(max(int(np.searchsorted(edges, float(c.value), side="left")) - 1, 0), len(t["scores"]) - 1)
            # a value on an edge may belong to either side, as EBM cuts it
            if c.contribution != pytest.approx(t["scores"][i], abs=1e-9) and float(c.value) in edges:
                i = min(i + 1, len(t["scores"]) - 1)
            expected = t["scores"][i]
        assert c.contribution == pytest.approx(expected, abs=1e-9), (c.term, c.value)
        checked += 1
    assert checked >= 5
    from models.plots import write_shape_plots

    paths = write_shape_plots(shapes, str(tmp_path / "p"), "duration_v1", top=4)
    assert len(paths) == 1 + len(shapes["terms"]) and all(open(p, "rb").read(4) == b"\x89PNG" for p in paths)


def test_save_load_round_trip(fitted, jobs, tmp_path):
    path = tmp_path / "duration.joblib"
    fitted.save(path)
    loaded = DurationModel.load(path)
    assert loaded.stamp_.model == "duration" and loaded.stamp_.train_rows == fitted.train_rows_
    q = jobs.iloc[800:900]
    np.testing.assert_array_equal(loaded.predict(q, jobs, ORIGIN), fitted.predict(q, jobs, ORIGIN))
    with pytest.raises(ModelError):
        load_model(path, "packing")


def test_unfitted_model_raises(jobs):
    with pytest.raises(ModelError):
        DurationModel().predict(jobs.iloc[:5])
    with pytest.raises(ModelError):
        DurationModel().fit(jobs.iloc[:0])


# ------------------------------------------------------------------------------------------------
# job-name buckets
# ------------------------------------------------------------------------------------------------
def test_normalise_name():
    assert normalise_name("resnet_lr0.1_seed1") == normalise_name("resnet_lr0.1_seed2") == "resnet_lr_seed"
    assert normalise_name("train-2020-09-01-3fa9c2d1") == "train"
    assert normalise_name("") == "" and normalise_name(None) == ""
    # names in any script keep their letters (`[^0-9a-z]` once read these as "v", "bert" and "r_sum_lr");
    # an accent, composed or not, is part of its letter; full-width Latin reads as ASCII
    assert normalise_name("训练任务_v2") == "训练任务_v" and normalise_name("обучение-bert") == "обучение_bert"
    assert normalise_name("résumé_lr0.1") == normalise_name("re\u0301sume\u0301_lr0.2") == "résumé_lr"
    assert normalise_name("ＲｅｓＮｅｔ_seed3") == normalise_name("ResNet_seed4") == "resnet_seed"


def test_name_buckets_group_families():
    names = ["resnet_lr0.1_seed1", "resnet_lr0.1_seed2", "bert_ft"]
    nb = NameBuckets(random_state=0).fit(names)
    b = nb.transform(names)
    assert b[0] == b[1] != b[2]
    assert nb.transform(["", None]).tolist() == [-1, -1]


def test_name_buckets_on_many_names(jobs):
    nb = NameBuckets(random_state=0).fit(jobs["name"])
    b = nb.transform(["resnet_lr0.5_seed7", "resnet_lr0.01_seed3", "bert_ft_0.1_run4", "bert_ft_0.5_run1",
                      "dcgan_celeba_bs64", "resnet_lr0.1_seed1_wd"])
    assert b[0] == b[1] and b[2] == b[3]
    assert len({b[0], b[2], b[4]}) == 3
    assert b[5] == b[0]  # an unseen variant goes to its nearest exemplar
    # deterministic, and independent of input order
    nb2 = NameBuckets(random_state=0).fit(list(reversed(jobs["name"].tolist())))
    assert nb2.exemplars_ == nb.exemplars_


def test_name_buckets_cap_on_clustered_names():
    names = [f"family{chr(97 + i % 26)}{chr(97 + i // 26)}_x" for i in range(300)]
    nb = NameBuckets(max_names=50, random_state=0).fit(names)
    assert len(nb.bucket_of_) == 300  # names beyond the cap are assigned to the nearest exemplar
    assert set(nb.bucket_of_.values()) <= set(range(nb.n_buckets))


# ------------------------------------------------------------------------------------------------
# real traces (../shared)
# ------------------------------------------------------------------------------------------------
def _venus():
    path = SHARED / "traces" / "helios_venus_sept2020_lucid" / "jobs.csv"
    if not path.exists():
        pytest.skip(f"shared Venus trace not available at {path}")
    j = pd.read_csv(path)
    return pd.DataFrame(
        {
            "job_id": j["job_id"].astype(str),
            "user": j["user"],
            "vc": j["vc"],
            "gpu_num": j["gpu_num"],
            "cpu_num": j["cpu_num"],
            "submit_time": j["submit_time"],
            "duration": j["duration"],
            "state": j["state"],
            "seq": np.arange(len(j)),
        }
    )


@pytest.mark.shared
@pytest.mark.slow
def test_venus_rolling_estimates_rank_better_than_artifact():
    jobs = _venus()
    extra = SHARED / "lucid-artifact" / "extra"
    if not (extra / "Venus_Sept_ebm_weekly_updated.csv").exists():
        pytest.skip(f"Lucid artifact estimates not available under {extra}")
    est = rolling_estimates(jobs, pd.Timestamp("2020-04-01 00:00:00"))
    assert len(est.attrs["refits"]) == 3 and est.attrs["missing_inputs"] == ["name"]
    ebm = load_artifact_estimates(extra / "Venus_Sept_ebm_weekly_updated.csv")
    assert ebm.index.is_unique and (ebm < 0).any()
    res = evaluate(est, jobs, {"artifact_ebm": ebm.where(ebm >= 0, 1000.0)}, mask=est["model_version"] > 0)
    assert res["artifact_ebm"]["coverage"] == 1.0
    assert res["ours"]["spearman"] > res["artifact_ebm"]["spearman"]
    assert res["ours"]["priority_spearman"] > 0.5
