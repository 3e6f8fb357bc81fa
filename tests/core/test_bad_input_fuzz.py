"""Bad input found by fuzzing lucidctl (28 November 2026): each gave a traceback, a hang, a false
message or a destructive write before its fix; now a one-line error (or a counted drop)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from lucidd.cli import main
from lucidd.cluster import load_vc_config, size_cluster_from_trace
from lucidd.errors import ConfigError, TraceError
from lucidd.estimates import load_estimates

SACCT = Path(__file__).resolve().parent / "data" / "sacct_2205.json"  # the test cluster's own
TRACE = "job_id,user,vc,submit_time,duration,gpu_num\n1,u,a,0,100,1\n2,u,a,10,100,2\n3,u,b,20,50,1\n4,u,b,30,50,1\n"


def _trace(tmp_path, text=TRACE, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_a_vc_config_with_a_trailing_comma_on_every_row_is_read(tmp_path):
    """A spreadsheet export: pandas took the first column as the index and the run died (TypeError)."""
    p = tmp_path / "vcs.csv"
    p.write_text("vc,nodes\na,2,\nb,1,\n")
    spec = load_vc_config(p)
    assert {n: v.nodes for n, v in spec.vcs.items()} == {"a": 2, "b": 1}
    p.write_text("vc,nodes\na,2,5\n")  # a value past the header: said, not shifted
    with pytest.raises(ConfigError, match="row 2 has 3 fields, the header 2"):
        load_vc_config(p)


def test_an_estimates_file_with_trailing_commas_is_read_and_a_longer_row_refused(tmp_path):
    p = tmp_path / "est.csv"
    p.write_text("job_id,estimate_s\n1,10,\n2,5,\n")
    assert load_estimates(p) == {"1": 10.0, "2": 5.0}
    p.write_text("job_id,estimate_s\n1,10,99\n")  # the ids came from the second field
    with pytest.raises(TraceError, match="row 2 has 3 fields"):
        load_estimates(p)


def test_import_sacct_refuses_to_replace_a_pipe_a_link_or_its_own_input(tmp_path, capsys):
    src = tmp_path / "sacct.json"
    src.write_text(SACCT.read_text())
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "target.csv")
    for out, says in ((fifo, "not a plain file"), (link, "not a plain file"), (src, "is the input --json-file")):
        assert main(["import-sacct", "--json-file", str(src), "--out", str(out)]) == 2
        assert says in capsys.readouterr().err
    assert fifo.exists() and not fifo.is_file() and link.is_symlink()
    assert src.read_text() == SACCT.read_text()


def test_a_trace_or_vc_config_through_a_pipe_is_said_to_be_one(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["simulate", "--trace", str(fifo), "--out", str(tmp_path / "o")]) == 2
    assert "is a pipe or a device, not a file" in capsys.readouterr().err
    assert main(["simulate", "--trace", _trace(tmp_path), "--vc-config", str(fifo), "--out", str(tmp_path / "o")]) == 2
    assert "--vc-config" in (err := capsys.readouterr().err) and "is a pipe or a device" in err


def test_a_write_error_is_one_line(tmp_path, capsys, monkeypatch):
    """A full disk: the OSError came out as a traceback."""
    import lucidd.experiment as experiment

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "o" / "jobs_fifo.csv"))

    monkeypatch.setattr(experiment.pd.DataFrame, "to_csv", full)
    assert main(["simulate", "--trace", _trace(tmp_path), "--policies", "fifo", "--no-plots", "--no-progress",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err and err.count("\n") == 1


def test_a_cluster_sized_from_the_trace_is_capped(tmp_path):
    """A bogus GPU count (1e9) sized 125 million nodes and the run never ended."""
    jobs = pd.DataFrame({"vc": ["a", "a"], "job_id": ["1", "2"], "submit_time": [0, 10], "duration": [10, 10],
                         "gpu_num": [10**9, 1]})
    with pytest.raises(ConfigError, match="needs 125,000,000 nodes|more than the 100,000"):
        size_cluster_from_trace(jobs)


def test_a_zstd_trace_without_the_package_is_a_one_line_error(tmp_path, capsys):
    pytest.importorskip("pandas")
    try:
        import zstandard  # noqa: F401
        pytest.skip("zstandard is installed here: .zst traces are read")  # not in lucidd's install
    except ImportError:
        pass
    p = tmp_path / "t.csv.zst"
    p.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
    assert main(["simulate", "--trace", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "decompress it first" in capsys.readouterr().err


def test_one_stray_millisecond_submit_time_does_not_ask_for_gigabytes_of_bins():
    from models.base import ModelError
    from models.throughput import bin_arrivals

    jobs = pd.DataFrame({"submit_time": [1_600_000_000, 1_600_000_600_000], "gpu_num": [1, 1]})
    with pytest.raises(ModelError, match="stray submit time"):
        bin_arrivals(jobs)


@pytest.mark.parametrize("rule,says", [("1e308", "at most 87600"), ("x1e308", "from 1 to 1000")])
def test_a_huge_limit_rule_is_refused(rule, says):
    from lucidd.policies.slurm_backfill import parse_limit_rule

    with pytest.raises(ConfigError, match=says):
        parse_limit_rule(rule)


def test_damaged_sacct_json_is_one_line_or_a_counted_drop(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["import-sacct", "--json-file", str(deep), "--out", str(tmp_path / "a.csv")]) == 2
    assert "cannot read it as JSON" in capsys.readouterr().err
    digits = tmp_path / "digits.json"
    digits.write_text('{"jobs": [{"job_id": ' + "9" * 5000 + "}]}")
    assert main(["import-sacct", "--json-file", str(digits), "--out", str(tmp_path / "a.csv")]) == 2
    assert "cannot read it as JSON" in capsys.readouterr().err


def test_a_header_only_estimates_file_is_said_to_cover_no_job(tmp_path, capsys):
    est = tmp_path / "est.csv"
    est.write_text("job_id,estimate_s\n")
    assert main(["simulate", "--trace", _trace(tmp_path), "--estimates", str(est), "--policies", "qssf",
                 "--no-plots", "--no-progress", "--out", str(tmp_path / "o")]) == 0
    assert "estimates file lacks 4 job(s)" in capsys.readouterr().out


def test_a_tuning_gain_of_zero_over_zero_is_one_not_infinity():
    from orchestrator.tuner import _ratio

    assert _ratio(0, 0) == 1.0 and _ratio(10, 5) == 2.0


def test_a_sqlite_url_with_options_names_its_file():
    """`lucidctl status` looked for a file named `lucidd.db?timeout=30` and said there was no database."""
    from lucidd.live.store import sqlite_file

    assert sqlite_file("sqlite:////var/lib/lucidd/lucidd.db?timeout=30") == "/var/lib/lucidd/lucidd.db"
    assert sqlite_file("sqlite:////var/lib/lucidd/lucidd.db") == "/var/lib/lucidd/lucidd.db"


def test_bad_rows_before_start_are_counted(tmp_path, capsys):
    """The training history's unreadable rows were dropped without a word."""
    p = _trace(tmp_path, "job_id,user,vc,gpu_num,submit_time,duration\n1,u,a,1,0,100\n2,u,a,x,5,100\n"
                         "3,u,a,1,10,abc\n4,u,a,1,20,100\n5,u,a,2,30,50\n")
    assert main(["simulate", "--trace", p, "--start", "20", "--policies", "fifo", "--no-plots", "--no-progress",
                 "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "before --start that train the models: dropped 1 invalid duration, 1 invalid gpu_num (" in out, out


def test_a_damaged_sinfo_node_is_skipped_and_a_partition_string_read_whole(tmp_path, capsys):
    sinfo = tmp_path / "sinfo.json"
    sinfo.write_text(json.dumps({"nodes": [{"name": ["gpu1"], "gres": "gpu:8", "partitions": ["research"]},
                                           {"name": "gpu2", "gres": "gpu:8", "partitions": "research"}]}))
    out = tmp_path / "t.csv"
    assert main(["import-sacct", "--json-file", str(SACCT), "--sinfo-json", str(sinfo), "--vc-config-out",
                 str(tmp_path / "vcs.csv"), "--out", str(out)]) == 0, capsys.readouterr().err
    vcs = (tmp_path / "vcs.csv").read_text()
    assert "research,1," in vcs, vcs


def test_a_compressed_estimates_file_is_still_read(tmp_path):
    """A review of the change: the row-width check read a .gz file's bytes as text."""
    import gzip

    p = tmp_path / "est.csv.gz"
    with gzip.open(p, "wt") as f:
        f.write("job_id,estimate_s\n" + "".join(f"{i},{i + 1}\n" for i in range(2000)))
    est = load_estimates(p)
    assert len(est) == 2000 and est["7"] == 8.0
