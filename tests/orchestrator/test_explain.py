"""`lucidctl explain job ID --sim-out DIR`: every simulated Lucid decision can be explained.

Packing decisions come from Lucid's own engine (`lucid-standalone`, which packs); `lucid` (Lucid as
lucidd runs it on Slurm) packs nothing and is explained by its SiteFactor rank, Slurm's start and the
profiling partition."""

import json
import shutil

import pandas as pd
import pytest

from lucidd.cli import main
from lucidd.traces import load_trace, sample_trace_path, sample_vc_config_path

DOCUMENTED_KEYS = {"job_id", "policy", "jobs_file", "origin", "job", "estimate", "packing", "profiler", "decision",
                   "warnings"}


def _simulate(out, *extra, policy="lucid-standalone"):
    assert main(["simulate", "--policies", policy, "--no-plots", "--no-progress", "--out", str(out), *extra]) == 0


@pytest.fixture(scope="module")
def sample_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    _simulate(out)
    return out


@pytest.fixture(scope="module")
def two_weeks(tmp_path_factory):
    """The sample followed by a shifted copy: the weekly refit fits an EBM for the second week."""
    d = tmp_path_factory.mktemp("two")
    first = pd.read_csv(sample_trace_path())
    second = first.assign(job_id=first["job_id"] + 10_000, submit_time=first["submit_time"] + 7 * 86_400)
    trace = d / "two.csv"
    pd.concat([first, second]).to_csv(trace, index=False)
    out = d / "out"
    _simulate(out, "--trace", str(trace), "--vc-config", str(sample_vc_config_path()))
    return trace, out


def _jobs(out, policy="lucid-standalone"):
    return pd.read_csv(out / f"jobs_{policy}.csv")


