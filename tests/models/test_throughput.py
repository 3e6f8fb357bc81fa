"""Throughput Predict Model: binning, causal features/forecasts, explanations, persistence."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

from models.base import ModelError, make_stamp, save_model
from models.render import render_explanation
from models.throughput import (
    ThroughputModel,
    bin_arrivals,
    evaluate,
    load_cluster_throughput,
    naive_forecasts,
    rolling_forecasts,
)

from tests.conftest import SHARED  # noqa: E402  (the one place that knows where ../shared is)
ARTIFACT = SHARED / "lucid-artifact"
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid"

ORIGIN = pd.Timestamp("2024-01-01")  # a Monday, midnight
#: Small, fast settings for unit tests (no worker processes).
FAST = dict(n_jobs=1, outer_bags=1, max_rounds=150, interactions=2, early_stopping_rounds=20)


def _bins(days: int = 10, seed: int = 0) -> pd.DataFrame:
    """Synthetic 10-min arrivals with a daily cycle and a weekend dip."""
    rng = np.random.default_rng(seed)
    n = days * 144
    t = np.arange(n) * 600
    hour = (t % 86400) / 3600
    weekday = (t // 86400) % 7
    rate = 4 + 3 * np.sin(2 * np.pi * (hour - 9) / 24) - 1.5 * (weekday >= 5)
    jobs = rng.poisson(np.clip(rate, 0.2, None))
    df = pd.DataFrame({"time": t, "submit_gpu_job": jobs, "submit_gpu_num": jobs * rng.integers(1, 4, n)})
    df.attrs["origin"] = ORIGIN
    return df


@pytest.fixture(scope="module")
def bins() -> pd.DataFrame:
    return _bins()


@pytest.fixture(scope="module")
def model(bins) -> ThroughputModel:
    return ThroughputModel(**FAST).fit(bins.iloc[: 7 * 144])


# ---------------------------------------------------------------------------------------------
# bins
# ---------------------------------------------------------------------------------------------


def test_bin_arrivals_counts_and_empty_bins():
    jobs = pd.DataFrame(
        {
            "submit_time": [5, 100, 599, 600, 3000, 3010, 3020],
            "gpu_num": [1, 8, 2, 0, 4, 1, 1],  # the gpu_num 0 job is not a GPU job
        }
    )
    b = bin_arrivals(jobs, origin=ORIGIN)
    assert list(b.columns) == ["time", "submit_gpu_job", "submit_gpu_num"]
    assert list(b["time"]) == [0, 600, 1200, 1800, 2400, 3000]
    assert list(b["submit_gpu_job"]) == [3, 0, 0, 0, 0, 3]
    assert list(b["submit_gpu_num"]) == [11, 0, 0, 0, 0, 6]
    assert b.attrs["origin"] == ORIGIN
    # explicit range: leading and trailing empty bins
    wide = bin_arrivals(jobs, start=-1200, end=4300)
    assert list(wide["time"]) == list(range(-1200, 4201, 600))
    assert wide["submit_gpu_job"].sum() == 6
    assert wide.attrs["origin"] is None
    with pytest.raises(ModelError):
        bin_arrivals(pd.DataFrame({"submit_time": [1]}))


def test_load_cluster_throughput_layout(tmp_path):
    times = pd.date_range("2020-04-01 00:00", periods=6, freq="10min").delete(3)  # one bin missing
    csv = tmp_path / "cluster_throughput.csv"
    pd.DataFrame(
        {
            "time": times.strftime("%Y-%m-%d %H:%M:%S"),
            "submit_job_all": [3, 1, 0, 2, 5],
            "submit_gpu_job": [2, 1, 0, 2, 4],
            "submit_gpu_num": [9, 1, 0, 16, 4],
        }
    ).to_csv(csv, index=False)
    b = load_cluster_throughput(csv)
    assert b.attrs["origin"] == pd.Timestamp("2020-04-01")
    assert list(b["time"]) == [0, 600, 1200, 1800, 2400, 3000]
    assert list(b["submit_gpu_job"]) == [2, 1, 0, 0, 2, 4]
    assert "submit_job_all" in b.columns


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------


def test_fit_forecast_predict_shapes(model, bins):
    series = model.predict_series(bins)
    assert isinstance(series, pd.Series) and len(series) == len(bins)
    assert list(series.index) == list(bins["time"])
    assert (series >= 0).all() and np.isfinite(series).all()
    # forecast(history up to bin k-1) is the series value at bin k
    for k in (200, 1000, len(bins) - 1):
        assert model.forecast(bins.iloc[:k]) == pytest.approx(series.iloc[k])
    assert isinstance(model.forecast(bins), float)
    # the forecast tracks the daily cycle better than the overall mean does
    y = bins["submit_gpu_job"].rolling(6).mean().shift(-5).to_numpy()
    pred = series.to_numpy()
    test = slice(7 * 144, len(bins) - 5)
    mae = np.abs(pred[test] - y[test]).mean()
    assert mae < np.abs(y[test] - np.nanmean(y[: 7 * 144])).mean()


def test_fit_needs_two_days_and_valid_target(bins):
    with pytest.raises(ModelError):
        ThroughputModel(**FAST).fit(bins.iloc[:200])
    with pytest.raises(ModelError):
        ThroughputModel(target="nonsense")
    with pytest.raises(ModelError):
        ThroughputModel(**FAST).forecast(bins)  # not fitted


def test_explain_is_additive_and_sorted(model, bins):
    history = bins.iloc[:900]
    exp = model.explain(history)
    assert exp.kind == "ebm" and exp.model == "throughput"
    assert exp.intercept is not None and len(exp.terms) >= 10
    mags = [abs(t.contribution) for t in exp.terms]
    assert mags == sorted(mags, reverse=True)
    total = exp.intercept + sum(t.contribution for t in exp.terms)
    assert exp.prediction == pytest.approx(max(total, 0.0))
    assert exp.prediction == pytest.approx(model.forecast(history))
    assert any(" & " in t.term for t in exp.terms)  # pairwise interaction terms (GA2M)
    text = render_explanation(exp)
    assert "(intercept)" in text and "= sum" in text


def test_predict_series_never_sees_the_future(model, bins):
    k = 1000
    before = model.predict_series(bins)
    changed = bins.copy()
    changed.loc[changed.index[k:], "submit_gpu_job"] = 500  # a burst from bin k on
    after = model.predict_series(changed)
    # the value at bin k is made before bin k is seen
    np.testing.assert_array_equal(before.iloc[: k + 1].to_numpy(), after.iloc[: k + 1].to_numpy())
    assert not np.allclose(before.iloc[k + 1 :].to_numpy(), after.iloc[k + 1 :].to_numpy())


def test_rolling_forecasts_never_see_the_future(bins):
    kw = dict(refit_every_bins=144, min_train_bins=2 * 144 + 6, **FAST)
    short = bins.iloc[: 5 * 144]
    base = rolling_forecasts(short, return_source=True, **kw)
    assert list(base.index) == list(short["time"])
    src = base["source"]
    assert set(src.iloc[: 2 * 144 + 6]) <= {"none", "rolling_mean", "seasonal_naive"}
    assert src.iloc[0] == "none" and src.iloc[1] == "rolling_mean" and src.iloc[200] == "seasonal_naive"
    assert src.iloc[2 * 144 + 6].startswith("ebm@")
    assert src.iloc[-1] != src.iloc[2 * 144 + 6]  # refitted later
    for k in (150, 2 * 144 + 6, 3 * 144 + 20):
        changed = short.copy()
        changed.loc[changed.index[k:], "submit_gpu_job"] = 300
        after = rolling_forecasts(changed, **kw)
        np.testing.assert_array_equal(base["forecast"].iloc[: k + 1].to_numpy(), after.iloc[: k + 1].to_numpy())
        assert not np.allclose(base["forecast"].iloc[k + 1 :].to_numpy(), after.iloc[k + 1 :].to_numpy())


def test_naive_fallback_values(bins):
    series, src = naive_forecasts(bins)
    x = bins["submit_gpu_job"].to_numpy(dtype=float)
    assert series.iloc[0] == 0 and src[0] == "none"
    assert series.iloc[3] == pytest.approx(x[:3].mean())
    assert series.iloc[500] == pytest.approx(x[500 - 144 : 500 - 144 + 6].mean())


def test_evaluate_reports_all_methods(bins):
    out = evaluate(bins, split=ORIGIN + pd.Timedelta(days=7), **FAST)
    assert out["train_bins"] == 7 * 144 and out["test_points"] == 3 * 144 - 5
    for key in ("mae_ebm", "mae_seasonal_naive", "mae_holt_winters", "mae_mean_of_last_hour"):
        assert np.isfinite(out[key]) and out[key] >= 0
    assert 0 <= out["switch_agree_ebm"] <= 1
    same = evaluate(bins, split=7 * 144 * 600, **FAST)
    assert same["mae_ebm"] == out["mae_ebm"]


# ---------------------------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------------------------


def test_save_load_round_trip(model, bins, tmp_path):
    path = tmp_path / "throughput.joblib"
    model.save(path)
    loaded = ThroughputModel.load(path)
    assert loaded.forecast(bins) == model.forecast(bins)
    assert loaded.stamp.model == "throughput"
    assert loaded.stamp.train_span == (0, (7 * 144 - 1) * 600)
    assert loaded.stamp.metrics["target"] == "submit_gpu_job"


def test_load_refuses_other_model_kind(tmp_path):
    other = tmp_path / "packing.joblib"
    save_model({"tree": None}, make_stamp("packing", train_rows=1), other)
    with pytest.raises(ModelError, match="expected 'throughput'"):
        ThroughputModel.load(other)
    (tmp_path / "junk.joblib").write_bytes(b"not a pickle")
    with pytest.raises(ModelError):
        ThroughputModel.load(tmp_path / "junk.joblib")


# ---------------------------------------------------------------------------------------------
# the artifact's data (read from ../shared, never copied)
# ---------------------------------------------------------------------------------------------


@pytest.mark.shared
@pytest.mark.slow
def test_artifact_cluster_throughput_september():
    path = ARTIFACT / "cluster_throughput.csv"
    if not path.exists():
        pytest.skip(f"{path} not found (../shared is not mounted)")
    bins = load_cluster_throughput(path)
    assert len(bins) == 26064 and bins.attrs["origin"] == pd.Timestamp("2020-04-01")
    out = evaluate(bins, split="2020-09-01")
    assert out["test_points"] == 4027
    assert out["mae_ebm"] < out["mae_seasonal_naive"]
    assert out["mae_ebm"] < 1.1 * out["mae_holt_winters"]


@pytest.mark.shared
def test_venus_jobs_bin_like_the_artifact():
    jobs_csv, tp_csv = VENUS / "jobs.csv", ARTIFACT / "cluster_throughput.csv"
    if not jobs_csv.exists() or not tp_csv.exists():
        pytest.skip(f"{jobs_csv} or {tp_csv} not found (../shared is not mounted)")
    jobs = pd.read_csv(jobs_csv, usecols=["submit_time", "gpu_num"])
    sept = 13_219_200  # 2020-09-01 00:00 in the trace's seconds
    bins = bin_arrivals(jobs, origin=pd.Timestamp("2020-04-01"), start=sept, end=sept + 26 * 86400 - 1)
    assert len(bins) == 26 * 144 and bins["submit_gpu_job"].sum() == len(jobs)
    art = load_cluster_throughput(tp_csv).set_index("time").reindex(bins["time"])
    # the artifact counted a slightly larger job set, but the bins line up
    corr = np.corrcoef(bins["submit_gpu_job"], art["submit_gpu_job"])[0, 1]
    assert corr > 0.85


def test_a_stray_submit_time_is_named_by_its_job():
    """99999999999 among 2020's seconds gave a span error that named no job (a scale review)."""
    jobs = pd.DataFrame({"job_id": ["a", "b", "stray"], "submit_time": [1_600_000_000, 1_600_000_600, 99_999_999_999],
                         "gpu_num": [1, 2, 1]})
    with pytest.raises(ModelError, match=r"job stray, submit_time 99999999999, is farthest from the median"):
        bin_arrivals(jobs)
