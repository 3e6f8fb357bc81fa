"""The models behind a simulated Lucid run, saved next to its results so each decision can be explained.

``lucidctl simulate`` calls :func:`save_models` after writing ``jobs_<policy>.csv``; ``lucidctl explain
job ID --sim-out DIR`` reads them back with :func:`load_artifacts`. Layout of ``DIR/models/``:

* ``index.json`` -- what was saved (schema below);
* ``duration_v<N>.joblib`` -- each weekly refit of the EBM duration model that produced at least one
  estimate of a simulated job (``models.duration.DurationModel.save``);
* ``packing.joblib`` -- the packing decision tree (``models.packing.PackingModel.save``), if one was fitted;
* ``job_features.csv`` -- one row per simulated job, keyed by ``job_id``: the estimate the run used
  (``estimate``, ``estimate_source``, ``model_version``; 0 = no model, fallback rule), the duration model's
  inputs as computed at the job's submission (``models.duration.compute_features`` columns: history
  features only see jobs that had ended by then), and the packing inputs ``gpu_util, gmem_util, gmem, amp``
  with the resulting ``share_score`` where the trace has them, and the job's own ``time_limit`` (seconds,
  empty for none) where the trace has that column: the run capped every estimate there.

Saving the computed features (not the raw history) keeps the directory proportional to the simulated
window, even when the models were also trained on jobs before it (``--start``).

``index.json``: ``format`` (1), ``trace``, ``jobs``, ``origin`` (ISO time or null), ``features_file``,
``options`` (the Lucid flags given: tprof, nprof, gss...),
``duration`` (null when no run used model estimates, e.g. only ``lucid-oracle``; else ``fitted`` (bool),
``refit_every_s``, ``min_train_jobs``, ``default_estimate_s``, ``missing_inputs``, ``refits`` (every
refit point: ``version, refit_time, train_rows, jobs_predicted, fit_seconds, skipped``), ``versions``
(the saved models: ``version, file, refit_time, train_rows, train_span, jobs, ebm_jobs, submit_range``),
``fallback_jobs``), ``packing`` (null when not run; else ``fitted``, ``file``, ``source`` (where its
labels came from), ``classes`` ({Tiny, Medium, Jumbo: jobs}), ``evaluation``, or ``reason`` when no model
was fitted) and ``errors`` (what could not be saved).
"""

from __future__ import annotations

import glob
import json
import math
import os

import numpy as np
import pandas as pd

from models.base import Explanation

FORMAT = 1
INDEX = "index.json"
FEATURES_FILE = "job_features.csv"
PACKING_FILE = "packing.joblib"
PACKING_FEATURES = ("gpu_util", "gmem_util", "gmem", "amp")
#: compute_features columns holding strings (None when empty); everything else is numeric
_TEXT_COLS = ("user", "vc", "weekday", "name_norm", "estimate_source")
_NONE_WHEN_EMPTY = ("user", "vc")
#: Lucid options of the run worth knowing when explaining it (only those set are recorded)
OPTIONS = ("colocation", "profiles", "tprof", "cprof", "nprof", "gss", "starvation_s", "aging_halflife_s")
NO_WORKLOAD = ("the trace has no workload columns (gpu_util, gmem_util, gmem, amp): jobs get no packing "
               "class and are never packed")


def duration_file(version: int) -> str:
    return f"duration_v{int(version)}.joblib"


def models_dir(out_dir) -> str:
    return os.path.join(os.fspath(out_dir), "models")


