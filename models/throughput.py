"""Throughput Predict Model: forecasts the cluster's GPU demand for the coming hour.

Lucid switches packing off when little work is about to arrive and scales its profiling partition
with the predicted demand.  This module turns a job table into 10-minute arrival bins, fits an
InterpretML ``ExplainableBoostingRegressor`` (GA2M: one shape function per feature plus a few
pairwise interactions) on features computed from *history only*, and produces forecasts that never
look at the future -- the property the simulator depends on.

Conventions (see docs/models-packing-throughput.md):

* A *bins frame* has one row per bin, columns ``time`` (bin start, integer seconds since the
  frame's origin), ``submit_gpu_job`` and ``submit_gpu_num``; the origin (a naive
  ``pd.Timestamp``, or None) travels in ``df.attrs["origin"]``.  Without an origin, time 0 is taken
  to be a midnight (only hour-of-day and weekday depend on it).
* The decision point ``t`` is the *start* of bin ``t``: everything strictly before bin ``t`` is
  known, nothing from bin ``t`` onwards is.  The target at ``t`` is the mean of bins
  ``t .. t+horizon_bins-1`` (the demand over the next hour, per bin).
* ``predict_series`` / ``rolling_forecasts`` return a series indexed by bin start ``time``; the
  value at ``T`` is the forecast for ``[T, T + horizon)`` made with bins ending at ``T``.
"""

from __future__ import annotations

import logging
import time as _time
import warnings
from typing import Any

import numpy as np
import pandas as pd

from .base import Contribution, Explanation, ModelError, load_model, make_stamp, save_model

log = logging.getLogger(__name__)

MODEL_NAME = "throughput"
TARGETS = ("submit_gpu_job", "submit_gpu_num")
BIN_S = 600
DAY_S = 86_400
WEEK_S = 7 * DAY_S

#: Lags of single bins (in bins before the decision point).
SHORT_LAGS = (1, 2, 3, 6)
#: Rolling windows (bins) over the history just before the decision point.
ROLL_WINDOWS = (6, 36, 144)
#: Span (bins) of the causal exponential smoother that carries the deseasonalised level forward.
TREND_SPAN = 144


# --------------------------------------------------------------------------------------------
# Bins
# --------------------------------------------------------------------------------------------


def _origin_of(df: pd.DataFrame) -> pd.Timestamp | None:
    origin = df.attrs.get("origin") if hasattr(df, "attrs") else None
    return None if origin is None else pd.Timestamp(origin)


MAX_BINS = 20 * 365 * 144  # twenty years of 10-minute bins, about 17 MB per count column


