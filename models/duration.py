"""Workload estimate model: predicts each job's duration at submit time (Lucid, ASPLOS'23, §workload estimate).

Lucid orders its queue by ``priority = predicted duration x gpu_num`` (ascending); this module supplies
the predicted duration. See docs/models-duration.md for the design and measured results.

* :class:`DurationModel` -- an InterpretML ``ExplainableBoostingRegressor`` with pairwise interactions
  (a GA2M) fitted on ``log1p(duration seconds)``; predictions are ``expm1`` of the model output, in
  seconds. Features are known at submit time only (user, vc, gpu_num, cpu_num, submit hour/weekday,
  job-name bucket, and history features of jobs that had already ended).
* **No-future rule.** A job J counts as *ended* before time t when
  ``J.submit_time + max(J.duration, 1) <= t`` (the trace's own end time; zero-length jobs count as
  lasting 1 s so a job can never see itself). History features and fallback means of a job submitted
  at t use only jobs ended before t; submission counts use only jobs submitted strictly before t.
* **Fallback** (no model, or a user with no ended job yet): mean duration of the jobs with the same
  gpu_num that ended before the submission, else the mean of all ended jobs, else a constant.
* :func:`rolling_estimates` -- what the simulator calls: weekly refits, each trained only on jobs that
  ended before the refit point, used for the jobs submitted until the next refit.
* :func:`evaluate` -- MAE and rank correlations against the true durations and against baselines.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from models.base import Contribution, Explanation, ModelError, load_model, make_stamp, portable_ebm, save_model
from models.names import NameBuckets, normalise_names

__all__ = [
    "DurationModel",
    "compute_features",
    "detect_missing_inputs",
    "fallback_estimates",
    "rolling_estimates",
    "evaluate",
    "load_artifact_estimates",
    "MODEL_NAME",
    "TARGET",
]

MODEL_NAME = "duration"
TARGET = "log1p(duration_s)"

DAY = 86_400
WEEK = 7 * DAY

#: nominal (categorical) features; everything else is continuous
NOMINAL = ("user", "vc", "weekday", "name_bucket")

#: every candidate feature, with the input column(s) it needs
FEATURE_INPUTS: dict[str, tuple[str, ...]] = {
    "user": ("user",),
    "vc": ("vc",),
    "gpu_num": (),
    "cpu_num": ("cpu_num",),
    "hour": (),
    "weekday": (),
    "name_bucket": ("name",),
    # history features, in seconds: "gmean" = expm1(mean of log1p(duration)), a geometric-style mean
    "user_recent_gmean_s": ("user",),  # of the user's last k ended jobs
    "user_recent_median_s": ("user",),  # median duration of the same jobs
    "user_last_s": ("user",),  # duration of the user's most recently ended job
    "user_gpu_recent_gmean_s": ("user",),  # of the user's last k ended jobs with the same gpu_num
    "user_prior_jobs": ("user",),  # number of the user's jobs submitted before this one
    "user_since_prev_s": ("user",),  # seconds since the user's previous submission
    "name_recent_gmean_s": ("name",),  # of the last k ended jobs with the same normalised name (same user if known)
    "vc_gpu_recent_gmean_s": ("vc",),  # of the last k ended jobs in the same vc with the same gpu_num
}

#: auxiliary columns of compute_features (not model inputs)
AUX = ("user_n_ended", "gpu_n_ended", "gpu_mean_s", "all_n_ended", "all_mean_s", "name_norm")

OPTIONAL_INPUTS = ("user", "vc", "cpu_num", "name")


# ------------------------------------------------------------------------------------------------
# input handling
# ------------------------------------------------------------------------------------------------
def _canonical(df: pd.DataFrame, need_duration: bool = False, id_prefix: str = "row") -> pd.DataFrame:
    """Copy of the columns we use with canonical dtypes; absent optional columns are filled empty."""
    for col in ("gpu_num", "submit_time"):
        if col not in df.columns:
            raise ModelError(f"job table has no '{col}' column (have: {', '.join(map(str, df.columns))})")
    if need_duration and "duration" not in df.columns:
        raise ModelError("job table has no 'duration' column; cannot fit a duration model")
    n = len(df)
    out = pd.DataFrame(index=df.index)
    out["job_id"] = df["job_id"].astype(str).to_numpy(object) if "job_id" in df.columns else np.array(
        [f"\x00{id_prefix}{i}" for i in range(n)], dtype=object
    )
    for col in ("user", "vc", "name"):
        if col in df.columns:
            s = df[col]
            vals = s.astype(object).where(s.notna(), "").astype(str).to_numpy(object)
            out[col] = vals
        else:
            out[col] = np.full(n, "", dtype=object)
    if "name_norm" in df.columns:  # normalised already (the daemon's history, once per read of it)
        s = df["name_norm"]
        out["name_norm"] = s.astype(object).where(s.notna(), "").astype(str).to_numpy(object)
    out["gpu_num"] = pd.to_numeric(df["gpu_num"], errors="coerce").fillna(0).astype(np.int64).to_numpy()
    if "cpu_num" in df.columns:
        out["cpu_num"] = pd.to_numeric(df["cpu_num"], errors="coerce").fillna(0).astype(np.int64).to_numpy()
    else:
        out["cpu_num"] = np.zeros(n, dtype=np.int64)
    st = pd.to_numeric(df["submit_time"], errors="coerce")
    if st.isna().any():
        raise ModelError(f"{int(st.isna().sum())} job(s) have no submit_time")
    out["submit_time"] = st.astype(np.int64).to_numpy()
    if "duration" in df.columns:
        out["duration"] = pd.to_numeric(df["duration"], errors="coerce").astype(float).to_numpy()
    else:
        out["duration"] = np.full(n, np.nan)
    if need_duration and np.isnan(out["duration"].to_numpy()).any():
        raise ModelError("some training jobs have no duration")
    return out


def detect_missing_inputs(jobs_df: pd.DataFrame) -> list[str]:
    """Optional inputs that are absent or empty for every row: 'user', 'vc', 'name', 'cpu_num'."""
    missing = []
    for col in OPTIONAL_INPUTS:
        if col not in jobs_df.columns:
            missing.append(col)
            continue
        s = jobs_df[col]
        if col == "cpu_num":
            if not (pd.to_numeric(s, errors="coerce").fillna(0) > 0).any():
                missing.append(col)
        elif not (s.notna() & (s.astype(object).astype(str).str.strip() != "")).any():
            missing.append(col)
    return missing


def _ended_end(df: pd.DataFrame) -> np.ndarray:
    """End time used by the no-future rule (zero-length jobs last 1 s, so a job never sees itself)."""
    return df["submit_time"].to_numpy(np.int64) + np.maximum(np.ceil(df["duration"].to_numpy(float)), 1).astype(
        np.int64
    )


class _Lookup:
    """Per-key "what had happened before time t" queries, vectorised with one searchsorted.

    Reference events (key, time, value) are sorted by (key, time); a query (key, t) sees the events of
    its key with time <= t (``strict=False``) or time < t (``strict=True``).
    """

    def __init__(self, ref_keys: np.ndarray, ref_times: np.ndarray, ref_vals: np.ndarray, query_keys, query_times):
        ref_keys = np.asarray(ref_keys, dtype=object)
        query_keys = np.asarray(query_keys, dtype=object)
        codes, _ = pd.factorize(np.concatenate([ref_keys, query_keys]), use_na_sentinel=False)
        codes = codes.astype(np.int64)
        self.rc, self.qc = codes[: len(ref_keys)], codes[len(ref_keys) :]
        rt = np.asarray(ref_times, dtype=np.int64)
        qt = np.asarray(query_times, dtype=np.int64)
        tmin = min(rt.min() if len(rt) else 0, qt.min() if len(qt) else 0)
        tmax = max(rt.max() if len(rt) else 0, qt.max() if len(qt) else 0)
        self.span = int(tmax - tmin) + 2
        self.tmin = int(tmin)
        comp = self.rc * self.span + (rt - self.tmin)
        self.order = np.argsort(comp, kind="stable")
        self.comp = comp[self.order]
        self.vals = np.asarray(ref_vals, dtype=float)[self.order]
        self.times = rt[self.order]
        self.qt = qt

    def bounds(self, strict: bool) -> tuple[np.ndarray, np.ndarray]:
        base = self.qc * self.span
        lo = np.searchsorted(self.comp, base, side="left")
        hi = np.searchsorted(self.comp, base + (self.qt - self.tmin), side="left" if strict else "right")
        return lo, hi

    def stats(self, lo, hi, k: int | None):
        """count, mean over the last k (all if None), median over the last k, last value."""
        n = hi - lo
        cs = np.concatenate([[0.0], np.cumsum(self.vals)])
        start = lo if k is None else np.maximum(lo, hi - k)
        m = hi - start
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(m > 0, (cs[hi] - cs[start]) / np.maximum(m, 1), np.nan)
        last = np.where(n > 0, self.vals[np.maximum(hi - 1, 0)] if len(self.vals) else np.nan, np.nan)
        median = None
        if k is not None:
            idx = hi[:, None] - 1 - np.arange(k)[None, :]
            valid = idx >= lo[:, None]
            gathered = self.vals[np.clip(idx, 0, max(len(self.vals) - 1, 0))] if len(self.vals) else np.zeros(idx.shape)
            gathered = np.where(valid, gathered, np.nan)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                median = np.nanmedian(gathered, axis=1) if k > 0 else np.full(len(lo), np.nan)
        return n, mean, median, last


def _calendar(submit: np.ndarray, origin) -> tuple[np.ndarray, np.ndarray]:
    if origin is None:
        hour = (submit // 3600) % 24
        weekday = (submit // DAY) % 7
        return hour.astype(np.int64), weekday.astype(np.int64)
    ts = pd.Timestamp(origin) + pd.to_timedelta(submit, unit="s")
    idx = pd.DatetimeIndex(ts)
    return idx.hour.to_numpy(np.int64), idx.day_of_week.to_numpy(np.int64)


def compute_features(
    jobs_df: pd.DataFrame,
    history_df: pd.DataFrame | None = None,
    origin: pd.Timestamp | None = None,
    k: int = 10,
) -> pd.DataFrame:
    """All candidate features (except ``name_bucket``, which needs a fitted NameBuckets) plus AUX columns.

    ``history_df``: jobs whose durations are known; only those that ended before a job's submission
    (see module docstring) feed its history features. None -> ``jobs_df``'s own rows with a duration.
    Submission-based features (prior jobs, time since previous submission) use the union of both tables.
    Index: that of ``jobs_df``.
    """
    q = _canonical(jobs_df, id_prefix="q")
    h = q if history_df is None else _canonical(history_df, id_prefix="h")
    h_ended = h[~np.isnan(h["duration"].to_numpy(float))]
    end = _ended_end(h_ended) if len(h_ended) else np.empty(0, dtype=np.int64)
    logd = np.log1p(np.maximum(h_ended["duration"].to_numpy(float), 0.0))
    dur = np.maximum(h_ended["duration"].to_numpy(float), 0.0)
    t = q["submit_time"].to_numpy(np.int64)
    out = pd.DataFrame(index=jobs_df.index)
    hour, weekday = _calendar(t, origin)
    out["user"] = np.where(q["user"].to_numpy(object) == "", None, q["user"].to_numpy(object))
    out["vc"] = np.where(q["vc"].to_numpy(object) == "", None, q["vc"].to_numpy(object))
    out["gpu_num"] = q["gpu_num"].to_numpy(np.int64)
    out["cpu_num"] = np.where(q["cpu_num"].to_numpy() > 0, q["cpu_num"].to_numpy(), np.nan)
    out["hour"] = hour
    out["weekday"] = weekday.astype(str)

    uq = q["user"].to_numpy(object)
    uh = h_ended["user"].to_numpy(object)
    known_user = uq != ""

    # user history (ended jobs)
    lk = _Lookup(uh, end, logd, uq, t)
    n, mean, median, last = lk.stats(*lk.bounds(strict=False), k)
    out["user_recent_gmean_s"] = np.where(known_user, np.expm1(mean), np.nan)
    out["user_recent_median_s"] = np.where(known_user, np.expm1(median), np.nan)
    out["user_last_s"] = np.where(known_user, np.expm1(last), np.nan)
    out["user_n_ended"] = np.where(known_user, n, 0)

    def pair(a, b):
        return np.array([f"{x}\x1f{y}" for x, y in zip(a, b)], dtype=object)

    lk = _Lookup(pair(uh, h_ended["gpu_num"].to_numpy()), end, logd, pair(uq, q["gpu_num"].to_numpy()), t)
    _, mean, _, _ = lk.stats(*lk.bounds(strict=False), k)
    out["user_gpu_recent_gmean_s"] = np.where(known_user, np.expm1(mean), np.nan)

    # user submissions (union of history and the jobs themselves, by job_id)
    subs = pd.concat([h[["job_id", "user", "submit_time"]], q[["job_id", "user", "submit_time"]]])
    subs = subs.drop_duplicates("job_id", keep="first")
    st = subs["submit_time"].to_numpy(np.int64)
    lk = _Lookup(subs["user"].to_numpy(object), st, st.astype(float), uq, t)
    n, _, _, last = lk.stats(*lk.bounds(strict=True), None)
    out["user_prior_jobs"] = np.where(known_user, n, np.nan)
    out["user_since_prev_s"] = np.where(known_user & (n > 0), t - last, np.nan)

    # same normalised name (within the user when users are known)
    nq = q["name_norm"].to_numpy(object) if "name_norm" in q.columns else normalise_names(q["name"].to_numpy(object))
    nh = (h_ended["name_norm"].to_numpy(object) if "name_norm" in h_ended.columns
          else normalise_names(h_ended["name"].to_numpy(object)))
    lk = _Lookup(pair(uh, nh), end, logd, pair(uq, nq), t)
    _, mean, _, _ = lk.stats(*lk.bounds(strict=False), k)
    out["name_recent_gmean_s"] = np.where(nq != "", np.expm1(mean), np.nan)
    out["name_norm"] = nq

    # same vc and gpu_num
    vq = q["vc"].to_numpy(object)
    lk = _Lookup(pair(h_ended["vc"].to_numpy(object), h_ended["gpu_num"].to_numpy()), end, logd,
                 pair(vq, q["gpu_num"].to_numpy()), t)
    _, mean, _, _ = lk.stats(*lk.bounds(strict=False), k)
    out["vc_gpu_recent_gmean_s"] = np.where(vq != "", np.expm1(mean), np.nan)

    # fallback statistics: mean duration (seconds) of every job ended before the submission
    lk = _Lookup(h_ended["gpu_num"].to_numpy(), end, dur, q["gpu_num"].to_numpy(), t)
    n, mean, _, _ = lk.stats(*lk.bounds(strict=False), None)
    out["gpu_n_ended"], out["gpu_mean_s"] = n, mean
    lk = _Lookup(np.zeros(len(h_ended), dtype=np.int64), end, dur, np.zeros(len(q), dtype=np.int64), t)
    n, mean, _, _ = lk.stats(*lk.bounds(strict=False), None)
    out["all_n_ended"], out["all_mean_s"] = n, mean
    return out


def _fallback_from_features(feats: pd.DataFrame, default_s: float) -> tuple[np.ndarray, np.ndarray]:
    gpu_mean = feats["gpu_mean_s"].to_numpy(float)
    all_mean = feats["all_mean_s"].to_numpy(float)
    has_gpu = feats["gpu_n_ended"].to_numpy() > 0
    has_all = feats["all_n_ended"].to_numpy() > 0
    est = np.where(has_gpu, gpu_mean, np.where(has_all, all_mean, default_s))
    src = np.where(has_gpu, "fallback:same_gpu_mean", np.where(has_all, "fallback:overall_mean", "fallback:constant"))
    return est.astype(float), src.astype(object)


def fallback_estimates(
    jobs_df: pd.DataFrame, history_df: pd.DataFrame | None = None, default_s: float = 3600.0
) -> pd.DataFrame:
    """The fallback rule alone for every job (columns ``estimate``, ``source``); index of ``jobs_df``."""
    feats = compute_features(jobs_df, history_df, None)
    est, src = _fallback_from_features(feats, default_s)
    return pd.DataFrame({"estimate": est, "source": src}, index=jobs_df.index)


# ------------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------------
class DurationModel:
    """GA2M (EBM with pairwise interactions) on log1p(duration); see module docstring.

    Fitted attributes: ``features_`` (used), ``missing_inputs_`` (absent inputs), ``dropped_features_``
    (features dropped because their input is missing), ``ebm_``, ``name_buckets_`` (or None),
    ``train_rows_``, ``train_span_``, ``fit_seconds_``.
    """

    def __init__(
        self,
        interactions: int = 8,
        random_state: int = 0,
        history_k: int = 10,
        outer_bags: int = 1,
        max_rounds: int = 500,
        learning_rate: float = 0.05,
        early_stopping_rounds: int = 50,
        smoothing_rounds: int = 100,
        max_bins: int = 128,
        max_interaction_bins: int = 32,
        n_jobs: int = 2,
        name_max_clustered: int = 500,
        default_estimate_s: float = 3600.0,
        min_estimate_s: float = 1.0,
        no_pair_features: tuple[str, ...] = ("hour", "weekday", "user"),
        min_samples_leaf: int = 4,
    ):
        self.interactions = interactions
        self.random_state = random_state
        self.history_k = history_k
        self.outer_bags = outer_bags
        self.max_rounds = max_rounds
        self.learning_rate = learning_rate
        self.early_stopping_rounds = early_stopping_rounds
        self.smoothing_rounds = smoothing_rounds
        self.max_bins = max_bins
        self.max_interaction_bins = max_interaction_bins
        self.n_jobs = n_jobs
        self.name_max_clustered = name_max_clustered
        self.default_estimate_s = default_estimate_s
        self.min_estimate_s = min_estimate_s
        self.no_pair_features = tuple(no_pair_features)
        self.min_samples_leaf = min_samples_leaf

    def get_params(self) -> dict:
        import inspect

        return {k: getattr(self, k) for k in inspect.signature(type(self).__init__).parameters if k != "self"}

    # -- fitting ----------------------------------------------------------------------------------
    def fit(
        self, jobs_df: pd.DataFrame, origin: pd.Timestamp | None = None, history_df: pd.DataFrame | None = None
    ) -> "DurationModel":
        """Fit on every row of ``jobs_df`` (all must have ended: the caller picks the training set).

        History features of each training row come from ``history_df`` (default: ``jobs_df`` itself),
        restricted to jobs ended before that row's submission.
        """
        if len(jobs_df) == 0:
            raise ModelError("cannot fit the duration model on an empty job table")
        _canonical(jobs_df, need_duration=True)
        feats = compute_features(jobs_df, history_df if history_df is not None else jobs_df, origin, self.history_k)
        return self._fit_features(jobs_df, feats, detect_missing_inputs(jobs_df), origin)

    def _fit_features(
        self, jobs_df: pd.DataFrame, feats: pd.DataFrame, missing: list[str], origin=None
    ) -> "DurationModel":
        from interpret.glassbox import ExplainableBoostingRegressor

        portable_ebm()
        t0 = time.perf_counter()
        y = np.log1p(np.maximum(pd.to_numeric(jobs_df["duration"]).to_numpy(float), 0.0))
        self.origin_ = None if origin is None else pd.Timestamp(origin)
        self.missing_inputs_ = sorted(missing)
        self.features_ = [f for f, need in FEATURE_INPUTS.items() if not set(need) & set(missing)]
        self.dropped_features_ = [f for f in FEATURE_INPUTS if f not in self.features_]
        if "name_bucket" in self.features_:
            self.name_buckets_ = NameBuckets(max_names=self.name_max_clustered, random_state=self.random_state)
            self.name_buckets_.fit(jobs_df["name"].tolist())
        else:
            self.name_buckets_ = None
        X = self._design(feats)
        if len(X) < 10:
            raise ModelError(f"need at least 10 finished jobs to fit the duration model, got {len(X)}")
        excl = [
            (a, b)
            for i, a in enumerate(self.features_)
            for b in self.features_[i + 1 :]
            if a in self.no_pair_features or b in self.no_pair_features
        ]
        self.ebm_ = ExplainableBoostingRegressor(
            feature_names=self.features_,
            exclude=excl or None,
            min_samples_leaf=self.min_samples_leaf,
            feature_types=["nominal" if f in NOMINAL else "continuous" for f in self.features_],
            interactions=self.interactions,
            outer_bags=self.outer_bags,
            max_rounds=self.max_rounds,
            learning_rate=self.learning_rate,
            early_stopping_rounds=self.early_stopping_rounds,
            smoothing_rounds=self.smoothing_rounds,
            interaction_smoothing_rounds=min(100, self.smoothing_rounds),
            max_bins=self.max_bins,
            max_interaction_bins=self.max_interaction_bins,
            # EBM parallelises over outer bags only; more workers than bags just spawn idle processes
            n_jobs=max(1, min(self.n_jobs, self.outer_bags)),
            random_state=self.random_state,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.ebm_.fit(X, y)
        st = pd.to_numeric(jobs_df["submit_time"]).to_numpy(np.int64)
        self.train_rows_ = int(len(X))
        self.train_span_ = (int(st.min()), int(st.max()))
        pred = self.ebm_.predict(X)
        self.train_metrics_ = {
            "train_mae_log1p": float(np.mean(np.abs(pred - y))),
            "train_rmse_log1p": float(np.sqrt(np.mean((pred - y) ** 2))),
        }
        self.fit_seconds_ = time.perf_counter() - t0
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "ebm_"):
            raise ModelError("duration model is not fitted; call fit() or load() first")

    def _design(self, feats: pd.DataFrame) -> pd.DataFrame:
        cols = {}
        for f in self.features_:
            if f == "name_bucket":
                b = self.name_buckets_.transform(feats["name_norm"].tolist())
                cols[f] = np.where(b >= 0, b.astype(str), None).astype(object)
            elif f in NOMINAL:
                cols[f] = feats[f].astype(object).to_numpy(object)
            else:
                cols[f] = feats[f].to_numpy(float)
        return pd.DataFrame(cols, index=feats.index)

    # -- prediction -------------------------------------------------------------------------------
    def _origin(self, origin):
        """The origin to use: the one passed, else the one the model was fitted with."""
        return origin if origin is not None else getattr(self, "origin_", None)

    def _uses_user_history(self) -> bool:
        return "user" not in self.missing_inputs_

    def _predict_features(self, feats: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        X = self._design(feats)
        est = np.expm1(self.ebm_.predict(X)) if len(X) else np.empty(0)
        est = np.maximum(est, self.min_estimate_s)
        src = np.full(len(X), "ebm", dtype=object)
        if self._uses_user_history():
            new_user = feats["user_n_ended"].to_numpy() == 0
            if new_user.any():
                fb, fsrc = _fallback_from_features(feats[new_user], self.default_estimate_s)
                est[new_user] = fb
                src[new_user] = fsrc
        return est, src

    def predict_detailed(
        self, jobs_df: pd.DataFrame, history_df: pd.DataFrame | None = None, origin: pd.Timestamp | None = None
    ) -> pd.DataFrame:
        """Estimates (seconds) and their source ("ebm" / "fallback:<rule>"), index of ``jobs_df``."""
        self._check_fitted()
        feats = compute_features(jobs_df, history_df, self._origin(origin), self.history_k)
        est, src = self._predict_features(feats)
        return pd.DataFrame({"estimate": est, "source": src}, index=jobs_df.index)

    def predict(
        self, jobs_df: pd.DataFrame, history_df: pd.DataFrame | None = None, origin: pd.Timestamp | None = None
    ) -> np.ndarray:
        """Predicted duration in seconds per row of ``jobs_df``.

        ``history_df``: jobs whose durations are known (finished jobs); for each job only those that
        ended before its submission are used. None -> ``jobs_df``'s own rows with a duration.
        """
        return self.predict_detailed(jobs_df, history_df, origin)["estimate"].to_numpy(float)

    # -- explanation ------------------------------------------------------------------------------
    def explain(
        self,
        job_row: pd.Series | pd.DataFrame | dict,
        history_df: pd.DataFrame | None = None,
        origin: pd.Timestamp | None = None,
    ) -> Explanation:
        """Why this job got its estimate, as data.

        kind="ebm": ``intercept`` and ``terms`` are in log1p(seconds) space, additive:
        ``prediction = expm1(intercept + sum(t.contribution))`` seconds (floored at min_estimate_s);
        ``terms`` sorted by |contribution|, largest first. kind="fallback": ``reason`` says which rule.
        """
        self._check_fitted()
        if isinstance(job_row, pd.DataFrame):
            if len(job_row) != 1:
                raise ModelError(f"explain() takes one job, got {len(job_row)} rows")
            row_df = job_row
        elif isinstance(job_row, pd.Series):
            row_df = job_row.to_frame().T
        else:
            row_df = pd.DataFrame([dict(job_row)])
        row_df = row_df.infer_objects()
        feats = compute_features(row_df, history_df, self._origin(origin), self.history_k)
        return self.explain_features(feats)

    def term_importances(self) -> dict[str, float]:
        """Global importance per term (mean |contribution| over the training jobs, log1p seconds),
        largest first: what the model looks at, as InterpretML's global explanation gives it."""
        self._check_fitted()
        pairs = sorted(zip(self.ebm_.term_names_, self.ebm_.term_importances()), key=lambda p: (-p[1], p[0]))
        return {str(k): float(v) for k, v in pairs}

    def shape_functions(self) -> dict:
        """What the model has learnt, term by term, as data (InterpretML's global explanation): for
        each term, its contribution to log1p(seconds) over the values of its input(s).

        ``{"model", "unit", "intercept", "terms": [...]}``, terms by importance, largest first. A
        term has ``term``, ``features``, ``importance`` and ``axes`` (one per input: ``feature``,
        ``type`` "continuous" with ``values`` the n+1 bin edges, or "nominal" with ``values`` the n
        category labels). A single input's term has ``scores`` (n), ``lower`` and ``upper`` (the
        spread over the outer bags), ``missing`` (the contribution when the job has no value) and
        ``density`` (how many training jobs: ``edges`` and ``counts`` for a continuous input,
        ``counts`` per category for a nominal one); a pair's has ``scores``
        as a list of rows (first input by second) and no bounds. Plain lists and floats, so it goes
        to JSON as it is; models/plots.py draws it."""
        self._check_fitted()
        g = self.ebm_.explain_global()
        importance = dict(zip(self.ebm_.term_names_, self.ebm_.term_importances()))
        terms = []
        for i, (name, feat_idx) in enumerate(zip(self.ebm_.term_names_, self.ebm_.term_features_)):
            d = g.data(i)
            features = [self.features_[j] for j in feat_idx]
            term = {"term": str(name), "features": features, "importance": float(importance[name])}
            if len(features) == 1:
                term["axes"] = [self._shape_axis(features[0], d["names"])]
                term["scores"] = _floats(d["scores"])
                term["lower"] = _floats(d.get("lower_bounds"))
                term["upper"] = _floats(d.get("upper_bounds"))
                # a job without the value (no earlier job of its user or name): EBM's bin 0, which the
                # global explanation leaves out; for a history feature it often matters as much as any bin
                term["missing"] = float(self.ebm_.term_scores_[i][0])
                dens = d.get("density") or {}
                term["density"] = ({"counts": _floats(dens.get("scores"))} if features[0] in NOMINAL else
                                   {"edges": _floats(dens.get("names")), "counts": _floats(dens.get("scores"))})
            else:
                term["axes"] = [self._shape_axis(f, d[k]) for f, k in zip(features, ("left_names", "right_names"))]
                term["scores"] = [_floats(row) for row in np.asarray(d["scores"], dtype=float)]
            terms.append(term)
        terms.sort(key=lambda t: (-t["importance"], t["term"]))
        return {"model": MODEL_NAME, "unit": TARGET, "intercept": float(self.ebm_.intercept_), "terms": terms}

    def _shape_axis(self, feature: str, names) -> dict:
        if feature in NOMINAL:
            values = [str(self._display_value(feature, int(v))) if feature == "name_bucket" and str(v).isdigit()
                      else str(v) for v in names]
            return {"feature": feature, "type": "nominal", "values": values}
        return {"feature": feature, "type": "continuous", "values": _floats(names)}

    def explain_features(self, feats: pd.DataFrame) -> Explanation:
        """``explain`` for one job whose model inputs were already computed (``compute_features``
        at its submission), e.g. saved next to a simulation; no job history needed."""
        self._check_fitted()
        est, src = self._predict_features(feats)
        f = feats.iloc[0]
        if src[0] != "ebm":
            return Explanation(
                model=MODEL_NAME, kind="fallback", prediction=float(est[0]), reason=self._fallback_reason(f, src[0])
            )
        X = self._design(feats)
        scores = self.ebm_.eval_terms(X)[0]
        xrow = X.iloc[0]
        terms = []
        for name, feat_idx, contrib in zip(self.ebm_.term_names_, self.ebm_.term_features_, scores):
            vals = {self.features_[i]: self._display_value(self.features_[i], xrow.iloc[i]) for i in feat_idx}
            value = next(iter(vals.values())) if len(vals) == 1 else vals
            terms.append(Contribution(term=name, value=value, contribution=float(contrib)))
        terms.sort(key=lambda c: (-abs(c.contribution), c.term))
        return Explanation(
            model=MODEL_NAME,
            kind="ebm",
            prediction=float(est[0]),
            intercept=float(self.ebm_.intercept_),
            terms=terms,
            reason=f"additive in {TARGET}: prediction = expm1(intercept + sum of contributions) seconds",
        )

    def _display_value(self, feature: str, v: Any) -> Any:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return None
        if feature == "name_bucket":
            return f"{v}:{self.name_buckets_.exemplar(int(v))}"
        if isinstance(v, (np.floating, float)):
            fv = float(v)
            return int(fv) if fv.is_integer() else fv
        if isinstance(v, np.integer):
            return int(v)
        return v

    def _fallback_reason(self, f: pd.Series, src: str) -> str:
        who = f"user '{f['user']}'" if f["user"] is not None else "unknown user"
        why = f"{who} has no job that ended before this submission"
        if src == "fallback:same_gpu_mean":
            rule = f"mean duration of the {int(f['gpu_n_ended'])} previously-ended {int(f['gpu_num'])}-GPU jobs"
        elif src == "fallback:overall_mean":
            rule = (f"no {int(f['gpu_num'])}-GPU job has ended yet; mean duration of all "
                    f"{int(f['all_n_ended'])} previously-ended jobs")
        else:
            rule = f"no job has ended yet; constant default_estimate_s={self.default_estimate_s:g}"
        return f"{src}: {why}; estimate = {rule}"

    # -- persistence ------------------------------------------------------------------------------
    def save(self, path) -> None:
        self._check_fitted()
        stamp = make_stamp(MODEL_NAME, self.train_rows_, self.train_span_, self.train_metrics_)
        save_model(self, stamp, path)

    @classmethod
    def load(cls, path) -> "DurationModel":
        obj, stamp = load_model(path, MODEL_NAME, cls)
        obj.stamp_ = stamp
        return obj