def save_models(exp, out_dir) -> str | None:
    """Write ``out_dir/models/`` for the Lucid runs of ``exp``; returns that directory.

    Does nothing (returns None) when no Lucid variant computed estimates or packing classes.
    Files of an earlier run in the same directory are replaced. Saving problems are recorded in
    index.json's ``errors`` and in ``exp.notes``; they never fail the simulation.
    """
    cache = exp.options.get("_cache") or {}
    if "estimates" not in cache and "classes" not in cache:
        return None
    mdir = models_dir(out_dir)
    os.makedirs(mdir, exist_ok=True)
    for old in glob.glob(os.path.join(mdir, "duration_v*.joblib")) + [os.path.join(mdir, PACKING_FILE)]:
        if os.path.exists(old):
            os.unlink(old)
    trace = exp.trace
    index: dict = {
        "format": FORMAT, "trace": str(exp.path), "jobs": int(len(trace)),
        "origin": None if exp.origin is None else pd.Timestamp(exp.origin).isoformat(),
        "features_file": FEATURES_FILE,
        "options": {k: exp.options.get(k) for k in OPTIONS if exp.options.get(k) is not None},
        "duration": None, "packing": None, "errors": [],
    }
    table = pd.DataFrame({"job_id": trace["job_id"].astype(str).to_numpy(object)}, index=trace.index)
    if "time_limit" in trace:  # every estimate the run used was capped at it (lucidd.jobs.within_limit)
        table["time_limit"] = trace["time_limit"].to_numpy(float)

    if "estimates" in cache:
        try:
            index["duration"] = _save_duration(exp, cache, mdir, table)
        except Exception as exc:  # noqa: BLE001 -- explain is a convenience, never fail the simulation
            index["errors"].append(f"duration models: {exc.__class__.__name__}: {exc}")
    if "classes" in cache:
        try:
            index["packing"] = _save_packing(exp, cache, mdir, table)
        except Exception as exc:  # noqa: BLE001
            index["errors"].append(f"packing model: {exc.__class__.__name__}: {exc}")

    table.to_csv(os.path.join(mdir, FEATURES_FILE), index=False)
    tmp = os.path.join(mdir, f".{INDEX}.tmp")
    with open(tmp, "w") as fh:
        json.dump(json_safe(index), fh, indent=2)
    os.replace(tmp, os.path.join(mdir, INDEX))
    for err in index["errors"]:
        exp.notes.append(f"explain: could not save {err}")
    return mdir


def _save_duration(exp, cache, mdir, table: pd.DataFrame) -> dict:
    from models.duration import WEEK, DurationModel, compute_features

    from .simulation import _with_prior

    frame = cache["estimates"]  # indexed like exp.trace: estimate, source, model_version
    models = cache.get("duration_models") or {}
    proto = DurationModel()
    both, skip = _with_prior(exp)
    feats = compute_features(both, both, exp.origin, proto.history_k).iloc[skip:]
    feats = feats.set_axis(exp.trace.index)
    table["estimate"] = frame["estimate"].astype(float).to_numpy()
    table["estimate_source"] = frame["source"].astype(str).to_numpy(object)
    table["model_version"] = frame["model_version"].astype(int).to_numpy()
    for col in feats.columns:
        table[col] = feats[col].to_numpy()
    submit = pd.to_numeric(exp.trace["submit_time"]).to_numpy(np.int64)
    versions = []
    for v in sorted(int(x) for x in set(table["model_version"]) if int(x) > 0):
        model = models.get(v)
        if model is None:
            continue
        model.save(os.path.join(mdir, duration_file(v)))
        sel = table["model_version"].to_numpy() == v
        refit = next((r for r in frame.attrs.get("refits", []) if int(r.get("version", -1)) == v), {})
        versions.append({
            "version": v, "file": duration_file(v), "refit_time": refit.get("refit_time"),
            "train_rows": int(model.train_rows_), "train_span": list(model.train_span_),
            "jobs": int(sel.sum()), "ebm_jobs": int((sel & (table["estimate_source"] == "ebm").to_numpy()).sum()),
            "submit_range": [int(submit[sel].min()), int(submit[sel].max())],
            "features": list(model.features_),
        })
    return {
        "fitted": bool(versions), "refit_every_s": WEEK, "min_train_jobs": 200,
        "default_estimate_s": proto.default_estimate_s,
        "missing_inputs": list(frame.attrs.get("missing_inputs", [])),
        "refits": list(frame.attrs.get("refits", [])), "versions": versions,
        "fallback_jobs": int((~table["estimate_source"].str.startswith("ebm")).sum()),
    }