def bin_arrivals(
    jobs: pd.DataFrame,
    origin: pd.Timestamp | str | None = None,
    bin_s: int = BIN_S,
    start: int | None = None,
    end: int | None = None,
) -> pd.DataFrame:
    """Count GPU-job arrivals per bin.

    jobs: canonical job table with ``submit_time`` (int seconds since `origin`) and ``gpu_num``.
    Only GPU jobs (``gpu_num > 0``) are counted, as in the artifact's ``submit_gpu_*`` columns.
    Bins are aligned to multiples of `bin_s` from the origin and cover ``start .. end`` (seconds,
    default: the first and last submit time); empty bins are included with zeros.
    Returns columns ``time, submit_gpu_job, submit_gpu_num`` and ``attrs["origin"]``.
    """
    for col in ("submit_time", "gpu_num"):
        if col not in jobs.columns:
            raise ModelError(f"bin_arrivals: job table has no '{col}' column")
    if bin_s <= 0:
        raise ModelError("bin_arrivals: bin_s must be positive")
    submit = pd.to_numeric(jobs["submit_time"], errors="coerce")
    gpus = pd.to_numeric(jobs["gpu_num"], errors="coerce").fillna(0)
    ok = submit.notna()
    if (~ok).any():
        log.warning("bin_arrivals: %d jobs without a submit_time ignored", int((~ok).sum()))
    submit, gpus = submit[ok].astype(np.int64), gpus[ok].astype(np.int64)
    if start is None and end is None and submit.empty:
        raise ModelError("bin_arrivals: no jobs and no start/end given")
    first = (int(start) if start is not None else int(submit.min())) // bin_s
    last = (int(end) if end is not None else int(submit.max())) // bin_s
    if last < first:
        raise ModelError("bin_arrivals: end is before start")
    idx = submit // bin_s
    keep = (gpus > 0) & (idx >= first) & (idx <= last)
    n = last - first + 1
    if n > MAX_BINS:  # one stray submit time (milliseconds for seconds) asked for ~20 GiB of bins (a fuzzing session)
        # Name the job farthest from the median: the span is almost always one stray value, and
        # an admin fixes a row, not "a span" (a scale review: 99999999999 among 2020's seconds).
        far = (submit - int(submit.median())).abs().idxmax() if not submit.empty else None
        who = ""
        if far is not None:
            jid = jobs["job_id"].get(far) if "job_id" in jobs.columns else None
            who = (f" (job {jid}, " if jid is not None else " (") + f"submit_time {int(submit[far])}, is farthest from the median {int(submit.median())})"
        raise ModelError(f"bin_arrivals: the submissions span {n * bin_s / 86400 / 365:,.0f} years ({n:,} bins of "
                         f"{bin_s} s): check for a stray submit time (milliseconds for seconds){who}, or window "
                         "the trace")
    pos = (idx[keep] - first).to_numpy()
    njob = np.bincount(pos, minlength=n)
    ngpu = np.bincount(pos, weights=gpus[keep].to_numpy(dtype=float), minlength=n)
    out = pd.DataFrame(
        {
            "time": (np.arange(first, last + 1, dtype=np.int64) * bin_s),
            "submit_gpu_job": njob.astype(np.int64),
            "submit_gpu_num": np.rint(ngpu).astype(np.int64),
        }
    )
    out.attrs["origin"] = None if origin is None else pd.Timestamp(origin)
    out.attrs["bin_s"] = int(bin_s)
    return out


