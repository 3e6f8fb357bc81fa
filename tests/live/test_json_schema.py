"""`lucidctl --json status | queue | explain job ID` against their documented schema (docs/cli.md).

Others script against these objects (the brief: keep them stable; extend, don't rename). Every key
the commands print must be documented in its section of docs/cli.md, and every top-level key the
section names must be printed, so that a key added, renamed or dropped in one place and not the
other fails here rather than in an admin's script.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from lucidd.admin_cli import explain_data, models_data, queue_data, status_data
from lucidd.errors import LucidError

from .test_reconcile_recovery import cluster, run_cycles, start_profiling_run  # noqa: F401 (fixture)

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

# Objects keyed by data, not by names: their keys are phases, Slurm commands, scontrol fields.
DATA_KEYED = {"jobs_by_phase", "slurm_calls", "args"}


def _section(start: str) -> str:
    """The part of docs/cli.md from `start`: its paragraph, and the list that follows when the
    paragraph ends with a colon."""
    text = CLI_MD.read_text()
    i = text.index(start)
    out = []
    for block in re.split(r"\n\n", text[i:]):
        out.append(block)
        if not block.lstrip().startswith("-") and out[:-1]:
            break
        if len(out) == 1 and not block.rstrip().endswith(":"):
            break
    return "\n\n".join(out)


def _documented(section: str) -> set:
    return set(re.findall(r"`([a-z_][a-z0-9_]*)`", section))


def _keys(obj) -> set:
    """Every key of obj, nested ones included (a list's dicts by their union), as bare names."""
    found = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            found.add(k)
            if k not in DATA_KEYED:
                found |= _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            found |= _keys(v)
    return found


# Backticked words of each section that are values or references, not keys: phases, outcomes,
# action kinds and statuses, and other commands' names.
VALUES = {
    "status": {"inbox", "profiling", "requeued", "released"},
    "queue": {"pending", "admitted", "requeued", "released", "finished", "skipped", "abandoned", "default",
              "explain", "queue", "status", "jobs_needing_attention", "users"},
    "models": {"first", "scheduled", "retry", "drift", "manual", "swapped", "rejected", "skipped", "failed",
               "null", "explain", "decider", "continuous", "nominal"},
    "actions": {"profile", "requeue", "release", "sitefactor", "signal", "shards", "close_inbox", "planned", "applied",
                "failed", "dry-run", "skipped", "since", "kind", "status", "user", "limit"},
    "explain": {"profile", "release", "requeue", "sitefactor", "signal", "shards", "applied", "failed", "planned", "done",
                "jobs_by_phase", "ebm", "fallback", "default", "none", "unavailable", "estimate", "dir",
                "history_days", "explain", "null"},
}


def _check(command: str, printed: set, section: str):
    documented = _documented(section)
    assert printed - documented == set(), f"printed by {command}, not in docs/cli.md"
    assert documented - printed - VALUES[command] == set(), f"in docs/cli.md, not printed by {command}"


def _a_job_through_profiling(cluster):  # noqa: F811
    cfg, clock, slurm, store, lucidd = cluster(tprof_s=600, long_tprof_s=0, skip_when_free=False)
    rec = lucidd()
    start_profiling_run(rec, clock, slurm, 41)
    run_cycles(rec, clock, 620)  # requeued at Tprof, then released to main
    slurm.submit(42, partition="main", gpus=1)
    slurm.submit(43, partition="mian", gpus=1)  # a partition Slurm refuses: needs attention
    run_cycles(rec, clock, 30)
    store.add_model_version("duration", 1, int(clock.t), "first fit", {})
    store.set_meta("last_database_outage", '{"from": 1, "to": 2, "seconds": 1, "error": "gone"}')
    store.set_meta("other_scheduler", '{"at": 1, "jobs_last_hour": 2, "last_job": 7}')
    store.create_gpu_profiles()
    store.save_gpu_profiles([SimpleNamespace(job_id=41, partition="profiling", node="gpu1", first_t=int(clock.t) - 600,
                                             last_t=int(clock.t) - 10, samples=60, util_samples=60, gpu_util=71.5,
                                             gmem_util=30.0, gmem_max_mib=10240.0, gpus={0})])
    store.save_gpu_node("gpu1", int(clock.t) - 30, 8, 24576.0, "FakeGPU", "535.183.01")
    return cfg, clock, store


def test_status_prints_what_docs_cli_md_documents(cluster):  # noqa: F811
    cfg, clock, store = _a_job_through_profiling(cluster)
    d = status_data(cfg, store, now=clock.t)
    # the nested objects are filled, so that their keys are checked too
    assert d["last_cycle"] and d["jobs_needing_attention"] and d["models"] and d["last_database_outage"]
    assert d["other_scheduler"] == {"at": 1, "jobs_last_hour": 2, "last_job": 7}
    assert d["gpu_samplers"]["gpu_memory_mib"] == {"smallest": 24576.0, "largest": 24576.0}
    rec = d["records"]
    assert rec["jobs"] == 3 and rec["ended_jobs"] == 0 and rec["oldest_ended_job_end"] is None, rec
    assert rec["actions"] >= 4 and rec["cycles"] > 60 and rec["keep_days"] == 180 and rec["sqlite_bytes"] > 0
    _check("status", _keys(d), _section("`--json status` prints one object:"))


def test_queue_prints_what_docs_cli_md_documents(cluster):  # noqa: F811
    cfg, clock, store = _a_job_through_profiling(cluster)
    d = queue_data(cfg, store)
    section = _section("`--json queue` prints")
    assert '`{"inbox": [...], "profiling": [...], "pending": [...], "users": ...}`' in section
    assert set(d) == {"inbox", "profiling", "pending", "users"} and d["inbox"] and d["pending"]
    assert d["users"] is None
    _check("queue", _keys(d["inbox"] + d["profiling"] + d["pending"]), section)


def test_explain_prints_what_docs_cli_md_documents(cluster):  # noqa: F811
    cfg, clock, store = _a_job_through_profiling(cluster)
    d = explain_data(cfg, store, 41)
    assert d["actions"] and d["gpu_usage"] and d["profiling"]["outcome"] == "released"
    assert d["order"]["explanation"]["kind"] == "default", d["order"]  # no history read in this cluster
    _check("explain", _keys(d), _section("`--json explain job ID` prints one object:")
           + _section("`order.explanation` is why"))


def test_models_prints_what_docs_cli_md_documents(tmp_path):
    from .test_live_explain import _daemon_with_a_model

    cfg, store, _ = _daemon_with_a_model(tmp_path)
    d = models_data(cfg, store)
    assert d["current"] and d["current"]["terms"] and d["refits"]
    d["current"]["holdout"] = {"n": 10, "mae_s": 1.0, "median_abs_log_error": 0.5, "mae_log1p": 0.6,
                               "spearman": 0.7}  # as a refit with held-out jobs records it
    _check("models", _keys(d), _section("`--json models` prints"))


def test_queue_of_some_users_keeps_their_ranks_among_all_jobs(cluster, capsys):  # noqa: F811
    """`lucidctl queue -u LIST` / `--me`: a user sees their own jobs where they stand in the whole
    partition's order, as `squeue -u` shows a job's place without the others."""
    import pwd

    from lucidd.cli import main as lucidctl

    cfg, clock, slurm, store, lucidd = cluster()
    rec = lucidd()
    me = pwd.getpwuid(os.getuid()).pw_name
    for job_id, user, gpus in ((51, "alice", 1), (52, "bob", 2), (53, "alice", 4), (54, me, 8)):
        slurm.submit(job_id, partition="main", gpus=gpus, user=user, comment="lucid:noprofile")
    run_cycles(rec, clock, 30)
    everyone = {r["job_id"]: r["rank"] for r in queue_data(cfg, store)["pending"]}
    assert sorted(everyone) == [51, 52, 53, 54] and None not in everyone.values(), everyone
    d = queue_data(cfg, store, {"alice"})
    assert d["users"] == ["alice"] and [r["job_id"] for r in d["pending"]] == [51, 53]
    assert {r["job_id"]: r["rank"] for r in d["pending"]} == {51: everyone[51], 53: everyone[53]}
    config = Path(cfg.daemon.state_dir) / "lucidctl.toml"
    config.write_text(f'[daemon]\nstate_dir = "{cfg.daemon.state_dir}"\n\n[database]\nurl = "{cfg.database.url}"\n')
    for argv, users, ids in ((["-u", "bob,alice"], ["alice", "bob"], [51, 52, 53]), (["--me"], [me], [54]),
                             (["--user", "carol"], ["carol"], [])):
        assert lucidctl(["--json", "queue", "--config", str(config), *argv]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["users"] == users and [r["job_id"] for r in out["pending"]] == ids, (argv, out)
    assert lucidctl(["queue", "--config", str(config), "--me"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == f"jobs of {me} (ranks among all jobs)" and any(f"#{everyone[54]} " in t and "54" in t
                                                                       for t in text), text
    assert lucidctl(["queue", "--config", str(config), "-u", " , "]) == 2
    assert "--user: no user name given" in capsys.readouterr().err


def test_models_plot_writes_and_prints_what_docs_cli_md_documents(tmp_path, capsys):
    """`lucidctl models --plot DIR`: the PNGs, the shape data, and `--json`'s `plots`, as documented."""
    import lucidd.admin_cli as admin

    from .test_live_explain import _daemon_with_a_model

    cfg, store, _ = _daemon_with_a_model(tmp_path)

    class Args:
        command, json, plot = "models", True, str(tmp_path / "plots")

    orig = admin._open
    admin._open = lambda args: (cfg, store)
    try:
        assert admin.cmd_live(Args()) == 0
        d = json.loads(capsys.readouterr().out)
        Args.json = False
        assert admin.cmd_live(Args()) == 0
        text = capsys.readouterr().out
    finally:
        admin._open = orig
    plots = d["plots"]
    version = d["current"]["version"]
    assert plots["version"] == version and plots["data"].endswith(f"duration_v{version}_shapes.json")
    assert plots["files"][0].endswith(f"duration_v{version}_terms.png")
    assert len(plots["files"]) == 1 + len(d["current"]["terms"])
    for f in plots["files"]:
        with open(f, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n", f
    with open(plots["data"]) as fh:
        shapes = json.load(fh)  # strict JSON: no NaN
    assert [t["term"] for t in shapes["terms"]] == [t["term"] for t in d["current"]["terms"]]
    section = _section("`lucidctl models --plot DIR` also writes")
    _check("models", _keys(d["plots"]) | {"plots"} | _keys(shapes), section)
    assert f"shape functions of duration model v{version}: " in text.splitlines()[-1]


def test_models_plot_without_a_model_says_so(tmp_path, capsys):
    from lucidd.cli import main as lucidctl

    from lucidd.live.config import config_from_dict
    from lucidd.live.store import Store

    cfg = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "models": {"dir": str(tmp_path / "models")}})
    Store(cfg.database.url).create().set_meta("lucidd_version", "test")
    config = tmp_path / "lucidd.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n\n[models]\ndir = "{tmp_path / "models"}"\n')
    assert lucidctl(["models", "--config", str(config), "--plot", str(tmp_path / "plots")]) == 2
    assert "--plot: no duration model to plot" in capsys.readouterr().err
    assert not (tmp_path / "plots").exists()


def test_actions_prints_what_docs_cli_md_documents(cluster, capsys):  # noqa: F811
    """`lucidctl actions`: the audit log, newest first, filtered as asked, as docs/cli.md says."""
    import time as _time

    from lucidd.admin_cli import actions_data, parse_since
    from lucidd.cli import main as lucidctl

    cfg, clock, store = _a_job_through_profiling(cluster)
    d = actions_data(cfg, store, 0)
    kinds = [a["kind"] for a in d["actions"]]
    assert {"profile", "requeue", "release", "sitefactor"} <= set(kinds), kinds
    assert [a["created_at"] for a in d["actions"]] == sorted((a["created_at"] for a in d["actions"]), reverse=True)
    assert any(a["status"] == "failed" and a["error"] for a in d["actions"])  # the move to 'mian'
    _check("actions", _keys(d), _section("`lucidctl [--json] actions"))
    only = actions_data(cfg, store, 0, kinds=["requeue"], statuses=["applied"])
    assert [a["job_id"] for a in only["actions"]] == [41] and not only["truncated"]
    assert actions_data(cfg, store, 0, limit=2)["truncated"]
    assert actions_data(cfg, store, int(clock.t) + 1)["actions"] == []
    assert actions_data(cfg, store, 0, users=["nobody-here"])["actions"] == []
    now = _time.time()
    assert parse_since("2h", now) == int(now - 7200) and parse_since("1700000000", now) == 1700000000
    assert parse_since("2026-11-28", now) == int(_time.mktime(_time.strptime("2026-11-28", "%Y-%m-%d")))
    assert parse_since("0", now) == 0 and parse_since("99999999d", now) == 0
    for bad in ("20261128", "9" * 20, "9" * 400 + "d", "-1h", "2026-13-45", ""):
        with pytest.raises(LucidError, match="--since"):
            parse_since(bad, now)
    with pytest.raises(LucidError, match="--limit"):
        actions_data(cfg, store, 0, limit=10**20)
    config = Path(cfg.daemon.state_dir) / "lucidctl.toml"
    config.write_text(f'[daemon]\nstate_dir = "{cfg.daemon.state_dir}"\n\n[database]\nurl = "{cfg.database.url}"\n')
    assert lucidctl(["actions", "--config", str(config), "--since", "0", "--kind", "release,requeue"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("lucidd's actions (all that is kept)") and " requeue " in text and " release " in text, text
    assert "profile " not in text.replace("profiled", "")
    assert lucidctl(["actions", "--config", str(config), "--since", "yesterday"]) == 2
    assert "--since 'yesterday'" in capsys.readouterr().err
