"""Bad input found by a review on 27 November 2026: each gets a clear error or a documented
fallback, where it was a traceback, a wrong refusal or a silently wrong result."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from lucidd.cli import main
from lucidd.cluster import load_vc_config
from lucidd.errors import ConfigError, LucidError
from lucidd.traces import sample_trace_path

GOOD = "job_id,user,vc,gpu_num,submit_time,duration\n1,u,a,1,0,100\n2,u,a,2,10,50\n3,v,a,8,20,300\n"


def simulate(tmp_path, *args) -> int:
    return main(["simulate", "--out", str(tmp_path / "o"), "--no-progress", "--no-plots", *args])


@pytest.mark.parametrize("flag", ["--start", "--end"])
def test_a_nan_window_bound_is_refused_not_ignored(tmp_path, capsys, flag):
    assert simulate(tmp_path, flag, "nan", "--policies", "fifo") != 0
    assert "must be a finite number" in capsys.readouterr().err


def test_a_window_starting_at_the_first_submission_has_no_history_and_runs(tmp_path):
    """The jobs before --start train the models; when there are none the run goes on without
    history (it said "no jobs left" about the history, as if the window were empty)."""
    trace = tmp_path / "t.csv"
    trace.write_text(GOOD)
    assert simulate(tmp_path, "--trace", str(trace), "--nodes", "1", "--start", "0", "--end", "15",
                    "--policies", "fifo,slurm") == 0
    assert list(pd.read_csv(tmp_path / "o" / "summary.csv")["jobs"]) == [2, 2]


def test_baselines_run_on_4_gpu_nodes_with_default_lucid_options(tmp_path):
    """Nprof's default (8) is larger than one 4-GPU profiling node: that refused even `--policies
    fifo,slurm`; the default now becomes the profiling partition's GPUs (a given --nprof is still
    checked)."""
    for policies in ("fifo,slurm", "lucid", "lucid-standalone"):
        assert simulate(tmp_path, "--nodes", "16", "--gpus-per-node", "4", "--policies", policies) == 0, policies


def test_a_fractional_node_count_is_refused(tmp_path):
    cfg = tmp_path / "vc.csv"
    cfg.write_text("vc,nodes\nvcA,2.5\n")
    with pytest.raises(ConfigError, match="whole numbers"):
        load_vc_config(cfg)
    cfg.write_text("vc,nodes,gpus_per_node\nvcA,2.0,1000\n")
    with pytest.raises(ConfigError, match="at most 64"):
        load_vc_config(cfg)


def test_a_vc_named_like_a_missing_value_is_a_vc(tmp_path):
    cfg = tmp_path / "vc.csv"
    cfg.write_text("vc,nodes\nNA,2\nnull,3\n")
    assert {name: vc.nodes for name, vc in load_vc_config(cfg).vcs.items()} == {"NA": 2, "null": 3}


def test_a_truncated_compressed_trace_is_a_clear_error(tmp_path, capsys):
    whole = gzip.compress(open(sample_trace_path(), "rb").read())
    cut = tmp_path / "t.csv.gz"
    cut.write_bytes(whole[:200])
    assert simulate(tmp_path, "--trace", str(cut), "--policies", "fifo") != 0
    err = capsys.readouterr().err
    assert "t.csv.gz" in err and "Traceback" not in err


def test_explain_refuses_a_job_id_slurm_cannot_give(tmp_path):
    from lucidd.admin_cli import explain_data
    from lucidd.live.store import Store

    store = Store(f"sqlite:///{tmp_path / 'db' / 'lucidd.db'}").create()
    for bad in ("99999999999999999999999", "0", "-3"):
        with pytest.raises(LucidError, match="not a Slurm job id"):
            explain_data(None, store, bad)
    # int() reads "4_4" as 44: Slurm's array task notation explained another job (the admin trial)
    for task in ("4_4", "36+1"):
        with pytest.raises(LucidError, match="array task or a heterogeneous job component"):
            explain_data(None, store, task)
    for bad in ("4_", "1_000", "abc", "²", "4.0"):
        with pytest.raises(LucidError):
            explain_data(None, store, bad)


def test_a_decider_that_is_not_a_class_is_a_config_error():
    from lucidd.live.reconcile import load_decider

    with pytest.raises(ConfigError, match="cannot load 'os:path'"):
        load_decider("os:path", None)


def test_a_database_folder_that_cannot_be_made_is_a_store_error(tmp_path):
    from lucidd.live.store import Store, StoreError

    (tmp_path / "afile").write_text("")
    with pytest.raises(StoreError, match="cannot be made"):
        Store(f"sqlite:///{tmp_path / 'afile' / 'sub' / 'lucidd.db'}")


@pytest.mark.parametrize("command", [["status"], ["queue"], ["explain", "job", "5"]])
def test_read_only_commands_do_not_create_a_database(tmp_path, capsys, command):
    cfg = tmp_path / "lucidd.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    assert main([*command, "--config", str(cfg)]) != 0
    assert "no lucidd database at" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()