def load_cluster_throughput(path, origin: pd.Timestamp | str | None = None) -> pd.DataFrame:
    """Read the artifact's ``cluster_throughput.csv`` layout into a bins frame.

    The file has a ``time`` datetime column (bin start) and count columns (``submit_gpu_job``,
    ``submit_gpu_num``, ...; all count columns are kept).  `origin` defaults to midnight of the
    first bin's day.  Missing bins are inserted with zero counts.
    """
    raw = pd.read_csv(path)
    if "time" not in raw.columns:
        raise ModelError(f"{path}: no 'time' column")
    missing = [c for c in TARGETS if c not in raw.columns]
    if missing:
        raise ModelError(f"{path}: missing columns {missing}")
    ts = pd.to_datetime(raw["time"])
    if ts.isna().any():
        raise ModelError(f"{path}: unparseable times")
    step = ts.diff().dropna()
    if step.empty:
        raise ModelError(f"{path}: needs at least two bins")
    bin_td = step.min()
    if bin_td <= pd.Timedelta(0):
        raise ModelError(f"{path}: times are not strictly increasing")
    bin_s = int(bin_td.total_seconds())
    origin = ts.iloc[0].normalize() if origin is None else pd.Timestamp(origin)
    secs = ((ts - origin) // pd.Timedelta(seconds=1)).astype(np.int64)
    if (secs % bin_s != 0).any():
        raise ModelError(f"{path}: bins are not aligned to {bin_s} s from origin {origin}")
    counts = raw.drop(columns=["time"]).select_dtypes("number")
    counts.insert(0, "time", secs.to_numpy())
    full = np.arange(secs.iloc[0], secs.iloc[-1] + bin_s, bin_s, dtype=np.int64)
    if len(full) != len(counts):
        log.warning("%s: %d missing bins filled with zeros", path, len(full) - len(counts))
        counts = counts.set_index("time").reindex(full, fill_value=0).rename_axis("time").reset_index()
    counts.attrs["origin"] = origin
    counts.attrs["bin_s"] = bin_s
    return counts


def _regular(bins: pd.DataFrame, bin_s: int, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) on a regular grid; missing bins count as empty, duplicates are an error."""
    if "time" not in bins.columns or target not in bins.columns:
        raise ModelError(f"bins frame needs columns 'time' and '{target}'")
    if bins.empty:
        raise ModelError("empty bins frame")
    t = pd.to_numeric(bins["time"], errors="raise").to_numpy(dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t = t[order]
    v = pd.to_numeric(bins[target], errors="coerce").to_numpy(dtype=float)[order]
    if np.isnan(v).any():
        raise ModelError(f"'{target}' has missing values; bins must be counts (0 for an empty bin)")
    if (np.diff(t) == 0).any():
        raise ModelError("bins frame has duplicate times")
    if ((t - t[0]) % bin_s).any():
        raise ModelError(f"bin times are not on a {bin_s}-second grid")
    full = np.arange(t[0], t[-1] + bin_s, bin_s, dtype=np.int64)
    if len(full) != len(t):
        vals = np.zeros(len(full))
        vals[(t - t[0]) // bin_s] = v
        return full, vals
    return t, v


# --------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------


def _abs_seconds(times: np.ndarray, origin: pd.Timestamp | None) -> np.ndarray:
    """Seconds since a Monday-00:00 epoch, so that hour and weekday are plain arithmetic."""
    if origin is None:
        base = 0  # time 0 is taken as a midnight; weekday counted from it (0 = day of time 0)
    else:
        o = pd.Timestamp(origin)
        base = int((o - o.normalize()).total_seconds()) + o.day_of_week * DAY_S
    return times.astype(np.int64) + base


def _seasonal_profile(
    times: np.ndarray, values: np.ndarray, origin, bin_s: int, period_bins: int
) -> np.ndarray:
    """Daily seasonal profile (one value per bin of the day) from statsmodels' seasonal_decompose.

    Fitted on the given (training) bins only.  Extreme bursts are clipped at the 99.5th
    percentile first so one 700-job bin does not shape the whole profile.
    """
    from statsmodels.tsa.seasonal import seasonal_decompose

    prof = np.zeros(period_bins)
    if len(values) < 2 * period_bins:
        return prof  # not enough history for a daily profile: no seasonal term
    clipped = np.minimum(values, np.quantile(values, 0.995))
    seasonal = seasonal_decompose(clipped, model="additive", period=period_bins).seasonal
    phase = (_abs_seconds(times, origin) % DAY_S) // bin_s
    prof_df = pd.Series(seasonal).groupby(phase).mean()
    prof[prof_df.index.to_numpy()] = prof_df.to_numpy()
    return prof


class _FeatureSpec:
    """The fitted, history-only feature builder (parameters: bin size, horizon, daily profile)."""

    def __init__(self, bin_s: int, horizon: int, origin, profile: np.ndarray):
        self.bin_s = bin_s
        self.horizon = horizon
        self.origin = origin
        self.profile = profile
        self.day_bins = DAY_S // bin_s
        self.week_bins = WEEK_S // bin_s

    @property
    def names(self) -> list[str]:
        return (
            ["hour", "weekday"]
            + [f"lag_{k}" for k in SHORT_LAGS]
            + ["lag_1d", "lag_1w"]
            + [f"roll_mean_{w}" for w in ROLL_WINDOWS]
            + [f"roll_median_{w}" for w in ROLL_WINDOWS]
            + ["trend", "seasonal"]
        )

    def build(self, times: np.ndarray, values: np.ndarray) -> pd.DataFrame:
        """Features for the n+1 decision points 0..n (n = len(values); point n = after the last bin).

        Row t uses only values[:t].
        """
        n = len(values)
        h = self.horizon
        s = pd.Series(np.append(values.astype(float), np.nan))  # index t = bin t; t = n unknown
        past = s.shift(1)  # past[t] = values[t-1]
        abs_s = _abs_seconds(np.append(times, times[-1] + self.bin_s) if n else times, self.origin)
        sod = abs_s % DAY_S
        phase = sod // self.bin_s
        feats: dict[str, Any] = {
            "hour": sod / 3600.0,
            "weekday": (abs_s // DAY_S) % 7,
        }
        for k in SHORT_LAGS:
            feats[f"lag_{k}"] = s.shift(k)
        # mean of the `h` bins one day / one week before the target window (horizon-aligned)
        win_mean = s.rolling(h, min_periods=h).mean()
        feats["lag_1d"] = win_mean.shift(self.day_bins - h + 1)
        feats["lag_1w"] = win_mean.shift(self.week_bins - h + 1)
        for w in ROLL_WINDOWS:
            feats[f"roll_mean_{w}"] = past.rolling(w, min_periods=1).mean()
        for w in ROLL_WINDOWS:
            feats[f"roll_median_{w}"] = past.rolling(w, min_periods=1).median()
        # trend: causal, exponentially smoothed level of the deseasonalised history, carried flat
        prof = self.profile
        deseason = s - prof[phase]
        feats["trend"] = deseason.ewm(span=TREND_SPAN, adjust=False, ignore_na=True).mean().shift(1)
        # seasonal: the fitted daily profile averaged over the target window (known in advance)
        feats["seasonal"] = np.mean([prof[(phase + j) % self.day_bins] for j in range(h)], axis=0)
        X = pd.DataFrame(feats)
        return X[self.names]

    def targets(self, values: np.ndarray) -> np.ndarray:
        """y[t] = mean(values[t : t+h]) for t = 0..n (NaN where the window is incomplete)."""
        s = pd.Series(np.append(values.astype(float), np.nan))
        return s.rolling(self.horizon, min_periods=self.horizon).mean().shift(-(self.horizon - 1)).to_numpy()


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


class ThroughputModel:
    """EBM (GA2M) forecaster of the mean per-bin demand over the next `horizon_bins` bins.

    fit(bins) -> self; forecast(history) -> float; predict_series(bins) -> Series;
    explain(history) -> Explanation; save(path) / ThroughputModel.load(path).
    """

    def __init__(
        self,
        target: str = "submit_gpu_job",
        horizon_bins: int = 6,
        bin_s: int = BIN_S,
        origin: pd.Timestamp | str | None = None,
        interactions: int | list = 3,
        max_interaction_bins: int = 16,
        outer_bags: int = 2,
        max_rounds: int = 500,
        learning_rate: float = 0.05,
        early_stopping_rounds: int = 50,
        min_samples_leaf: int = 4,
        clip_quantile: float | None = 0.99,
        weekday: bool | str = "auto",
        objective: str = "rmse",
        n_jobs: int = 2,
        random_state: int = 0,
    ):
        if target not in TARGETS:
            raise ModelError(f"target must be one of {TARGETS}, not {target!r}")
        if bin_s <= 0 or DAY_S % bin_s:
            raise ModelError("bin_s must divide a day")
        if not 1 <= horizon_bins <= DAY_S // bin_s:
            raise ModelError("horizon_bins must be between 1 and one day of bins")
        self.target = target
        self.horizon_bins = int(horizon_bins)
        self.bin_s = int(bin_s)
        self.origin = None if origin is None else pd.Timestamp(origin)
        self.interactions = interactions
        self.outer_bags = outer_bags
        self.max_rounds = max_rounds
        self.learning_rate = learning_rate
        self.early_stopping_rounds = early_stopping_rounds
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.clip_quantile = clip_quantile
        self.objective = objective
        self.weekday = weekday
        self.min_samples_leaf = min_samples_leaf
        self.max_interaction_bins = max_interaction_bins
        self.features_: list[str] = []
        self.ebm_ = None
        self.spec_: _FeatureSpec | None = None
        self.train_span_: tuple[int, int] | None = None
        self.train_rows_ = 0
        self.fit_seconds_: float | None = None
        self.train_mae_: float | None = None
        self.stamp = None

    # -- helpers ---------------------------------------------------------------------------

    def _origin_for(self, bins: pd.DataFrame):
        o = _origin_of(bins)
        return self.origin if o is None else o

    def _check_fitted(self):
        if self.ebm_ is None or self.spec_ is None:
            raise ModelError("throughput model is not fitted")

    def _series_features(self, bins: pd.DataFrame):
        """(times, values, X) with X built with the *bins'* origin (absolute time features)."""
        self._check_fitted()
        times, values = _regular(bins, self.bin_s, self.target)
        spec = _FeatureSpec(self.bin_s, self.horizon_bins, self._origin_for(bins), self.spec_.profile)
        return times, values, spec.build(times, values)[self.features_]

    # -- API -------------------------------------------------------------------------------

    def fit(self, bins: pd.DataFrame) -> "ThroughputModel":
        """Fit on every decision point whose whole target window lies inside `bins`."""
        from interpret.glassbox import ExplainableBoostingRegressor

        from .base import portable_ebm

        portable_ebm()
        t0 = _time.perf_counter()
        times, values = _regular(bins, self.bin_s, self.target)
        origin = self._origin_for(bins)
        day_bins = DAY_S // self.bin_s
        if len(values) < 2 * day_bins + self.horizon_bins:
            raise ModelError(
                f"throughput model needs at least two days of bins ({2 * day_bins + self.horizon_bins}), "
                f"got {len(values)}"
            )
        profile = _seasonal_profile(times, values, origin, self.bin_s, day_bins)
        spec = _FeatureSpec(self.bin_s, self.horizon_bins, origin, profile)
        X = spec.build(times, values)
        y = spec.targets(values)
        rows = np.isfinite(y)
        rows[0] = False  # no history at all at t = 0
        use_weekday = self.weekday if isinstance(self.weekday, bool) else len(values) >= 4 * 7 * day_bins
        X, y = X[rows], y[rows]
        # weekday only with >= 4 weeks of history (else it memorises single days); features with no
        # value at all in the training rows (e.g. lag_1w with < 1 week of bins) are left out.
        self.features_ = [
            f for f in spec.names if (use_weekday or f != "weekday") and X[f].notna().any()
        ]
        X = X[self.features_]
        y_fit = y
        if self.clip_quantile is not None:
            y_fit = np.minimum(y, np.quantile(y, self.clip_quantile))
        ebm = ExplainableBoostingRegressor(
            feature_names=self.features_,
            interactions=self.interactions,
            outer_bags=self.outer_bags,
            max_rounds=self.max_rounds,
            learning_rate=self.learning_rate,
            early_stopping_rounds=self.early_stopping_rounds,
            n_jobs=self.n_jobs,
            random_state=self.random_state,
            objective=self.objective,
            min_samples_leaf=self.min_samples_leaf,
            max_interaction_bins=self.max_interaction_bins,
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Missing values detected")
            ebm.fit(X, y_fit)
        self.ebm_, self.spec_ = ebm, spec
        self.origin = origin
        self.train_span_ = (int(times[0]), int(times[-1]))
        self.train_rows_ = int(len(y))
        self.train_mae_ = float(np.mean(np.abs(ebm.predict(X) - y)))
        self.fit_seconds_ = time_spent = _time.perf_counter() - t0
        log.info("throughput model (%s) fitted on %d rows in %.1f s", self.target, len(y), time_spent)
        return self

    def predict_series(self, bins: pd.DataFrame) -> pd.Series:
        """One forecast per bin: value at time T = mean demand per bin over [T, T+horizon),
        predicted from bins strictly before T only (the first bin has no history and gets the
        model's prediction from an all-missing history)."""
        times, values, X = self._series_features(bins)
        pred = np.maximum(self.ebm_.predict(X.iloc[: len(values)]), 0.0)
        return pd.Series(pred, index=pd.Index(times, name="time"), name=f"pred_{self.target}")

    def forecast(self, history: pd.DataFrame) -> float:
        """Mean demand per bin over the `horizon_bins` bins after the last bin of `history`."""
        times, values, X = self._series_features(history)
        return float(max(self.ebm_.predict(X.iloc[[len(values)]])[0], 0.0))

    def explain(self, history: pd.DataFrame) -> Explanation:
        """Additive explanation of forecast(history): intercept + one contribution per term."""
        times, values, X = self._series_features(history)
        row = X.iloc[[len(values)]]
        contrib = self.ebm_.eval_terms(row)[0]
        terms = []
        for name, features, c in zip(self.ebm_.term_names_, self.ebm_.term_features_, contrib):
            vals = tuple(_plain(row.iloc[0, i]) for i in features)
            terms.append(Contribution(term=name, value=vals[0] if len(vals) == 1 else vals, contribution=float(c)))
        terms.sort(key=lambda c: abs(c.contribution), reverse=True)
        raw = float(self.ebm_.intercept_ + contrib.sum())
        pred = max(raw, 0.0)
        reason = (
            f"mean {self.target} per {self.bin_s}-s bin over the {self.horizon_bins} bins starting at "
            f"time {int(times[-1]) + self.bin_s}"
        )
        if raw < 0:
            reason += f"; additive score {raw:.3g} clipped to 0"
        return Explanation(
            model=MODEL_NAME,
            kind="ebm",
            prediction=pred,
            intercept=float(self.ebm_.intercept_),
            terms=terms,
            reason=reason,
        )

    def term_importances(self) -> dict[str, float]:
        """Global importance (mean |score|) per term, largest first."""
        self._check_fitted()
        imp = self.ebm_.term_importances()
        pairs = sorted(zip(self.ebm_.term_names_, imp), key=lambda p: -p[1])
        return {k: float(v) for k, v in pairs}

    # -- persistence -----------------------------------------------------------------------

    def save(self, path) -> None:
        self._check_fitted()
        stamp = make_stamp(
            MODEL_NAME,
            train_rows=self.train_rows_,
            train_span=self.train_span_,
            metrics={
                "target": self.target,
                "horizon_bins": self.horizon_bins,
                "train_mae": self.train_mae_,
                "fit_seconds": self.fit_seconds_,
            },
        )
        self.stamp = stamp
        save_model(self, stamp, path)

    @classmethod
    def load(cls, path) -> "ThroughputModel":
        obj, stamp = load_model(path, MODEL_NAME, cls)
        obj.stamp = stamp
        return obj


def _plain(v):
    if isinstance(v, (np.floating, float)):
        return None if np.isnan(v) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


# --------------------------------------------------------------------------------------------
# Causal forecasts for the simulator, baselines, evaluation
# --------------------------------------------------------------------------------------------


def naive_forecasts(bins: pd.DataFrame, target: str = "submit_gpu_job", horizon_bins: int = 6, bin_s: int = BIN_S):
    """The fallback used before a model can be fitted, per decision point t (bins < t only):
    seasonal-naive (mean of the `horizon_bins` bins exactly one day before the target window) when a
    day of history exists, else the mean of the last <= 6 bins, else 0 (no history at all)."""
    times, values = _regular(bins, bin_s, target)
    spec = _FeatureSpec(bin_s, horizon_bins, None, np.zeros(DAY_S // bin_s))
    X = spec.build(times, values).iloc[: len(values)]
    out = X["lag_1d"].to_numpy(copy=True)
    src = np.where(np.isfinite(out), "seasonal_naive", "rolling_mean").astype(object)
    roll = X["roll_mean_6"].to_numpy()
    out = np.where(np.isfinite(out), out, roll)
    src[~np.isfinite(out)] = "none"
    out = np.where(np.isfinite(out), out, 0.0)
    return pd.Series(out, index=pd.Index(times, name="time"), name=f"pred_{target}"), src


def rolling_forecasts(
    bins: pd.DataFrame,
    refit_every_bins: int = 1008,
    min_train_bins: int = 2016,
    return_source: bool = False,
    **model_kwargs,
):
    """Causal forecasts for every bin, as the simulator needs them.

    The value at bin time T is the forecast for [T, T + horizon) made by a model fitted only on
    bins strictly before T, refitted every `refit_every_bins` bins (default weekly) once
    `min_train_bins` bins of history exist; features use only bins before T.  Earlier bins get
    ``naive_forecasts`` (seasonal-naive, else rolling mean, else 0).  With return_source=True a
    DataFrame with columns ``forecast`` and ``source`` ('ebm@<refit time>', 'seasonal_naive',
    'rolling_mean', 'none') is returned instead of a Series.
    """
    target = model_kwargs.get("target", "submit_gpu_job")
    horizon = int(model_kwargs.get("horizon_bins", 6))
    bin_s = int(model_kwargs.get("bin_s", BIN_S))
    times, values = _regular(bins, bin_s, target)
    min_train = max(int(min_train_bins), 2 * (DAY_S // bin_s) + horizon)
    if refit_every_bins < 1:
        raise ModelError("refit_every_bins must be >= 1")
    origin = _origin_of(bins)
    full = pd.DataFrame({"time": times, target: values})
    full.attrs["origin"] = origin
    naive, src = naive_forecasts(full, target, horizon, bin_s)
    out = naive.to_numpy(copy=True)
    src = src.copy()
    for r in range(min_train, len(values), int(refit_every_bins)):
        train = full.iloc[:r].copy()
        train.attrs["origin"] = origin
        model = ThroughputModel(**model_kwargs).fit(train)
        stop = min(r + int(refit_every_bins), len(values))
        # features for bins r..stop-1 need the history before them; the model only saw bins < r.
        upto = full.iloc[:stop].copy()
        upto.attrs["origin"] = origin
        pred = model.predict_series(upto).to_numpy()
        out[r:stop] = pred[r:stop]
        src[r:stop] = f"ebm@{int(times[r])}"
    series = pd.Series(out, index=pd.Index(times, name="time"), name=f"pred_{target}")
    if return_source:
        return pd.DataFrame({"forecast": series, "source": src}, index=series.index)
    return series


def _holt_winters_forecasts(train: np.ndarray, full: np.ndarray, n_train: int, horizon: int, period: int):
    """Fit additive Holt-Winters (damped additive trend, additive daily seasonality) on `train`,
    then run its recursions over `full` with the fitted parameters; return for every decision point
    t >= n_train the mean of the 1..horizon-step forecasts made from bins < t."""
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    fit = ExponentialSmoothing(
        train,
        trend="add",
        damped_trend=True,
        seasonal="add",
        seasonal_periods=period,
        initialization_method="heuristic",
    ).fit(optimized=True, use_brute=False)
    p = fit.params
    a, b, g, phi = (float(p[k]) for k in ("smoothing_level", "smoothing_trend", "smoothing_seasonal", "damping_trend"))
    level, trend = float(p["initial_level"]), float(p["initial_trend"])
    season = list(np.asarray(p["initial_seasons"], dtype=float))  # season[i] for time i - period
    n = len(full)
    preds = np.full(n + 1, np.nan)
    damp_sums = np.cumsum([phi**k for k in range(1, horizon + 1)])
    for t in range(n + 1):
        if t >= n_train:
            # forecast for t..t+horizon-1 from state after t-1
            fc = [
                level + damp_sums[h - 1] * trend + season[t + h - 1 - period * ((h - 1) // period)]
                for h in range(1, horizon + 1)
            ]
            preds[t] = np.mean(fc)
        if t == n:
            break
        y = full[t]
        s_old = season[t]  # season[k] holds the seasonal state of time k - period
        new_level = a * (y - s_old) + (1 - a) * (level + phi * trend)
        new_trend = b * (new_level - level) + (1 - b) * phi * trend
        season.append(g * (y - level - phi * trend) + (1 - g) * s_old)
        level, trend = new_level, new_trend
    return preds, fit


def evaluate(
    bins: pd.DataFrame,
    split,
    target: str = "submit_gpu_job",
    horizon_bins: int = 6,
    artifact_pred: pd.Series | None = None,
    weekly_refit: bool = False,
    switch_threshold: float | None = 2.0,
    **model_kwargs,
) -> dict:
    """Chronological train/test evaluation of the EBM against baselines (MAE on the same points).

    split: bin time (int seconds since the origin), a timestamp (needs ``attrs["origin"]``) or a
    fraction in (0, 1).  Training uses the bins before the split (decision points whose whole
    target window lies before it); test decision points are all bins >= split with a complete
    window.  The EBM is fitted once; every test forecast uses only bins before its decision point.
    Baselines, each also causal: seasonal-naive (mean of the same `horizon_bins` bins one day
    earlier), Holt-Winters (statsmodels ExponentialSmoothing, damped additive trend, additive daily
    seasonality, fitted on the training bins, then filtered forward with those parameters) and the
    mean of the last hour.  weekly_refit: also score ``rolling_forecasts`` (refit every 1008 bins
    from the split on).  artifact_pred: optional per-bin predictions indexed by bin time (e.g. the
    artifact's ``pred_gpu_job``), averaged over each target window and scored on the test points it
    covers.  switch_threshold: also report how often each method takes the same packing on/off
    decision (forecast > threshold) as the actual demand would.
    """
    bin_s = int(model_kwargs.get("bin_s", BIN_S))
    times, values = _regular(bins, bin_s, target)
    origin = _origin_of(bins)
    if isinstance(split, float) and 0 < split < 1:
        split_s = int(times[0] + int(len(times) * split) * bin_s)
    elif isinstance(split, (pd.Timestamp, str, np.datetime64)) or hasattr(split, "year"):
        if origin is None:
            raise ModelError("a timestamp split needs bins with attrs['origin']")
        split_s = int((pd.Timestamp(split) - origin).total_seconds())
    else:
        split_s = int(split)
    n_train = int(np.searchsorted(times, split_s))
    if n_train < 2 * (DAY_S // bin_s) + horizon_bins or n_train >= len(times) - horizon_bins:
        raise ModelError("split leaves too little training or test data")
    full = pd.DataFrame({"time": times, target: values})
    full.attrs["origin"] = origin
    train = full.iloc[:n_train].copy()
    train.attrs["origin"] = origin
    model = ThroughputModel(target=target, horizon_bins=horizon_bins, **model_kwargs).fit(train)
    y = model.spec_.targets(values)[: len(values)]
    test = np.arange(n_train, len(values))
    test = test[np.isfinite(y[test])]
    preds = {"ebm": model.predict_series(full).to_numpy()}
    preds["seasonal_naive"] = naive_forecasts(full, target, horizon_bins, bin_s)[0].to_numpy()
    t_hw = _time.perf_counter()
    hw, _ = _holt_winters_forecasts(values[:n_train], values, n_train, horizon_bins, DAY_S // bin_s)
    hw_seconds = _time.perf_counter() - t_hw
    preds["holt_winters"] = np.maximum(hw[: len(values)], 0.0)
    preds["mean_of_last_hour"] = np.nan_to_num(
        pd.Series(values).shift(1).rolling(horizon_bins, min_periods=1).mean().to_numpy()
    )
    if weekly_refit:
        preds["ebm_weekly_refit"] = rolling_forecasts(
            full, refit_every_bins=WEEK_S // bin_s, min_train_bins=n_train,
            target=target, horizon_bins=horizon_bins, **model_kwargs,
        ).to_numpy()

    out: dict[str, Any] = {
        "target": target,
        "horizon_bins": horizon_bins,
        "train_bins": int(n_train),
        "test_points": int(len(test)),
        "split_time": int(times[n_train]),
        "test_mean_target": float(np.mean(y[test])),
        "fit_seconds_ebm": model.fit_seconds_,
        "fit_seconds_holt_winters": hw_seconds,
        "top_terms": list(model.term_importances())[:8],
    }
    for name, p in preds.items():
        out[f"mae_{name}"] = float(np.mean(np.abs(p[test] - y[test])))
    if switch_threshold is not None:
        actual_on = y[test] > switch_threshold
        out["switch_threshold"] = switch_threshold
        out["switch_on_share"] = float(np.mean(actual_on))
        for name, p in preds.items():
            out[f"switch_agree_{name}"] = float(np.mean((p[test] > switch_threshold) == actual_on))
    if artifact_pred is not None:
        ap = pd.Series(artifact_pred).reindex(times).to_numpy(dtype=float)
        win = pd.Series(ap).rolling(horizon_bins, min_periods=horizon_bins).mean().shift(-(horizon_bins - 1)).to_numpy()
        ok = test[np.isfinite(win[test])]
        out["artifact_points"] = int(len(ok))
        if len(ok):
            out["mae_artifact"] = float(np.mean(np.abs(win[ok] - y[ok])))
            out["mae_ebm_on_artifact_points"] = float(np.mean(np.abs(preds["ebm"][ok] - y[ok])))
            if switch_threshold is not None:
                agree = (win[ok] > switch_threshold) == (y[ok] > switch_threshold)
                out["switch_agree_artifact"] = float(np.mean(agree))
    return out
