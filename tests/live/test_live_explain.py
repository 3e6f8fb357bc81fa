"""`lucidctl explain job ID` for a live job explains its duration estimate: the terms of the EBM
version that made it, recomputed from the model file and the history lucidd keeps (the design
card: the admin CLI shows every decision and model explanation). Before, it printed the figure and
its source only."""

from __future__ import annotations

import re

from lucidd.admin_cli import explain_data
from lucidd.backends.base import LiveJob
from lucidd.live.config import config_from_dict
from lucidd.live.store import JobRow, Store
from orchestrator.live import LucidDecider, live_job

from .test_live_models import NOW, _history


def _daemon_with_a_model(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"min_history_jobs": 100,
                                                                              "dir": str(tmp_path / "models")}})
    store = Store(cfg.database.url).create()
    store.add_history(_history())
    d = LucidDecider(cfg)
    d.background(store, NOW)
    d._refit_thread.join(300)
    return cfg, store, d


def _estimated(store, d, job_id, user, gpus):
    (est, src), = d.estimator.estimate([live_job(LiveJob(job_id, user=user, gpus=gpus, submit_time=NOW,
                                                         partition="main", name=f"train-{user}"), None)]).values()
    store.save_jobs([JobRow(job_id=job_id, user=user, name=f"train-{user}", gpus=gpus, target_partition="main",
                            phase="released", profile="skipped", original_submit=NOW, first_seen=NOW,
                            estimate_s=est, estimate_source=src, site_factor=999_000_000)], new_ids={job_id})
    return est, src


def test_a_live_estimate_is_explained_by_its_ebm_terms(tmp_path, capsys):
    cfg, store, d = _daemon_with_a_model(tmp_path)
    est, src = _estimated(store, d, 9001, "u3", 2)
    assert src.startswith("ebm:v")
    e = explain_data(cfg, store, 9001)["order"]["explanation"]
    assert e["kind"] == "ebm" and e["model_version"] == int(re.match(r"ebm:v(\d+)", src).group(1))
    assert e["matches_estimate"] and abs(e["model_seconds"] - est) <= 0.01 * est
    assert e["terms"] and {"term", "value", "contribution"} <= set(e["terms"][0])
    names = {t["term"] for t in e["terms"]}
    assert "gpu_num" in names, names
    # the text output shows the terms under the estimate
    from lucidd.admin_cli import cmd_live

    class Args:
        command, json, id = "explain", False, 9001

    import lucidd.admin_cli as admin

    orig = admin._open
    admin._open = lambda args: (cfg, store)
    try:
        assert cmd_live(Args()) == 0
    finally:
        admin._open = orig
    text = capsys.readouterr().out
    assert "top contributions" in text and "(intercept)" in text and "gpu_num" in text, text


def test_a_new_users_estimate_says_why_the_model_did_not_apply(tmp_path):
    cfg, store, d = _daemon_with_a_model(tmp_path)
    est, src = _estimated(store, d, 9003, "newcomer", 2)
    assert src.startswith("fallback")
    e = explain_data(cfg, store, 9003)["order"]["explanation"]
    assert e["kind"] == "fallback" and e["matches_estimate"], e
    assert "does not apply: user 'newcomer' has no job that ended before this submission" in e["reason"], e


def test_an_explanation_that_no_longer_matches_says_why(tmp_path):
    cfg, store, d = _daemon_with_a_model(tmp_path)
    est, src = _estimated(store, d, 9002, "u5", 4)
    # the user's history that fed the estimate is gone (pruned past history_days)
    store.prune_history(NOW + 1)
    e = explain_data(cfg, store, 9002)["order"]["explanation"]
    # without that history the model itself falls back to the rule of means for this user
    assert e["kind"] in ("ebm", "fallback") and e["matches_estimate"] is False
    assert "history it was made from has changed" in e["reason"]
    # the model version that made it is gone (the models folder keeps the newest only)
    for f in (tmp_path / "models").glob("duration-v*.joblib"):
        f.unlink()
    e = explain_data(cfg, store, 9002)["order"]["explanation"]
    assert e["kind"] == "unavailable" and "cannot be read now" in e["reason"] and e["terms"] == []


