"""The rest of the 27 November 2026 bad-input review: a stray quote, cells that read as "no
value", workload metrics out of range, estimate files, cluster sizes, a BOM in the config,
non-UTF-8 rows, and two argparse messages that pointed the wrong way."""

from __future__ import annotations

import gzip
import json

import pytest

from lucidd.cli import main
from lucidd.cluster import MAX_NODES, load_vc_config
from lucidd.errors import ConfigError, TraceError
from lucidd.estimates import load_estimates
from lucidd.live.config import load_config
from lucidd.traces import load_trace

HEAD = "job_id,user,vc,submit_time,duration,gpu_num,name\n"
ROWS = ["a,u,v,1,10,1,x", "b,u,v,2,10,1,y", "c,u,v,3,10,1,z", "d,u,v,4,10,1,w"]


def trace(tmp_path, text: str, name: str = "t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("bad", ['b,"u,v,2,10,1,y', 'b,u,v,2,10,1,"y'])
def test_a_stray_quote_costs_one_row_not_the_rest_of_the_file(tmp_path, bad):
    """Unclosed, the quote swallowed every later line as one field, and --skip-bad-rows counted
    that as a single dropped row."""
    p = trace(tmp_path, HEAD + "\n".join([ROWS[0], bad, *ROWS[2:]]) + "\n")
    with pytest.raises(TraceError, match="stray") as e:
        load_trace(p)
    assert e.value.row == 3
    t = load_trace(p, skip_bad_rows=True)
    assert list(t.jobs["job_id"]) == ["a", "c", "d"] and list(t.jobs["row"]) == [2, 4, 5]
    assert t.dropped == {"unbalanced quote": 1}


def test_two_stray_quotes_do_not_merge_the_rows_between_them(tmp_path):
    p = trace(tmp_path, HEAD + "\n".join([ROWS[0], 'b,"u,v,2,10,1,y', ROWS[2], 'd,u",v,4,10,1,w']) + "\n")
    t = load_trace(p, skip_bad_rows=True)
    assert list(t.jobs["job_id"]) == ["a", "c", "d"] and t.dropped == {"unbalanced quote": 1}


def test_a_quoted_name_over_two_lines_is_still_one_job(tmp_path):
    p = trace(tmp_path, HEAD + 'a,u,v,1,10,1,"two\nlines"\n' + ROWS[1] + "\n")
    t = load_trace(p)
    assert list(t.jobs["name"]) == ["two\nlines", "y"] and list(t.jobs["row"]) == [2, 4]


def test_names_that_spell_no_value_are_names(tmp_path):
    p = trace(tmp_path, HEAD + "NA,null,None,1,10,1,NaN\n" + ROWS[1] + "\n")
    jobs = load_trace(p).jobs
    assert jobs.iloc[0][["job_id", "user", "vc", "name"]].tolist() == ["NA", "null", "None", "NaN"]


def test_in_number_columns_no_value_spellings_are_empty_cells(tmp_path):
    p = trace(tmp_path, HEAD + "a,u,v,1,NA,1,x\n" + ROWS[1] + "\n")
    with pytest.raises(TraceError, match=r"missing duration \('NA'\)"):
        load_trace(p)
    assert load_trace(p, skip_bad_rows=True).dropped == {"missing duration": 1}
    w = ("job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration,model,dataset,batchsize,amp,speed,"
         "gpu_util,gmem_util,gmem\n1,u,v,1,1,COMPLETED,1,10,m,d,64,1,100,50,15,nan\n")
    assert load_trace(trace(tmp_path, w, "w.csv")).jobs["gmem"].isna().all()


@pytest.mark.parametrize("column,value", [("gpu_util", "0.5e3"), ("gmem_util", "-1"), ("gmem", "1e12"),
                                          ("amp", "2"), ("amp", "0.5"), ("speed", "-3"), ("batchsize", "-64")])
def test_workload_metrics_out_of_range_are_bad_rows(tmp_path, column, value):
    cols = ["batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem"]
    good = {"batchsize": "64", "amp": "1", "speed": "100", "gpu_util": "50", "gmem_util": "15", "gmem": "3000"}
    bad = dict(good, **{column: value})
    head = "job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration,model,dataset," + ",".join(cols) + "\n"
    p = trace(tmp_path, head + "".join(f"{i},u,v,1,1,COMPLETED,{i},10,m,d," + ",".join(r[c] for c in cols) + "\n"
                                       for i, r in ((1, good), (2, bad), (3, good))))
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.row == 3 and e.value.column == column
    t = load_trace(p, skip_bad_rows=True)
    assert list(t.jobs["job_id"]) == ["1", "3"] and t.dropped == {f"invalid {column}": 1}


def test_a_non_utf8_byte_is_named_by_its_line(tmp_path):
    text = HEAD + "a,u,v,1,10,1,x\n" * 3000 + "b,u\xe9,v,2,10,1,y\n"
    for name, data in (("t.csv", text.encode("latin-1")), ("t.csv.gz", gzip.compress(text.encode("latin-1")))):
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(TraceError, match="not a UTF-8") as e:
            load_trace(p)
        assert e.value.row == 3002


@pytest.mark.parametrize("text,match", [
    ("job_id,estimate_s\n1,10\n2,inf\n", "not a finite number"),
    ("job_id,estimate_s\n1,10\n2,5\n1,11\n", "two different estimates"),
    ("job_id,estimate_s\n1,10\n,5\n", "missing job_id"),
])
def test_estimates_must_be_finite_and_one_per_job(tmp_path, text, match):
    p = trace(tmp_path, text, "e.csv")
    with pytest.raises(TraceError, match=match) as e:
        load_estimates(p)
    assert e.value.row in (3, 4)


def test_a_repeated_estimate_line_and_an_id_named_na_are_fine(tmp_path):
    p = trace(tmp_path, "job_id,estimate_s\n1,10\nNA,5\n1,10\n", "e.csv")
    assert load_estimates(p) == {"1": 10.0, "NA": 5.0}


def test_a_cluster_too_big_to_simulate_is_refused_before_any_work(tmp_path, capsys):
    out = ["--out", str(tmp_path / "o"), "--no-plots", "--no-progress"]
    assert main(["simulate", "--nodes", "1000000000", *out]) == 2
    assert "--nodes 1000000000: must be from 1 to 100000" in capsys.readouterr().err
    assert main(["simulate", "--nodes", str(MAX_NODES // 10 + 1), "--scale-nodes", "10", *out]) != 0
    assert "at most 100,000 in all" in capsys.readouterr().err
    cfg = trace(tmp_path, f",num\na,{MAX_NODES}\nb,1\n", "vc.csv")
    with pytest.raises(ConfigError, match="row 3: .* at most 100,000 in all"):
        load_vc_config(cfg)


def test_a_config_with_a_byte_order_mark_loads(tmp_path):
    p = tmp_path / "lucidd.toml"
    p.write_bytes(b"\xef\xbb\xbf[database]\nurl = \"sqlite:///" + str(tmp_path / "x.db").encode() + b"\"\n")
    assert load_config(str(p)) is not None


def test_json_after_the_command_is_taken(tmp_path, capsys):
    """`lucidctl status --json` was refused as an unknown argument, as if --json did not exist."""
    rc = main(["simulate", "--json", "--policies", "fifo", "--out", str(tmp_path / "o"), "--no-plots",
               "--no-progress"])
    assert rc == 0 and "summary" in json.loads(capsys.readouterr().out)


def test_explain_names_its_first_argument_for_what_it_is(capsys):
    with pytest.raises(SystemExit):
        main(["explain", "jbo", "1"])
    assert "explain jbo: only jobs can be explained so far: `lucidctl explain job ID`" in capsys.readouterr().err


# -- a review of broken traces (2 December 2026): figures silently wrong, and messages off by rows


def test_submit_times_in_milliseconds_are_refused(tmp_path):
    """Unix milliseconds read as seconds spread one job a minute over 1,700 years: nothing queued."""
    p = trace(tmp_path, HEAD + "a,u,v,1614585600000,10,1,x\nb,u,v,1614585660000,10,1,y\n")
    with pytest.raises(TraceError, match="milliseconds") as e:
        load_trace(p)
    assert e.value.row == 2
    assert len(load_trace(trace(tmp_path, HEAD + "a,u,v,1614585600,10,1,x\n", "s.csv"))) == 1  # seconds: fine


@pytest.mark.parametrize("duration", ["100000000000", "9007199254740000", str(367 * 86400)])
def test_a_duration_over_a_year_is_a_bad_row(tmp_path, duration):
    p = trace(tmp_path, HEAD + f"a,u,v,1,{duration},1,x\nb,u,v,2,10,1,y\n")
    with pytest.raises(TraceError, match="over a year"):
        load_trace(p)
    assert list(load_trace(p, skip_bad_rows=True).jobs["job_id"]) == ["b"]


def test_an_empty_vc_cell_is_said_in_the_report(tmp_path):
    """It puts the job in VC 'default', with a node of its own, and nothing said why."""
    t = load_trace(trace(tmp_path, HEAD + "a,u,v,1,10,1,x\nb,u,,2,10,1,y\nc,u\n", "v.csv"), skip_bad_rows=True)
    assert list(t.jobs["vc"]) == ["v", "default"] and t.vc_defaulted == 1
    assert "1 job(s) with an empty vc cell" in t.report() and "nodes of its own" in t.report()


def test_a_trailing_comma_on_some_rows_of_a_config_or_estimates_file_is_fine(tmp_path):
    """Allowed by the width check, the file then went to pandas as it was, which refused it."""
    vc = trace(tmp_path, "vc,nodes\na,1\nb,2,\n", "vc.csv")
    assert {n: v.nodes for n, v in load_vc_config(str(vc)).vcs.items()} == {"a": 1, "b": 2}
    est = trace(tmp_path, "job_id,estimate_s\n1,50\n2,60,\n", "est.csv")
    assert load_estimates(str(est)) == {"1": 50.0, "2": 60.0}


def test_config_and_estimates_errors_name_the_files_line(tmp_path):
    """Row numbers were the frame's index + 2: wrong after a blank line or a quoted line break."""
    with pytest.raises(ConfigError, match="row 4"):
        load_vc_config(str(trace(tmp_path, "vc,nodes\na,1\n\nb,x\n", "vc.csv")))
    with pytest.raises(TraceError) as e:
        load_estimates(str(trace(tmp_path, "job_id,estimate_s\n1,50\n\n\n2,abc\n", "e1.csv")))
    assert e.value.row == 5
    with pytest.raises(TraceError) as e:
        load_estimates(str(trace(tmp_path, 'job_id,estimate_s\n"1\n",50\n2,x\n', "e2.csv")))
    assert e.value.row == 4
