"""Packing Analyze Model: maps a job's profiled GPU metrics to a sharing score.

Lucid packs two jobs on the same GPUs only when their sharing scores add up to at most 2:
Tiny (0) jobs share well, Medium (1) jobs hurt a partner somewhat, Jumbo (2) jobs a lot; the binder lets
two jobs share only if their scores sum to at most GSS (default 2: Tiny+Tiny, Tiny+Medium, Medium+Medium,
Tiny+Jumbo — the artifact's rule), so a Jumbo job shares only with a Tiny one.
The model is a cost-complexity-pruned scikit-learn decision tree on four metrics a short
profiling run yields: ``gpu_util`` (%), ``gmem_util`` (%), ``gmem`` (MB) and ``amp`` (0/1).

Labels come from co-location measurements: the mean normalised speed a workload keeps when it
shares a GPU (the artifact's ``analyzer.py`` rule: < 0.85 -> Jumbo, < 0.95 -> Medium, else Tiny).
See docs/models-packing-throughput.md for the table formats.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd

from .base import Explanation, ModelError, load_model, make_stamp, save_model

log = logging.getLogger(__name__)

MODEL_NAME = "packing"
FEATURES = ("gpu_util", "gmem_util", "gmem", "amp")
TINY, MEDIUM, JUMBO = 0, 1, 2
LABEL_NAMES = {TINY: "Tiny", MEDIUM: "Medium", JUMBO: "Jumbo"}
#: Columns identifying a workload (one profiled configuration) in both tables.
WORKLOAD_KEY = ("model", "dataset", "batchsize", "amp")
_SIDE_COLS = ("model", "dataset", "batchsize", "amp", "speed")


# --------------------------------------------------------------------------------------------
# Measurement tables and labels
# --------------------------------------------------------------------------------------------


def colocation_long(coloc: pd.DataFrame) -> pd.DataFrame:
    """Normalise a co-location measurement table to one row per (workload, measurement).

    Accepted layouts:
      * *pair* (the artifact's ``colocate_info.csv``): one row per co-located pair with
        ``model1, dataset1, batchsize1, amp1, speed1, model2, dataset2, batchsize2, amp2, speed2``
        (``gpu_num1/2, gpu_util, gmem_util, gmem`` and a leading unnamed index column are allowed
        and ignored).  ``speedN`` = job N's throughput while sharing / its exclusive throughput.
      * *long*: one row per workload and measurement with ``model, dataset, batchsize, amp,
        coloc_speed`` (same meaning as speedN).
    Returns columns ``model, dataset, batchsize, amp, coloc_speed`` (rows with a missing speed
    dropped).
    """
    cols = set(coloc.columns)
    pair_cols = {f"{c}{i}" for c in _SIDE_COLS for i in (1, 2)}
    if pair_cols <= cols:
        sides = []
        for i in (1, 2):
            side = coloc[[f"{c}{i}" for c in _SIDE_COLS]].copy()
            side.columns = list(WORKLOAD_KEY) + ["coloc_speed"]
            sides.append(side)
        long = pd.concat(sides, ignore_index=True)
    elif set(WORKLOAD_KEY) | {"coloc_speed"} <= cols:
        long = coloc[list(WORKLOAD_KEY) + ["coloc_speed"]].copy()
    else:
        missing = sorted(pair_cols - cols)
        raise ModelError(
            "co-location table: expected the pair layout (missing "
            f"{', '.join(missing[:4])}{'...' if len(missing) > 4 else ''}) or the long layout "
            "(model, dataset, batchsize, amp, coloc_speed)"
        )
    long["coloc_speed"] = pd.to_numeric(long["coloc_speed"], errors="coerce")
    bad = long["coloc_speed"].isna() | (long["coloc_speed"] <= 0)
    if bad.any():
        log.warning("co-location table: %d measurements without a usable speed ignored", int(bad.sum()))
    return _normalise_key(long[~bad].reset_index(drop=True))


def _normalise_key(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["model"] = df["model"].astype(str)
    df["dataset"] = df["dataset"].astype(str)
    df["batchsize"] = pd.to_numeric(df["batchsize"], errors="coerce").astype("Int64")
    df["amp"] = pd.to_numeric(df["amp"], errors="coerce").astype("Int64")
    return df


def _label_for(speed: float, thresholds: tuple[float, float]) -> int:
    medium_below, jumbo_below = thresholds
    if speed < jumbo_below:
        return JUMBO
    if speed < medium_below:
        return MEDIUM
    return TINY


def _check_thresholds(thresholds) -> tuple[float, float]:
    try:
        medium_below, jumbo_below = (float(t) for t in thresholds)
    except (TypeError, ValueError):
        raise ModelError("thresholds must be two numbers (medium_below, jumbo_below)") from None
    if not jumbo_below <= medium_below:
        raise ModelError(f"thresholds {thresholds}: the Jumbo bound must not exceed the Medium bound")
    return medium_below, jumbo_below


def labels_from_colocation(
    coloc: pd.DataFrame,
    profiles: pd.DataFrame,
    thresholds: tuple[float, float] = (0.95, 0.85),
    decimals: int | None = 3,
) -> pd.DataFrame:
    """Derive each profiled workload's sharing score from co-location measurements.

    coloc: co-location table (see ``colocation_long``); profiles: one row per workload with
    ``model, dataset, batchsize, amp`` and the metrics ``gpu_util, gmem_util, gmem`` (the
    artifact's ``single_data.csv`` layout; extra columns kept).
    For every workload, ``coloc_speed_mean`` = mean normalised speed over all its co-located
    measurements (on either side of a pair), rounded to `decimals` as the artifact's analyzer does
    (None: no rounding); label = 2 (Jumbo) if below thresholds[1], 1 (Medium) if below
    thresholds[0], else 0 (Tiny).

    Returns a copy of `profiles` with ``coloc_speed_mean``, ``coloc_measurements`` and ``label``
    (nullable Int64).  A ``label`` column already in `profiles` is kept as ``given_label``.
    Workloads never measured in a pair get no label (<NA>); they are logged and listed in
    ``result.attrs["unlabelled"]`` (list of key tuples).
    """
    thresholds = _check_thresholds(thresholds)
    missing = [c for c in WORKLOAD_KEY if c not in profiles.columns]
    if missing:
        raise ModelError(f"profile table: missing key columns {missing}")
    long = colocation_long(coloc)
    stats = (
        long.groupby(list(WORKLOAD_KEY), dropna=False)["coloc_speed"]
        .agg(coloc_speed_mean="mean", coloc_measurements="count")
        .reset_index()
    )
    out = profiles.copy()
    if "label" in out.columns:
        out = out.rename(columns={"label": "given_label"})
    out = out.drop(columns=[c for c in ("coloc_speed_mean", "coloc_measurements") if c in out.columns])
    keyed = _normalise_key(out[list(WORKLOAD_KEY)])
    merged = keyed.merge(stats, how="left", on=list(WORKLOAD_KEY))
    mean = merged["coloc_speed_mean"].to_numpy(dtype=float)
    if decimals is not None:
        mean = np.round(mean, decimals)
    out["coloc_speed_mean"] = mean
    out["coloc_measurements"] = merged["coloc_measurements"].fillna(0).astype(int).to_numpy()
    labels = [pd.NA if math.isnan(m) else _label_for(m, thresholds) for m in mean]
    out["label"] = pd.array(labels, dtype="Int64")
    unlabelled = [tuple(r) for r in keyed.loc[np.isnan(mean), list(WORKLOAD_KEY)].itertuples(index=False)]
    out.attrs["unlabelled"] = unlabelled
    if unlabelled:
        log.warning(
            "%d profiled workloads never appear in a co-located pair and get no label: %s",
            len(unlabelled),
            ", ".join("/".join(str(v) for v in k) for k in unlabelled),
        )
    return out


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def _feature_frame(df: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in FEATURES if c not in df.columns]
    if missing:
        raise ModelError(f"packing model input lacks columns {missing}")
    X = df[list(FEATURES)].apply(pd.to_numeric, errors="coerce").astype(float)
    # inf, or a number past float32 (what the tree computes in), is no measurement: missing, like
    # an empty cell (sklearn would stop with "Input X contains infinity")
    return X.where(np.isfinite(X) & (X.abs() < 1e30))


class PackingModel:
    """Pruned decision tree: (gpu_util, gmem_util, gmem, amp) -> 0 Tiny / 1 Medium / 2 Jumbo.

    ccp_alpha is chosen by (repeated) stratified k-fold cross-validation over the candidate
    alphas of the tree's cost-complexity pruning path; on a tie the larger alpha (simpler tree)
    wins.  Inputs with a missing metric get `default_class` (Jumbo: never pack) instead.
    """

    def __init__(
        self,
        thresholds: tuple[float, float] = (0.95, 0.85),
        random_state: int = 0,
        default_class: int = JUMBO,
        max_folds: int = 5,
        cv_repeats: int = 5,
        criterion: str = "gini",
        nested_cv: bool = True,
    ):
        self.thresholds = _check_thresholds(thresholds)
        if default_class not in LABEL_NAMES:
            raise ModelError(f"default_class must be one of {sorted(LABEL_NAMES)}")
        self.random_state = random_state
        self.default_class = int(default_class)
        self.max_folds = int(max_folds)
        self.cv_repeats = int(cv_repeats)
        self.criterion = criterion
        self.nested_cv = bool(nested_cv)
        self.tree_ = None
        self.ccp_alpha_: float | None = None
        self.cv_scores_: dict[float, float] = {}
        self.evaluation_: dict[str, Any] = {}
        self.train_rows_ = 0
        self.stamp = None

    # -- labels ----------------------------------------------------------------------------

    def labels_from_colocation(self, coloc: pd.DataFrame, profiles: pd.DataFrame, **kw) -> pd.DataFrame:
        """``labels_from_colocation`` with this model's thresholds."""
        return labels_from_colocation(coloc, profiles, self.thresholds, **kw)

    # -- fitting ---------------------------------------------------------------------------

    def _tree(self, alpha: float):
        from sklearn.tree import DecisionTreeClassifier

        return DecisionTreeClassifier(ccp_alpha=alpha, criterion=self.criterion, random_state=self.random_state)

    def _cv(self, y: np.ndarray, seed_offset: int = 0):
        from sklearn.model_selection import RepeatedStratifiedKFold

        counts = np.bincount(y)
        smallest = int(counts[counts > 0].min())
        k = max(2, min(self.max_folds, smallest))
        if smallest < 2:
            log.warning("packing: a class has a single example; stratified CV is approximate")
        return k, RepeatedStratifiedKFold(
            n_splits=k, n_repeats=max(1, self.cv_repeats), random_state=self.random_state + seed_offset
        )

    def _choose_alpha(self, X: np.ndarray, y: np.ndarray, seed_offset: int = 0):
        """(alpha, {alpha: mean CV accuracy}, k) using only X, y."""
        import warnings

        path = self._tree(0.0).cost_complexity_pruning_path(X, y)
        # Candidates: the path's alphas (the last one prunes to the root).  Any alpha in
        # [a_i, a_i+1) gives the same tree as a_i on the full data, so these cover every tree.
        alphas = [float(a) for a in np.unique(np.clip(path.ccp_alphas, 0.0, None))]
        k, cv = self._cv(y, seed_offset)
        hits = {a: [] for a in alphas}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The least populated class")
            splits = list(cv.split(X, y))
        for tr, te in splits:
            for a in alphas:
                pred = self._tree(a).fit(X[tr], y[tr]).predict(X[te])
                hits[a].append(float(np.mean(pred == y[te])))
        scores = {a: float(np.mean(h)) for a, h in hits.items()}
        best = max(scores.values())
        # tie (within float noise) -> the largest alpha, i.e. the simplest tree
        alpha = max(a for a, sc in scores.items() if sc >= best - 1e-12)
        return alpha, scores, k

    def fit(self, profiles: pd.DataFrame, label_col: str = "label", allow_constant: bool = False) -> "PackingModel":
        """Fit on a profile table with the four feature columns and an integer `label_col`.

        Rows with a missing label or metric are dropped (and counted in evaluation()).
        With fewer than two different labels or fewer than 4 labelled rows there is nothing to
        learn: that raises ModelError, unless `allow_constant`, which gives a one-leaf tree
        predicting the most common label (evaluation()["constant"] is True; its cross-validation
        figures are None).
        """
        import warnings

        from sklearn.metrics import accuracy_score, confusion_matrix, f1_score
        from sklearn.model_selection import StratifiedKFold, cross_val_predict

        if label_col not in profiles.columns:
            raise ModelError(f"packing fit: no '{label_col}' column (derive it with labels_from_colocation)")
        X_df = _feature_frame(profiles)
        y_s = pd.to_numeric(profiles[label_col], errors="coerce")
        ok = y_s.notna() & X_df.notna().all(axis=1)
        dropped = int((~ok).sum())
        if not y_s[ok].isin(list(LABEL_NAMES)).all():  # 1.7 is no label (astype(int) made it 1)
            raise ModelError(f"packing fit: labels must be in {sorted(LABEL_NAMES)}")
        X, y = X_df[ok].to_numpy(), y_s[ok].astype(int).to_numpy()
        if allow_constant and len(y) and (len(np.unique(y)) < 2 or len(y) < 4):
            return self._fit_constant(X, y, dropped)
        if len(np.unique(y)) < 2:
            raise ModelError("packing fit: need at least two different labels")
        if len(y) < 4:
            raise ModelError("packing fit: need at least 4 labelled rows")

        alpha, scores, k = self._choose_alpha(X, y)
        tree = self._tree(alpha).fit(X, y)

        # Out-of-fold predictions at the chosen alpha (one shuffled stratified k-fold), and a
        # nested CV in which alpha is re-chosen inside each outer training fold (unbiased).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The least populated class")
            outer = StratifiedKFold(n_splits=k, shuffle=True, random_state=self.random_state)
            oof = cross_val_predict(self._tree(alpha), X, y, cv=outer)
            nested_hits = np.zeros(len(y), dtype=bool)
            nested_alphas = []
            for i, (tr, te) in enumerate(outer.split(X, y) if self.nested_cv else []):
                if len(np.unique(y[tr])) < 2 or np.bincount(y[tr]).max() < 2:
                    # one class, or one example of each (2 Tiny + 2 Jumbo splits so): no stratified
                    # fold to choose an alpha on (StratifiedKFold raises), so the outer choice stands
                    a_in = alpha
                else:
                    a_in, _, _ = self._choose_alpha(X[tr], y[tr], seed_offset=i + 1)
                nested_alphas.append(a_in)
                nested_hits[te] = self._tree(a_in).fit(X[tr], y[tr]).predict(X[te]) == y[te]

        labels = sorted(LABEL_NAMES)
        self.tree_ = tree
        self.ccp_alpha_ = alpha
        self.cv_scores_ = scores
        self.train_rows_ = int(len(y))
        self.evaluation_ = {
            "rows": int(len(y)),
            "rows_dropped": dropped,
            "class_counts": {LABEL_NAMES[c]: int((y == c).sum()) for c in labels},
            "constant": False,
            "folds": int(k),
            "cv_repeats": int(max(1, self.cv_repeats)),
            "ccp_alpha": float(alpha),
            "alpha_candidates": len(scores),
            "cv_accuracy": float(scores[alpha]),
            "oof_accuracy": float(accuracy_score(y, oof)),
            "oof_macro_f1": float(f1_score(y, oof, average="macro", labels=labels, zero_division=0)),
            "confusion_matrix": confusion_matrix(y, oof, labels=labels).tolist(),
            "nested_cv_accuracy": float(nested_hits.mean()) if self.nested_cv else None,
            "nested_alphas": [float(a) for a in nested_alphas],
            "train_accuracy": float(accuracy_score(y, tree.predict(X))),
            "n_leaves": int(tree.get_n_leaves()),
            "depth": int(tree.get_depth()),
        }
        return self

    def _fit_constant(self, X: np.ndarray, y: np.ndarray, dropped: int) -> "PackingModel":
        """A one-leaf tree: every input gets the most common label (ties: the lowest score)."""
        counts = np.bincount(y, minlength=len(LABEL_NAMES))
        label = int(np.argmax(counts))
        tree = self._tree(0.0).fit(X, np.full(len(y), label))
        labels = sorted(LABEL_NAMES)
        self.tree_ = tree
        self.ccp_alpha_ = 0.0
        self.cv_scores_ = {}
        self.train_rows_ = int(len(y))
        self.evaluation_ = {
            "rows": int(len(y)),
            "rows_dropped": dropped,
            "class_counts": {LABEL_NAMES[c]: int((y == c).sum()) for c in labels},
            "constant": True,
            "folds": 0, "cv_repeats": 0, "ccp_alpha": 0.0, "alpha_candidates": 0,
            "cv_accuracy": None, "oof_accuracy": None, "oof_macro_f1": None,
            "confusion_matrix": None, "nested_cv_accuracy": None, "nested_alphas": [],
            "train_accuracy": float(np.mean(y == label)),
            "n_leaves": 1, "depth": 0,
        }
        return self

    # -- prediction ------------------------------------------------------------------------

    def _check_fitted(self):
        if self.tree_ is None:
            raise ModelError("packing model is not fitted")

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        """Sharing score per row (int array); rows with a missing metric get default_class."""
        self._check_fitted()
        X = _feature_frame(df)
        out = np.full(len(X), self.default_class, dtype=int)
        ok = X.notna().all(axis=1).to_numpy()
        if ok.any():
            out[ok] = self.tree_.predict(X.to_numpy()[ok]).astype(int)
        return out

    def predict_one(self, gpu_util, gmem_util, gmem, amp) -> int:
        return int(self.predict(_row_frame(dict(gpu_util=gpu_util, gmem_util=gmem_util, gmem=gmem, amp=amp)))[0])

    def explain(self, row) -> Explanation:
        """Decision path for one input (dict, Series or one-row DataFrame)."""
        self._check_fitted()
        X = _feature_frame(_row_frame(row))
        if len(X) != 1:
            raise ModelError(f"explain takes one row, got {len(X)}")
        x = X.iloc[0]
        missing = [f for f in FEATURES if pd.isna(x[f])]
        if missing:
            return Explanation(
                model=MODEL_NAME,
                kind="fallback",
                prediction=self.default_class,
                reason=(
                    f"missing metric(s) {', '.join(missing)}: default class {self.default_class} "
                    f"({LABEL_NAMES[self.default_class]}) used instead of the tree"
                ),
            )
        t = self.tree_.tree_
        xv = x.to_numpy(dtype=float)
        node, path = 0, []
        while t.children_left[node] != t.children_right[node]:  # not a leaf
            f, thr = t.feature[node], t.threshold[node]
            name, v = FEATURES[f], xv[f]
            if v <= thr:
                path.append(f"{name} <= {_fmt(thr)} (value {_fmt(v)})")
                node = t.children_left[node]
            else:
                path.append(f"{name} > {_fmt(thr)} (value {_fmt(v)})")
                node = t.children_right[node]
        classes = self.tree_.classes_
        dist = t.value[node][0]
        pred = int(classes[int(np.argmax(dist))])
        n = int(t.n_node_samples[node])
        share = ", ".join(f"{LABEL_NAMES[int(c)]} {p:.0%}" for c, p in zip(classes, dist / dist.sum()))
        return Explanation(
            model=MODEL_NAME,
            kind="tree",
            prediction=pred,
            path=path,
            reason=f"leaf with {n} training workloads ({share}) -> {LABEL_NAMES[pred]}",
        )

    def evaluation(self) -> dict:
        """Cross-validated quality of the fitted tree and the pruning choice (see fit())."""
        self._check_fitted()
        return dict(self.evaluation_)

    def rules(self) -> str:
        """The whole tree as indented text (sklearn.tree.export_text)."""
        from sklearn.tree import export_text

        self._check_fitted()
        return export_text(self.tree_, feature_names=list(FEATURES))

    # -- persistence -----------------------------------------------------------------------

    def save(self, path) -> None:
        self._check_fitted()
        ev = self.evaluation_
        stamp = make_stamp(
            MODEL_NAME,
            train_rows=self.train_rows_,
            metrics={
                k: ev[k]
                for k in ("ccp_alpha", "cv_accuracy", "nested_cv_accuracy", "oof_macro_f1", "n_leaves", "depth")
            },
        )
        self.stamp = stamp
        save_model(self, stamp, path)

    @classmethod
    def load(cls, path) -> "PackingModel":
        obj, stamp = load_model(path, MODEL_NAME, cls)
        obj.stamp = stamp
        return obj


def _row_frame(row) -> pd.DataFrame:
    if isinstance(row, pd.DataFrame):
        return row
    if isinstance(row, pd.Series):
        return row.to_frame().T
    if isinstance(row, Mapping):
        return pd.DataFrame([{k: (np.nan if v is None else v) for k, v in row.items()}])
    raise ModelError(f"expected a dict, Series or DataFrame row, got {type(row).__name__}")


def _fmt(v: float) -> str:
    v = float(v)
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"