# ------------------------------------------------------------------------------------------------
# rolling refits (what the simulator calls)
# ------------------------------------------------------------------------------------------------
@dataclass
class RefitRecord:
    version: int
    refit_time: int
    train_rows: int
    jobs_predicted: int
    fit_seconds: float
    skipped: str = ""
    dropped_features: list = field(default_factory=list)


def rolling_estimates(
    jobs_df: pd.DataFrame,
    origin: pd.Timestamp | None = None,
    refit_every_s: int = WEEK,
    window_s: int | None = None,
    min_train_jobs: int = 200,
    model_params: dict | None = None,
    return_models: bool = False,
):
    """Duration estimate of every job with no training on the future.

    Refit points are ``t0 + i*refit_every_s`` (i >= 1, t0 = first submit_time). The model refitted at
    R is trained on the jobs that ended by R (``submit + max(duration,1) <= R``; with ``window_s``,
    only those submitted at or after ``R - window_s``) and predicts the jobs submitted in
    ``[R, next refit)``. History features of every job use only jobs ended before its own submission.
    Before the first refit (or while fewer than ``min_train_jobs`` jobs have ended) the fallback rule
    is used; a user with no ended job always gets the fallback.

    Returns a DataFrame indexed like ``jobs_df``: ``estimate`` (s), ``source`` ("ebm" or
    "fallback:<rule>"), ``model_version`` (0 = no model, i = the i-th refit). ``.attrs["refits"]`` lists
    each refit (RefitRecord as dict) and ``.attrs["fit_seconds"]`` their total. With
    ``return_models=True`` returns ``(frame, {version: DurationModel})``.
    """
    params = dict(model_params or {})
    proto = DurationModel(**params)
    q = _canonical(jobs_df, need_duration=True)
    feats = compute_features(jobs_df, jobs_df, origin, proto.history_k)
    missing = detect_missing_inputs(jobs_df)
    t = q["submit_time"].to_numpy(np.int64)
    end = _ended_end(q)
    n = len(q)
    est, src = _fallback_from_features(feats, proto.default_estimate_s)
    version = np.zeros(n, dtype=np.int64)
    records: list[RefitRecord] = []
    models: dict[int, DurationModel] = {}
    if n:
        t0, tlast = int(t.min()), int(t.max())
        # A refit at the start of every period that has submissions (period k: [t0 + k x every,
        # t0 + (k+1) x every), k >= 1; its version is k). A period without any has nothing to
        # predict, and the next one's fit is trained on everything ended before it anyway; one
        # stray submit time in milliseconds asked for 165 million of them (an admin trial: a hang).
        periods = np.unique((t - t0) // refit_every_s)
        points = [t0 + int(k) * refit_every_s for k in periods if k >= 1]
        model = None
        mversion = 0
        order = np.argsort(t, kind="stable")
        for R in points:
            i = (R - t0) // refit_every_s - 1
            nxt = min(R + refit_every_s, tlast + 1)
            train = end <= R
            if window_s is not None:
                train &= t >= R - window_s
            target = (t >= R) & (t < nxt)
            ntrain = int(train.sum())
            if ntrain >= min_train_jobs:
                tr_idx = order[train[order]]  # training rows in submission order (deterministic)
                m = DurationModel(**params)
                m._fit_features(jobs_df.iloc[tr_idx], feats.iloc[tr_idx], missing, origin)
                mversion = i + 1
                model = m
                models[mversion] = m
                records.append(RefitRecord(mversion, int(R), ntrain, int(target.sum()), m.fit_seconds_,
                                           dropped_features=list(m.dropped_features_)))
            else:
                records.append(RefitRecord(i + 1, int(R), ntrain, int(target.sum()), 0.0,
                                           skipped=f"only {ntrain} ended jobs < min_train_jobs={min_train_jobs}"))
            if model is not None and target.any():
                e, s = model._predict_features(feats[target])
                est[target], src[target], version[target] = e, s, mversion
    out = pd.DataFrame({"estimate": est, "source": src, "model_version": version}, index=jobs_df.index)
    out.attrs["refits"] = [r.__dict__.copy() for r in records]
    out.attrs["fit_seconds"] = float(sum(r.fit_seconds for r in records))
    out.attrs["missing_inputs"] = list(missing)
    return (out, models) if return_models else out


# ------------------------------------------------------------------------------------------------
# evaluation
# ------------------------------------------------------------------------------------------------
def load_artifact_estimates(path) -> pd.Series:
    """A Lucid-artifact estimate CSV (``job_id,priority``) as a Series of seconds indexed by job_id (str).

    Duplicate job_ids keep the first row. Values are returned as-is (the artifact's EBM file has
    negative estimates; the artifact's CombinedEstimator clamps those to 1000 s when it uses them).
    """
    df = pd.read_csv(path)
    if not {"job_id", "priority"} <= set(df.columns):
        raise ModelError(f"{path}: expected columns job_id,priority")
    df = df.drop_duplicates("job_id", keep="first")
    return pd.Series(df["priority"].to_numpy(float), index=df["job_id"].astype(str).to_numpy(), name="estimate")


def _align(series: pd.Series, jobs_df: pd.DataFrame) -> np.ndarray:
    if series.index.equals(jobs_df.index):
        return series.to_numpy(float)
    ids = jobs_df["job_id"].astype(str) if "job_id" in jobs_df.columns else None
    if ids is None:
        return series.reindex(jobs_df.index).to_numpy(float)
    s = series.copy()
    s.index = s.index.astype(str)
    s = s[~s.index.duplicated(keep="first")]
    return s.reindex(ids.to_numpy()).to_numpy(float)


def _metrics(est: np.ndarray, true: np.ndarray, gpus: np.ndarray) -> dict:
    from scipy.stats import kendalltau, spearmanr

    ok = ~np.isnan(est) & ~np.isnan(true)
    e, y, g = est[ok], true[ok], gpus[ok]
    if len(e) < 2:
        return {"n": int(len(e))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant inputs -> nan correlation
        return _metrics_inner(e, y, g, spearmanr, kendalltau)


def _metrics_inner(e, y, g, spearmanr, kendalltau) -> dict:
    return {
        "n": int(len(e)),
        "mae_s": float(np.mean(np.abs(e - y))),
        "median_ae_s": float(np.median(np.abs(e - y))),
        "mae_log1p": float(np.mean(np.abs(np.log1p(np.maximum(e, 0)) - np.log1p(y)))),
        "spearman": float(spearmanr(e, y).statistic),
        "kendall": float(kendalltau(e, y).statistic),
        "priority_spearman": float(spearmanr(e * g, y * g).statistic),
        "priority_kendall": float(kendalltau(e * g, y * g).statistic),
    }


def evaluate(
    estimates_df: pd.DataFrame,
    jobs_df: pd.DataFrame,
    baselines: dict[str, pd.Series] | None = None,
    mask: np.ndarray | pd.Series | None = None,
) -> dict:
    """MAE (s) and Spearman/Kendall rank correlation vs the true duration, for ours and each baseline.

    ``priority_*`` correlate estimate x gpu_num with duration x gpu_num (the queue order).
    Baselines: Series indexed like ``jobs_df`` or by job_id. ``mask`` restricts the rows (e.g. jobs after
    the first refit). Returns ``{"ours": {...}, "ours_by_source": {...}, "<baseline>": {...}}``.
    """
    true = pd.to_numeric(jobs_df["duration"]).to_numpy(float)
    gpus = pd.to_numeric(jobs_df["gpu_num"]).to_numpy(float)
    sel = np.ones(len(jobs_df), dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    ours = estimates_df["estimate"].reindex(jobs_df.index).to_numpy(float)
    res: dict[str, Any] = {"ours": _metrics(ours[sel], true[sel], gpus[sel])}
    if "source" in estimates_df.columns:
        srcs = estimates_df["source"].reindex(jobs_df.index).to_numpy(object)
        res["ours_by_source"] = {
            s: _metrics(ours[sel & (srcs == s)], true[sel & (srcs == s)], gpus[sel & (srcs == s)])
            for s in sorted(set(srcs[sel]))
        }
    for name, series in (baselines or {}).items():
        b = _align(series, jobs_df)
        res[name] = _metrics(b[sel], true[sel], gpus[sel])
        res[name]["coverage"] = float(np.mean(~np.isnan(b[sel]))) if sel.any() else 0.0
    return res


def _floats(values) -> list | None:
    """A plain list of floats for JSON: None for the list or for a value that is not finite."""
    if values is None:
        return None
    return [float(v) if math.isfinite(float(v)) else None for v in values]
