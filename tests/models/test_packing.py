"""Packing Analyze Model: label derivation, CV-chosen pruning, prediction, fallback, persistence."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from models.base import ModelError, load_model, make_stamp, save_model
from models.packing import (
    FEATURES,
    JUMBO,
    MEDIUM,
    TINY,
    PackingModel,
    colocation_long,
    labels_from_colocation,
)
from models.render import render_explanation

from tests.conftest import SHARED  # noqa: E402  (the one place that knows where ../shared is)
ARTIFACT = SHARED / "lucid-artifact"

PATH_STEP = re.compile(r"^(gpu_util|gmem_util|gmem|amp) (<=|>) -?[\d.e+-]+ \(value -?[\d.e+-]+\)$")


# ---------------------------------------------------------------------------------------------
# synthetic data
# ---------------------------------------------------------------------------------------------


def _profiles() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": ["A", "A", "B", "C", "D"],
            "dataset": ["x", "x", "y", "z", "w"],
            "batchsize": [32, 32, 64, 128, 16],
            "amp": [0, 1, 0, 0, 0],
            "speed": [100.0, 120.0, 50.0, 10.0, 5.0],
            "gpu_util": [20.0, 15.0, 60.0, 99.0, 10.0],
            "gmem_util": [5.0, 4.0, 30.0, 70.0, 1.0],
            "gmem": [2000.0, 1900.0, 4000.0, 12000.0, 1000.0],
            "label": [0, 0, 1, 2, 0],
        }
    )


def _pairs() -> pd.DataFrame:
    """Pair layout like colocate_info.csv (with its unnamed index column)."""
    rows = [
        # A/x/32/0 speeds 1.00, 0.98 -> 0.99 Tiny ; B 0.90, 0.92 -> 0.91 Medium ; C 0.70, 0.80 -> 0.75 Jumbo
        ("A", "x", 32, 0, 1.00, "B", "y", 64, 0, 0.90),
        ("B", "y", 64, 0, 0.92, "A", "x", 32, 0, 0.98),
        ("C", "z", 128, 0, 0.70, "A", "x", 32, 1, 0.96),
        ("A", "x", 32, 1, 0.94, "C", "z", 128, 0, 0.80),  # A/x/32/1: 0.96, 0.94 -> 0.95 Tiny (not < 0.95)
    ]
    cols = ["model1", "dataset1", "batchsize1", "amp1", "speed1", "model2", "dataset2", "batchsize2", "amp2", "speed2"]
    df = pd.DataFrame(rows, columns=cols)
    df.insert(0, "Unnamed: 0", range(len(df)))
    df.insert(3, "gpu_num1", 1)
    df.insert(9, "gpu_num2", 1)
    df["gpu_util"], df["gmem_util"], df["gmem"] = 80.0, 40.0, 6000
    return df


def _clusters(n_per_class: int = 20, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """Three classes separated mostly by gmem_util, with optional label noise."""
    rng = np.random.default_rng(seed)
    parts = []
    for label, (gu, mu) in enumerate([(20, 5), (55, 25), (95, 65)]):
        parts.append(
            pd.DataFrame(
                {
                    "gpu_util": rng.normal(gu, 8, n_per_class).clip(0, 100),
                    "gmem_util": rng.normal(mu, 4, n_per_class).clip(0, 100),
                    "gmem": rng.uniform(1500, 12000, n_per_class),
                    "amp": rng.integers(0, 2, n_per_class),
                    "label": label,
                }
            )
        )
    df = pd.concat(parts, ignore_index=True)
    if noise:
        flip = rng.random(len(df)) < noise
        df.loc[flip, "label"] = rng.integers(0, 3, int(flip.sum()))
    return df


@pytest.fixture(scope="module")
def fitted() -> PackingModel:
    return PackingModel(random_state=0, cv_repeats=2).fit(_clusters(noise=0.15, seed=1))


# ---------------------------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------------------------


def test_labels_from_pair_table():
    out = labels_from_colocation(_pairs(), _profiles())
    by_model = {(r.model, r.amp): r for r in out.itertuples()}
    assert by_model[("A", 0)].coloc_speed_mean == pytest.approx(0.99)
    assert by_model[("A", 0)].coloc_measurements == 2
    assert by_model[("A", 0)].label == TINY
    assert by_model[("A", 1)].coloc_speed_mean == pytest.approx(0.95)
    assert by_model[("A", 1)].label == TINY  # boundary: not below 0.95
    assert by_model[("B", 0)].label == MEDIUM
    assert by_model[("C", 0)].label == JUMBO
    # D never appears in a pair: no label, reported
    assert pd.isna(by_model[("D", 0)].label)
    assert out.attrs["unlabelled"] == [("D", "w", 16, 0)]
    # the profile's own label column is kept apart
    assert list(out["given_label"]) == [0, 0, 1, 2, 0]
    assert str(out["label"].dtype) == "Int64"


def test_labels_thresholds_are_configurable():
    out = labels_from_colocation(_pairs(), _profiles(), thresholds=(0.995, 0.95))
    labels = dict(zip(zip(out.model, out.amp), out.label))
    assert labels[("A", 0)] == MEDIUM  # 0.99 < 0.995
    assert labels[("B", 0)] == JUMBO  # 0.91 < 0.95
    with pytest.raises(ModelError):
        labels_from_colocation(_pairs(), _profiles(), thresholds=(0.8, 0.9))


def test_long_layout_and_bad_layout():
    long = pd.DataFrame(
        {"model": ["A", "A"], "dataset": ["x", "x"], "batchsize": [32, 32], "amp": [0, 0], "coloc_speed": [0.8, 0.84]}
    )
    out = labels_from_colocation(long, _profiles())
    assert out.loc[0, "label"] == JUMBO
    assert len(colocation_long(_pairs())) == 2 * len(_pairs())
    with pytest.raises(ModelError):
        labels_from_colocation(pd.DataFrame({"foo": [1]}), _profiles())


def test_rounding_follows_the_analyzer():
    long = pd.DataFrame(
        {
            "model": ["A"] * 2,
            "dataset": ["x"] * 2,
            "batchsize": [32] * 2,
            "amp": [0] * 2,
            "coloc_speed": [0.9494, 0.9500],
        }
    )
    assert labels_from_colocation(long, _profiles()).loc[0, "label"] == TINY  # 0.9497 -> 0.950
    assert labels_from_colocation(long, _profiles(), decimals=None).loc[0, "label"] == MEDIUM


# ---------------------------------------------------------------------------------------------
# alpha by cross-validation
# ---------------------------------------------------------------------------------------------


def test_alpha_is_chosen_by_cv(fitted):
    scores = fitted.cv_scores_
    alpha = fitted.ccp_alpha_
    assert len(scores) >= 2  # a real search over the pruning path
    assert alpha in scores
    best = max(scores.values())
    assert scores[alpha] == pytest.approx(best)
    # tie-break: no larger alpha reaches the best score
    assert all(s < best - 1e-12 for a, s in scores.items() if a > alpha)
    ev = fitted.evaluation()
    assert ev["ccp_alpha"] == alpha
    assert ev["cv_accuracy"] == pytest.approx(best)


def test_alpha_depends_on_the_data():
    clean = PackingModel(cv_repeats=2, nested_cv=False).fit(_clusters(noise=0.0, seed=2))
    noisy = PackingModel(cv_repeats=2, nested_cv=False).fit(_clusters(noise=0.3, seed=2))
    assert clean.ccp_alpha_ != noisy.ccp_alpha_
    # noise makes the unpruned tree big; CV prunes it back
    assert noisy.ccp_alpha_ > 0
    assert noisy.evaluation()["n_leaves"] < PackingModel()._tree(0.0).fit(
        _clusters(noise=0.3, seed=2)[list(FEATURES)].to_numpy(), _clusters(noise=0.3, seed=2)["label"]
    ).get_n_leaves()


def test_folds_adapt_to_smallest_class():
    df = _clusters(n_per_class=12, seed=3)
    df = pd.concat([df[df.label != 2], df[df.label == 2].head(3)], ignore_index=True)
    m = PackingModel(cv_repeats=1, nested_cv=False).fit(df)
    assert m.evaluation()["folds"] == 3


def test_fit_rejects_bad_input():
    with pytest.raises(ModelError):
        PackingModel().fit(_clusters().drop(columns="label"))
    with pytest.raises(ModelError):
        PackingModel().fit(_clusters().assign(label=1))
    with pytest.raises(ModelError):
        PackingModel().predict(_clusters())  # not fitted


# ---------------------------------------------------------------------------------------------
# predict / explain / fallback
# ---------------------------------------------------------------------------------------------


def test_predict_and_explain_shapes(fitted):
    df = _clusters(n_per_class=5, seed=9)
    pred = fitted.predict(df)
    assert isinstance(pred, np.ndarray) and pred.shape == (15,)
    assert np.issubdtype(pred.dtype, np.integer)
    assert set(pred) <= {0, 1, 2}
    ev = fitted.evaluation()
    for key in ("cv_accuracy", "oof_macro_f1", "nested_cv_accuracy", "n_leaves", "depth"):
        assert key in ev
    assert np.array(ev["confusion_matrix"]).shape == (3, 3)
    assert np.array(ev["confusion_matrix"]).sum() == ev["rows"]

    row = df.iloc[0]
    exp = fitted.explain(row)
    assert exp.kind == "tree" and exp.model == "packing"
    assert exp.prediction == pred[0] == fitted.predict_one(row.gpu_util, row.gmem_util, row.gmem, row.amp)
    assert 1 <= len(exp.path) <= fitted.tree_.get_depth()
    assert exp.path and all(PATH_STEP.match(step) for step in exp.path), exp.path
    assert fitted.explain(row.to_dict()).path == fitted.explain(df.iloc[[0]]).path == exp.path
    text = render_explanation(exp)
    assert text.startswith("packing: ") and "1. " in text


def test_fallback_on_missing_metric(fitted):
    df = _clusters(n_per_class=2, seed=4)
    df.loc[1, "gmem"] = np.nan
    pred = fitted.predict(df)
    assert pred[1] == JUMBO
    exp = fitted.explain(df.iloc[1])
    assert exp.kind == "fallback" and exp.prediction == JUMBO
    assert "gmem" in exp.reason and exp.path == []
    assert fitted.predict_one(50.0, None, 3000, 0) == JUMBO
    assert "fallback" in render_explanation(exp)
    medium_default = PackingModel(default_class=MEDIUM, cv_repeats=1, nested_cv=False).fit(_clusters(seed=5))
    assert medium_default.predict_one(np.nan, 1.0, 1.0, 0) == MEDIUM


# ---------------------------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------------------------


def test_save_load_round_trip(fitted, tmp_path):
    path = tmp_path / "packing.joblib"
    fitted.save(path)
    loaded = PackingModel.load(path)
    df = _clusters(n_per_class=5, seed=11)
    assert (loaded.predict(df) == fitted.predict(df)).all()
    assert loaded.stamp.model == "packing"
    assert loaded.stamp.train_rows == fitted.evaluation()["rows"]
    assert loaded.stamp.metrics["ccp_alpha"] == fitted.ccp_alpha_


def test_load_refuses_other_model_kind(fitted, tmp_path):
    other = tmp_path / "throughput.joblib"
    save_model({"not": "a packing model"}, make_stamp("throughput", train_rows=1), other)
    with pytest.raises(ModelError, match="expected 'packing'"):
        PackingModel.load(other)
    # right stamp, wrong object
    liar = tmp_path / "liar.joblib"
    save_model({"x": 1}, make_stamp("packing", train_rows=1), liar)
    with pytest.raises(ModelError):
        PackingModel.load(liar)
    with pytest.raises(ModelError):
        PackingModel.load(tmp_path / "missing.joblib")
    # and the packing file is refused by the other loader
    fitted.save(tmp_path / "p.joblib")
    with pytest.raises(ModelError):
        load_model(tmp_path / "p.joblib", "throughput")


# ---------------------------------------------------------------------------------------------
# the artifact's measurements (read from ../shared, never copied)
# ---------------------------------------------------------------------------------------------


def _artifact():
    if not (ARTIFACT / "colocate_info.csv").exists() or not (ARTIFACT / "single_data.csv").exists():
        pytest.skip(f"Lucid artifact data not found under {ARTIFACT} (../shared is not mounted)")
    return pd.read_csv(ARTIFACT / "colocate_info.csv"), pd.read_csv(ARTIFACT / "single_data.csv")


@pytest.mark.shared
def test_artifact_derived_labels_agree_with_artifact_labels():
    coloc, single = _artifact()
    out = labels_from_colocation(coloc, single)
    labelled = out[out["label"].notna()]
    # BERT, ResNet50 and Transformer never appear in colocate_info.csv
    assert len(out.attrs["unlabelled"]) == 10
    assert {k[0] for k in out.attrs["unlabelled"]} == {"BERT", "ResNet50", "Transformer"}
    agreement = float((labelled["label"] == labelled["given_label"]).mean())
    assert len(labelled) == 56
    assert agreement == pytest.approx(43 / 56)  # measured: 76.8 % with the analyzer's rounding


@pytest.mark.shared
def test_artifact_tree_cross_validates():
    _, single = _artifact()
    m = PackingModel(random_state=0).fit(single)
    ev = m.evaluation()
    assert ev["rows"] == 66 and ev["folds"] == 5
    assert ev["cv_accuracy"] > 0.6
    assert ev["nested_cv_accuracy"] > 0.55
    assert (m.predict(single) == single["label"]).mean() == pytest.approx(ev["train_accuracy"])


def test_infinite_or_huge_metrics_are_missing_not_a_traceback():
    """--profiles with gmem=inf stopped `lucidctl simulate` with sklearn's "Input X contains
    infinity"; such a value is no measurement, like an empty cell."""
    rng = np.random.default_rng(0)
    n = 60
    df = pd.DataFrame({"gpu_util": rng.uniform(0, 100, n), "gmem_util": rng.uniform(0, 60, n),
                       "gmem": rng.uniform(500, 20000, n), "amp": rng.integers(0, 2, n).astype(float)})
    df["label"] = np.where(df["gpu_util"] < 30, 0, np.where(df["gpu_util"] < 70, 1, 2))
    df.loc[0, "gmem"], df.loc[1, "gpu_util"] = np.inf, 1e300
    m = PackingModel(default_class=2, nested_cv=False).fit(df, label_col="label")
    assert m.evaluation_["rows_dropped"] == 2
    assert list(m.predict(df.iloc[:2])) == [2, 2]  # missing metric: the default class (never pack)
    bad = df.assign(label=df["label"].astype(float))
    bad.loc[5, "label"] = 1.7
    with pytest.raises(ModelError, match="labels must be in"):
        PackingModel(nested_cv=False).fit(bad, label_col="label")