def test_fallback_and_default_estimates_say_which_rule(tmp_path):
    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"dir": str(tmp_path / "models")}})
    store = Store(cfg.database.url).create()
    store.add_history(_history(50))
    d = LucidDecider(cfg)
    d.background(store, NOW)  # reads the history; 50 jobs are too few for a model
    d._refit_thread.join(60)
    (est, src), = d.estimator.estimate([live_job(LiveJob(7, user="u1", gpus=2, submit_time=NOW, partition="main",
                                                         name="x"), None)]).values()
    assert src == "fallback:same_gpu_mean"
    store.save_jobs([JobRow(job_id=7, user="u1", name="x", gpus=2, target_partition="main", phase="released",
                            profile="skipped", original_submit=NOW, first_seen=NOW, estimate_s=est,
                            estimate_source=src),
                     JobRow(job_id=8, user="u1", name="x", gpus=2, target_partition="main", phase="released",
                            profile="skipped", original_submit=NOW, first_seen=NOW, estimate_s=3600.0,
                            estimate_source="default"),
                     JobRow(job_id=9, user="u1", name="x", gpus=2, target_partition="main", phase="inbox",
                            profile="pending", original_submit=NOW, first_seen=NOW)], new_ids={7, 8, 9})
    e = explain_data(cfg, store, 7)["order"]["explanation"]
    assert e["kind"] == "fallback" and re.search(r"mean duration of the \d+ previously-ended 2-GPU jobs", e["reason"])
    assert e["matches_estimate"] and abs(e["model_seconds"] - est) < 1e-6 * est, (e, est)
    assert explain_data(cfg, store, 8)["order"]["explanation"]["kind"] == "default"
    e = explain_data(cfg, store, 9)["order"]["explanation"]
    assert e["kind"] == "none" and set(e) == {"kind", "model_version", "model_seconds", "intercept", "terms",
                                              "reason", "matches_estimate"}


def test_models_shows_the_current_model_what_it_looks_at_and_its_refits(tmp_path, capsys):
    from lucidd.admin_cli import models_data, models_text

    cfg, store, d = _daemon_with_a_model(tmp_path)
    m = models_data(cfg, store)
    c = m["current"]
    assert c["version"] == 1 and c["train_rows"] == 400 and c["trigger"] == "first" and not c["fallback"]
    assert c["terms"] and c["terms"][0]["importance"] > 0 and c["terms"][0]["importance"] >= c["terms"][-1]["importance"] >= 0
    assert "gpu_num" in {t["term"] for t in c["terms"]} and "gpu_num" in c["features"]
    assert [(r["version"], r["decision"]) for r in m["refits"]] == [(1, "swapped")]
    text = "\n".join(models_text(m))
    assert text.startswith("duration model: EBM v1") and "what it looks at" in text and "v1 swapped" in text
    # a holdout of one constant duration (every job at the same time limit) has no Spearman: stored
    # as null, and the text once failed on it with a TypeError (a review, 2 December 2026)
    c["holdout"] = dict(c["holdout"] or {"n": 40, "median_abs_log_error": 1.7}, spearman=None)
    assert "Spearman n/a" in "\n".join(models_text(m))
    # before any fit: the rule of means, and how many jobs the first fit needs
    empty = config_from_dict({"daemon": {"state_dir": str(tmp_path / "b")}, "models": {"dir": str(tmp_path / "none")}})
    store_b = Store(empty.database.url).create()
    m = models_data(empty, store_b)
    assert m["current"] is None and m["refits"] == [] and m["history_jobs"] == 0
    assert "none yet" in models_text(m)[0] and "rule of means" in models_text(m)[0]
    # a broken current file: the older version serves, and says so (there is none here: a problem)
    (tmp_path / "models" / "duration-v0001.joblib").write_bytes(b"not a model")
    m = models_data(cfg, store)
    assert m["current"] is None and "no usable duration model" in m["problem"]
    assert models_text(m)[0].startswith("duration model: none usable") and "!" in "\n".join(models_text(m))


def test_models_and_explain_describe_the_fit_that_made_the_model_not_a_later_rejected_one(tmp_path):
    """A review (28 November 2026): a rejected or skipped refit logs the current version too, and
    its time, training size and the rejected candidate's holdout were shown as the model's."""
    from lucidd.admin_cli import models_data

    cfg, store, d = _daemon_with_a_model(tmp_path)
    est, src = _estimated(store, d, 9001, "u3", 2)
    before_models, before_explain = models_data(cfg, store)["current"], \
        explain_data(cfg, store, 9001)["order"]["explanation"]["reason"]
    v = before_models["version"]
    store.add_model_version("duration", v, NOW + 7 * 86400, "rejected", {
        "time": NOW + 7 * 86400, "trigger": "scheduled", "decision": "rejected", "version": v, "train_rows": 999,
        "metrics": {"candidate": {"n": 77, "mae_s": 9e9, "median_abs_log_error": 3.0, "mae_log1p": 3.0,
                                  "spearman": -0.5}}})
    after = models_data(cfg, store)
    assert after["current"] == before_models and after["refits"][0]["decision"] == "rejected"
    assert explain_data(cfg, store, 9001)["order"]["explanation"]["reason"] == before_explain