def _save_packing(exp, cache, mdir, table: pd.DataFrame) -> dict:
    from models.packing import LABEL_NAMES

    classes = cache["classes"]
    trace = exp.trace
    model = cache.get("packing_model")
    if model is None or not all(c in trace for c in PACKING_FEATURES):
        return {"fitted": False, "reason": NO_WORKLOAD}
    for c in PACKING_FEATURES:
        table[c] = pd.to_numeric(trace[c], errors="coerce").to_numpy(float)
    table["share_score"] = classes.to_numpy(float)
    model.save(os.path.join(mdir, PACKING_FILE))
    counts = classes.value_counts().to_dict()
    ev = model.evaluation()
    return {
        "fitted": True, "file": PACKING_FILE, "source": cache.get("packing_source", ""),
        "classes": {name: int(counts.get(float(k), 0)) for k, name in LABEL_NAMES.items()},
        "evaluation": {k: ev.get(k) for k in ("rows", "class_counts", "ccp_alpha", "cv_accuracy",
                                              "nested_cv_accuracy", "n_leaves", "depth")},
    }


def json_safe(obj):
    """JSON-safe copy (numpy scalars -> Python, NaN -> None, tuples -> lists)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj


# ----- reading back -----------------------------------------------------------------------------

class Artifacts:
    """What :func:`save_models` wrote, loaded lazily (models are unpickled on first use)."""

    def __init__(self, mdir: str, index: dict, table: pd.DataFrame):
        self.dir = mdir
        self.index = index
        self.table = table  # indexed by job_id (str)
        self._duration: dict[int, object] = {}
        self._packing = None

    def row(self, job_id: str) -> pd.Series | None:
        if job_id not in self.table.index:
            return None
        r = self.table.loc[job_id]
        return r.iloc[0] if isinstance(r, pd.DataFrame) else r

    def duration_model(self, version: int):
        from models.duration import DurationModel

        v = int(version)
        if v not in self._duration:
            self._duration[v] = DurationModel.load(os.path.join(self.dir, duration_file(v)))
        return self._duration[v]

    def packing_model(self):
        from models.packing import PackingModel

        if self._packing is None:
            self._packing = PackingModel.load(os.path.join(self.dir, PACKING_FILE))
        return self._packing


def load_artifacts(out_dir) -> Artifacts:
    """Read ``out_dir/models/``; raises FileNotFoundError when index.json is absent."""
    mdir = models_dir(out_dir)
    with open(os.path.join(mdir, INDEX)) as fh:
        index = json.load(fh)
    path = os.path.join(mdir, index.get("features_file", FEATURES_FILE))
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    for col in table.columns:
        if col == "job_id":
            continue
        if col in _TEXT_COLS:
            if col in _NONE_WHEN_EMPTY:
                table[col] = table[col].astype(object).where(table[col] != "", None)
        else:
            table[col] = pd.to_numeric(table[col].replace("", np.nan), errors="coerce")
    table.index = table["job_id"]
    return Artifacts(mdir, index, table)


def feature_frame(row: pd.Series) -> pd.DataFrame:
    """One job's saved duration features as the one-row frame DurationModel works on."""
    from models.duration import AUX, FEATURE_INPUTS

    cols = [c for c in (*FEATURE_INPUTS, *AUX) if c in row.index and c != "name_bucket"]
    f = pd.DataFrame([{c: row[c] for c in cols}])
    for c in ("gpu_num", "hour", "user_n_ended", "gpu_n_ended", "all_n_ended"):
        if c in f:
            f[c] = f[c].astype(np.int64)
    for c in ("user", "vc", "weekday", "name_norm"):
        if c in f:
            f[c] = f[c].astype(object)
    return f


def explain_estimate(model, feats: pd.DataFrame) -> Explanation:
    """``DurationModel.explain`` for a job whose features were computed at simulation time.

    Same result as ``model.explain(job, history_df=<all jobs>, origin)`` (the tests check it), without
    needing the whole job history: the features already hold what was known at the submission.
    """
    return model.explain_features(feats)


def fallback_rule(f: pd.Series, source: str, default_s: float) -> str:
    """The fallback rule a job's estimate came from, in words (features of that job)."""
    g = int(f["gpu_num"])
    if source == "fallback:same_gpu_mean":
        return f"mean duration of the {int(f['gpu_n_ended'])} previously-ended {g}-GPU jobs"
    if source == "fallback:overall_mean":
        return f"no {g}-GPU job had ended yet; mean duration of all {int(f['all_n_ended'])} previously-ended jobs"
    return f"the constant default {default_s:g} s (no job had ended yet)"