def _explain_json(capsys, out, job_id):
    capsys.readouterr()
    assert main(["--json", "explain", "job", str(job_id), "--sim-out", str(out)]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_saves_models_for_explain(sample_out):
    index = json.loads((sample_out / "models" / "index.json").read_text())
    assert index["jobs"] == 2500 and index["errors"] == []
    assert index["duration"]["fitted"] is False  # the 7-day sample ends before the first weekly refit
    assert index["packing"]["fitted"] is True and (sample_out / "models" / "packing.joblib").exists()
    feats = pd.read_csv(sample_out / "models" / "job_features.csv")
    assert len(feats) == 2500 and {"job_id", "estimate_source", "model_version", "gpu_util", "share_score"} <= set(feats)


def test_explain_packed_job(sample_out, capsys):
    jobs = _jobs(sample_out)
    joined = jobs[jobs["decision"].str.startswith("packed with job")].iloc[0]
    capsys.readouterr()
    assert main(["explain", "job", str(joined["job_id"]), "--sim-out", str(sample_out)]) == 0
    text = capsys.readouterr().out
    partner = str(int(joined["packed_with"]))
    assert f"packed onto the GPUs of running job {partner}" in text
    assert any(f"packing class: {c}" in text for c in ("Tiny", "Medium", "Jumbo"))
    assert "1. gpu_util" in text  # the tree path
    assert "fallback" in text and "never fitted" in text  # why there is no EBM estimate

    r = _explain_json(capsys, sample_out, joined["job_id"])
    assert r["decision"]["packed"] is True and r["decision"]["role"] == "joined"
    assert r["decision"]["packed_with"] == partner
    assert r["packing"]["kind"] == "tree" and r["packing"]["path"]
    assert r["packing"]["share_score"] == int(joined["share_score"])
    # the partner started exclusively, and is reported as the host of the pair
    host = _explain_json(capsys, sample_out, partner)
    assert host["decision"]["packed"] is True and host["decision"]["role"] in ("host", "joined")


def test_explain_job_that_finished_in_profiler(sample_out, capsys):
    jobs = _jobs(sample_out)
    job = jobs[jobs["profiler_finished"]].iloc[0]
    capsys.readouterr()
    assert main(["explain", "job", str(job["job_id"]), "--sim-out", str(sample_out)]) == 0
    text = capsys.readouterr().out
    assert "finished inside Tprof=200 s" in text and "finished in the profiler" in text
    r = _explain_json(capsys, sample_out, job["job_id"])
    assert r["profiler"] == {**r["profiler"], "profiled": True, "finished": True}
    assert r["decision"]["role"] == "profiler" and r["decision"]["packed"] is False


def test_explain_not_packed_job_says_why(sample_out, capsys):
    jobs = _jobs(sample_out)
    job = jobs[jobs["decision"].str.contains("not packed:") & jobs["packed_with"].isna()].iloc[0]
    r = _explain_json(capsys, sample_out, job["job_id"])
    assert r["decision"]["packed"] is False and r["decision"]["role"] == "exclusive"
    assert r["decision"]["not_packed_because"] == job["decision"].split("not packed:")[1].strip()


def test_json_has_documented_keys(sample_out, capsys):
    job_id = _jobs(sample_out)["job_id"].iloc[10]
    r = _explain_json(capsys, sample_out, job_id)
    assert set(r) == DOCUMENTED_KEYS and r["job_id"] == str(job_id) and r["policy"] == "lucid-standalone"
    job_keys = {"gpu_num", "submit_time", "start_time", "end_time", "queue_s", "jct_s", "duration"}
    assert set(r["job"]).issuperset(job_keys)
    assert {"seconds", "actual_s", "source", "model_version", "model_seconds", "kind", "reason", "intercept",
            "terms"} <= set(r["estimate"])
    assert {"share_score", "class", "kind", "path", "leaf", "reason", "features"} <= set(r["packing"])
    assert {"profiled", "finished", "start", "end", "tprof_s", "reason"} <= set(r["profiler"])
    assert {"reason", "packed", "role", "packed_with", "partner_class", "not_packed_because", "queue_rank",
            "starvation_guard", "summary"} <= set(r["decision"])
    assert r["warnings"] == []  # the saved models reproduce the estimate and class the run used


def test_unknown_job_and_missing_inputs_exit_2(sample_out, tmp_path, capsys):
    assert main(["explain", "job", "100000000", "--sim-out", str(sample_out)]) == 2
    err = capsys.readouterr().err
    assert "job 100000000 is not in" in err and "nearby ids: " in err and "Traceback" not in err
    assert main(["explain", "job", "1", "--sim-out", str(tmp_path / "nope")]) == 2
    assert "no such simulation output directory" in capsys.readouterr().err
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(sample_out / "jobs_lucid-standalone.csv", bare / "jobs_lucid.csv")
    assert main(["explain", "job", "100001", "--sim-out", str(bare)]) == 2
    assert "no saved models" in capsys.readouterr().err


def test_ebm_estimate_is_explained_with_its_contributions(two_weeks, capsys):
    trace, out = two_weeks
    jobs = _jobs(out)
    job = jobs[jobs["job_id"] > 110_000].iloc[50]
    r = _explain_json(capsys, out, job["job_id"])
    e = r["estimate"]
    assert e["kind"] == "ebm" and e["source"] == "ebm" and e["model_version"] == 1
    assert e["model_seconds"] == pytest.approx(job["estimate_s"], rel=1e-9)
    assert len(e["terms"]) > 5 and r["warnings"] == []

    # same explanation as the model gives from the raw job history
    from models.duration import DurationModel

    model = DurationModel.load(out / "models" / "duration_v1.joblib")
    history = load_trace(str(trace)).jobs
    row = history[history["job_id"].astype(str) == str(job["job_id"])]
    ref = model.explain(row, history_df=history)
    assert ref.prediction == pytest.approx(e["model_seconds"], rel=1e-9)
    assert [t.term for t in ref.terms] == [t["term"] for t in e["terms"]]
    assert [t.contribution for t in ref.terms] == pytest.approx([t["contribution"] for t in e["terms"]])

    capsys.readouterr()
    assert main(["explain", "job", str(job["job_id"]), "--sim-out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "source: EBM v1" in text and "top contributions" in text and e["terms"][0]["term"] in text


def test_aging_flag_reaches_the_policy_and_the_explanation(tmp_path, sample_out, capsys):
    # default: the decision text shows the aged priority with the 48 h half-life
    started = _jobs(sample_out)
    started = started[started["decision"].fillna("").str.contains("queue rank")]
    assert started["decision"].str.contains("halved per 48 h waited").all()
    out = tmp_path / "aging"
    _simulate(out, "--aging-halflife-s", "3600")
    assert json.loads((out / "models" / "index.json").read_text())["options"]["aging_halflife_s"] == 3600
    jobs = _jobs(out)
    row = jobs[jobs["decision"].fillna("").str.contains("queue rank")].iloc[0]
    assert "halved per 1 h waited" in row["decision"]
    r = _explain_json(capsys, out, row["job_id"])
    assert r["decision"]["queue_rank"] is not None


@pytest.fixture(scope="module")
def slurm_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("slurm")
    _simulate(out, "--end", str(2 * 86400), policy="lucid")
    return out


def test_explain_lucid_on_slurm(slurm_out, capsys):
    jobs = _jobs(slurm_out, "lucid")
    assert not jobs["shared"].any() and jobs["packed_with"].isna().all()
    requeued = jobs[jobs["profiled"] & ~jobs["profiler_finished"]].iloc[0]
    r = _explain_json(capsys, slurm_out, requeued["job_id"])
    assert r["policy"] == "lucid" and r["profiler"]["profiled"] and not r["profiler"]["finished"]
    assert "requeued" in r["profiler"]["reason"]
    d = r["decision"]
    assert d["role"] == "exclusive" and d["packed"] is False and d["queue_rank"] >= 1
    assert d["not_packed_because"] == "GPU packing is off ([packing] enabled = false)"
    assert "SiteFactor" in d["reason"] and "by Slurm" in d["reason"]
    done = jobs[jobs["profiler_finished"]].iloc[0]
    r = _explain_json(capsys, slurm_out, done["job_id"])
    assert r["decision"]["role"] == "profiler" and r["profiler"]["finished"]
    backfilled = jobs[jobs["decision"].fillna("").str.contains("backfilled by Slurm")]
    assert len(backfilled)  # the sample queues: Slurm backfills some of lucidd's lower-ranked jobs


def test_explain_gives_an_unprofiled_jobs_own_reason(slurm_out, capsys):
    """It said "the profiler was off for this run" for a job lucidd chose not to profile."""
    jobs = _jobs(slurm_out, "lucid")
    skipped = jobs[~jobs["profiled"].astype(bool) & jobs["profile_reason"].notna()].iloc[0]
    r = _explain_json(capsys, slurm_out, skipped["job_id"])
    assert r["profiler"]["reason"] == skipped["profile_reason"]
    assert "profiler was off" not in r["profiler"]["reason"]


def test_an_estimate_capped_at_the_jobs_own_time_limit_is_explained_without_a_false_warning(tmp_path, capsys):
    """A trace with users' limits (import-sacct writes them): the run caps the model's estimate at the
    job's limit, and explain said "models/ is from another run?" because it compared the run's
    estimate with the model's own figure (the review, 27 November 2026)."""
    rows = [{"job_id": f"j{i}", "submit_time": 60 * i, "duration": 100 + i, "gpu_num": 1} for i in range(30)]
    # its estimate (the mean of the finished one-GPU jobs, about 114 s) is above its own 60 s limit
    rows.append({"job_id": "short", "submit_time": 1900, "duration": 50, "gpu_num": 1, "time_limit": 60})
    trace = tmp_path / "t.csv"
    pd.DataFrame(rows).to_csv(trace, index=False)
    out = tmp_path / "out"
    _simulate(out, "--trace", str(trace), "--nodes", "1", policy="lucid")
    assert _jobs(out, "lucid").set_index("job_id").loc["short", "estimate_s"] == 60
    d = _explain_json(capsys, out, "short")
    assert d["warnings"] == [], d["warnings"]
    est = d["estimate"]
    assert est["seconds"] == 60 and est["capped_at_limit_s"] == 60 and est["model_seconds"] > 60
    assert "capped at the job's own time limit" in est["reason"]
    assert _explain_json(capsys, out, "j3")["estimate"]["capped_at_limit_s"] is None
