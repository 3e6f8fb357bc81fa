"""Trace loading and validation (lucidd.traces) and the bundled sample trace (lucidd.sample)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lucidd.errors import TraceError
from lucidd.traces import (
    CANONICAL_COLUMNS,
    FORMATS,
    VENUS_ORIGIN,
    WORKLOAD_COLUMNS,
    LoadedTrace,
    detect_format,
    load_trace,
    sample_trace_path,
    sample_vc_config_path,
)

from tests.conftest import SHARED  # noqa: E402  (the one place that knows where ../shared is)
VENUS = SHARED / "traces" / "helios_venus_sept2020_lucid" / "jobs.csv"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"

VENUS_HEADER = ("job_id,user,vc,gpu_num,cpu_num,state,submit_time,duration,"
                "dataset,model,batchsize,amp,speed,gpu_util,gmem_util,gmem")
HELIOS_HEADER = ("job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
                 "end_time,duration,queue")


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def venus_row(job_id, submit, duration=100, gpu=1, user="ua", vc="vcA"):
    return f"{job_id},{user},{vc},{gpu},2,COMPLETED,{submit},{duration},CIFAR-10,ResNet18,64,1,4000.5,60.0,30.0,3600.0"


def assert_error(exc: pytest.ExceptionInfo, path: Path, row: int | None, column: str | None):
    msg = str(exc.value)
    assert path.name in msg, msg
    if row is not None:
        assert f"row {row}" in msg, msg
        assert exc.value.row == row
    if column is not None:
        assert f"column '{column}'" in msg, msg
        assert exc.value.column == column
    return msg


# ------------------------------------------------------------------------------------------------
# format detection


def test_detect_format_each_format(tmp_path):
    assert detect_format(write(tmp_path, "v.csv", VENUS_HEADER + "\n" + venus_row(1, 10) + "\n")) == "venus"
    assert detect_format(write(tmp_path, "h.csv", HELIOS_HEADER + "\n")) == "helios"
    assert detect_format(write(tmp_path, "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n")) == "philly"
    assert detect_format(write(tmp_path, "c.csv", "submit_time,duration,gpu_num\n1,2,3\n")) == "csv"
    # a Venus-like file with a name column is our generic csv
    assert detect_format(write(tmp_path, "c2.csv", VENUS_HEADER + ",name\n")) == "csv"
    assert detect_format(sample_trace_path()) == "csv"


def test_detect_format_unknown(tmp_path):
    p = write(tmp_path, "weird.csv", "a,b,c\n1,2,3\n")
    with pytest.raises(TraceError) as e:
        detect_format(p)
    msg = assert_error(e, p, 1, None)
    assert "unrecognised trace format" in msg and "a, b, c" in msg
    with pytest.raises(TraceError):
        load_trace(p)


def test_unknown_format_name(tmp_path):
    p = write(tmp_path, "t.csv", "submit_time,duration,gpu_num\n1,2,3\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt="bogus")
    msg = assert_error(e, p, None, None)
    assert "bogus" in msg and all(f in msg for f in FORMATS)


# ------------------------------------------------------------------------------------------------
# unreadable / empty files


def test_nonexistent_file(tmp_path):
    p = tmp_path / "nope.csv"
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "not found" in assert_error(e, p, None, None)
    with pytest.raises(TraceError):
        load_trace(p, fmt="csv")


def test_directory_is_not_a_trace(tmp_path):
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path, fmt="csv")
    assert "directory" in str(e.value)


def test_empty_file(tmp_path):
    p = write(tmp_path, "empty.csv", "")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "empty" in assert_error(e, p, None, None)
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt="venus")
    assert "empty" in str(e.value)


def test_header_only_file(tmp_path):
    p = write(tmp_path, "hdr.csv", "submit_time,duration,gpu_num\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "no job rows" in assert_error(e, p, None, None)
    p = write(tmp_path, "hdr2.csv", "submit_time,duration,gpu_num\n\n\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "no job rows" in str(e.value)


def test_binary_garbage_is_a_trace_error(tmp_path):
    p = tmp_path / "garbage.csv"
    p.write_bytes(b"submit_time,duration,gpu_num\n\xff\xfe\x00\x81,2,3\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt="csv")
    assert p.name in str(e.value)


# ------------------------------------------------------------------------------------------------
# missing columns


def test_missing_required_column_venus(tmp_path):
    header = VENUS_HEADER.replace("state,", "").replace("user,", "")
    p = write(tmp_path, "novenus.csv", header + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt="venus")
    msg = assert_error(e, p, 1, "user")
    assert "venus" in msg and "user, state" in msg


def test_missing_required_column_philly(tmp_path):
    p = write(tmp_path, "nophilly.csv", "timestamp,duration,num_gpus\n2017-10-01 00:00:00,1,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt="philly")
    msg = assert_error(e, p, 1, "cluster")
    assert "philly" in msg


def test_missing_required_column_csv(tmp_path):
    p = write(tmp_path, "nocsv.csv", "submit_time,gpu_num\n1,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt="csv")
    msg = assert_error(e, p, 1, "duration")
    assert "csv format" in msg


def test_missing_required_column_helios(tmp_path):
    header = HELIOS_HEADER.replace("vc,", "")
    p = write(tmp_path, "nohelios.csv", header + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)  # detected as helios by its signature columns
    msg = assert_error(e, p, 1, "vc")
    assert "helios" in msg


# ------------------------------------------------------------------------------------------------
# bad values: one test per case, each naming file, row (source line) and column

CSV_HEADER = "job_id,submit_time,duration,gpu_num\n"


def test_unparseable_submit_time_csv_datetime(tmp_path):
    p = write(tmp_path, "badtime.csv", CSV_HEADER + "a,2020-09-01 08:00:00,10,1\nb,yesterday,10,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = assert_error(e, p, 3, "submit_time")
    assert "'yesterday'" in msg and "skip_bad_rows" in msg


def test_unparseable_submit_time_venus(tmp_path):
    p = write(tmp_path, "badvenus.csv",
              "\n".join([VENUS_HEADER, venus_row(1, 10), venus_row(2, 20), venus_row(3, "12:00")]) + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "'12:00'" in assert_error(e, p, 4, "submit_time")


def test_unparseable_submit_time_helios(tmp_path):
    p = write(tmp_path, "badhelios.csv", HELIOS_HEADER + "\n"
              "1,u1,vc1,j,1,4,1,COMPLETED,2020-13-45 00:00:00,,,10,0\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "submit_time")


def test_unparseable_timestamp_philly_names_source_column(tmp_path):
    p = write(tmp_path, "badphilly.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
              "2017-10-01 00:00:00,5.0,1,5.0,c1\nnot a time,5.0,1,5.0,c1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 3, "timestamp")


def test_negative_submit_time(tmp_path):
    p = write(tmp_path, "negtime.csv", CSV_HEADER + "a,-5,10,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "negative" in assert_error(e, p, 2, "submit_time")


def test_missing_submit_time(tmp_path):
    p = write(tmp_path, "notime.csv", CSV_HEADER + "a,5,10,1\nb,,10,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "missing" in assert_error(e, p, 3, "submit_time")


def test_negative_duration(tmp_path):
    p = write(tmp_path, "negdur.csv", CSV_HEADER + "a,1,10,1\nb,2,-3,1\nc,3,-4,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = assert_error(e, p, 3, "duration")
    assert "negative duration" in msg and "2 rows" in msg


def test_nan_duration(tmp_path):
    p = write(tmp_path, "nandur.csv", CSV_HEADER + "a,1,10,1\nb,2,,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "missing duration" in assert_error(e, p, 3, "duration")
    p = write(tmp_path, "nandur2.csv", CSV_HEADER + "a,1,NaN,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "duration")


def test_non_numeric_duration(tmp_path):
    p = write(tmp_path, "txtdur.csv", CSV_HEADER + "a,1,ten,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "'ten'" in assert_error(e, p, 2, "duration")


def test_gpu_num_zero(tmp_path):
    p = write(tmp_path, "gpu0.csv", CSV_HEADER + "a,1,10,1\nb,1,10,0\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert ">= 1" in assert_error(e, p, 3, "gpu_num")


def test_gpu_num_negative(tmp_path):
    p = write(tmp_path, "gpuneg.csv", CSV_HEADER + "a,1,10,-2\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "'-2'" in assert_error(e, p, 2, "gpu_num")


def test_gpu_num_non_integer(tmp_path):
    p = write(tmp_path, "gpufrac.csv", CSV_HEADER + "a,1,10,1\nb,1,10,1.5\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "'1.5'" in assert_error(e, p, 3, "gpu_num")


def test_gpu_num_not_a_number_or_missing(tmp_path):
    p = write(tmp_path, "gputxt.csv", CSV_HEADER + "a,1,10,two\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "gpu_num")
    p = write(tmp_path, "gpunan.csv", CSV_HEADER + "a,1,10,\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "gpu_num")


def test_gpu_num_philly_names_source_column(tmp_path):
    p = write(tmp_path, "philly0.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
              "2017-10-01 00:00:00,5.0,0,0.0,c1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "num_gpus")


def test_missing_required_text_field_venus(tmp_path):
    p = write(tmp_path, "novc.csv", "\n".join([VENUS_HEADER, venus_row(1, 10), venus_row(2, 20, vc="")]) + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "missing vc" in assert_error(e, p, 3, "vc")


def test_negative_cpu_num(tmp_path):
    p = write(tmp_path, "cpu.csv", "submit_time,duration,gpu_num,cpu_num\n1,1,1,-1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "cpu_num")


def test_duplicate_job_id(tmp_path):
    p = write(tmp_path, "dup.csv", CSV_HEADER + "a,1,10,1\nb,2,10,1\na,3,10,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    msg = assert_error(e, p, 4, "job_id")
    assert "duplicate" in msg and "row 2" in msg
    t = load_trace(p, skip_bad_rows=True)
    assert list(t.jobs["job_id"]) == ["a", "b"] and t.dropped == {"duplicate job_id": 1}


def test_bad_workload_value(tmp_path):
    p = write(tmp_path, "wl.csv", "\n".join([VENUS_HEADER, venus_row(1, 10).replace("4000.5", "fast")]) + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "speed")


def test_too_many_fields(tmp_path):
    p = write(tmp_path, "long.csv", CSV_HEADER + "a,1,10,1\nb,2,10,1,extra\nc,3,10,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 3, None)
    t = load_trace(p, skip_bad_rows=True)
    assert t.dropped == {"wrong number of fields": 1}
    assert list(t.jobs["job_id"]) == ["a", "c"]
    assert list(t.jobs["row"]) == [2, 4]  # line numbers stay right after a skipped line


def test_duplicate_column_names(tmp_path):
    p = write(tmp_path, "dupcol.csv", "submit_time,duration,gpu_num,duration\n1,2,1,3\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "duplicate column" in assert_error(e, p, 1, "duration")


def test_row_numbers_with_quoted_line_breaks(tmp_path):
    p = write(tmp_path, "quoted.csv", 'job_id,name,submit_time,duration,gpu_num\n'
              'a,"two\nlines",1,10,1\nb,plain,2,10,1\nc,x,3,-1,1\n')
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 5, "duration")
    t = load_trace(p, skip_bad_rows=True)
    assert list(t.jobs["row"]) == [2, 4] and t.jobs["name"].iloc[0] == "two\nlines"


def test_no_pandas_exception_escapes(tmp_path):
    cases = [
        "submit_time,duration,gpu_num\n\"unterminated,1,1\n",
        "submit_time,duration,gpu_num\n1e400,1,1\n",
        "submit_time,duration,gpu_num\n1,1e400,1\n",
        "submit_time,duration,gpu_num\n1,1,1e400\n",
        "submit_time,duration,gpu_num\n2020-09-01 00:00:00+08:00,1,1\n2020-09-01 00:00:00+02:00,1,1\n",
        "submit_time,duration,gpu_num,submit_time\n1,1,1,1\n",
        "submit_time,duration,gpu_num\n,,,\n",
        ",,\n1,2,3\n",
    ]
    for i, text in enumerate(cases):
        p = write(tmp_path, f"case{i}.csv", text)
        for fmt in (None, "csv", "venus", "helios", "philly"):
            for skip in (False, True):
                try:
                    load_trace(p, fmt=fmt, skip_bad_rows=skip).report()
                except TraceError as e:
                    assert p.name in str(e)


# ------------------------------------------------------------------------------------------------
# skip_bad_rows


def test_skip_bad_rows_counts_by_reason(tmp_path):
    p = write(tmp_path, "mixed.csv", CSV_HEADER + "\n".join([
        "a,1,10,1",
        "b,2,-1,1",      # negative duration
        "c,3,-2,1",      # negative duration
        "d,4,,1",        # missing duration
        "e,5,10,0",      # non-positive gpu_num
        "f,6,10,1.5",    # non-integer gpu_num
        "g,x7,10,1",     # unparseable submit time
        "h,7,10,2",
    ]) + "\n")
    with pytest.raises(TraceError):
        load_trace(p)
    t = load_trace(p, skip_bad_rows=True)
    assert list(t.jobs["job_id"]) == ["a", "h"]
    assert list(t.jobs["row"]) == [2, 9]
    assert t.dropped == {
        "unparseable submit_time": 1,
        "non-integer gpu_num": 1,
        "non-positive gpu_num": 1,
        "missing duration": 1,
        "negative duration": 2,
    }
    rep = t.report()
    assert "2 jobs loaded" in rep and "2 negative duration" in rep


def test_csv_submit_time_mode_is_chosen_by_majority(tmp_path):
    # mostly date/times: the odd integer is the bad cell
    p = write(tmp_path, "mostlydates.csv", CSV_HEADER + "a,2020-09-01 00:00:00,1,1\nb,5,1,1\n"
              "c,2020-09-01 00:00:09,1,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "'5'" in assert_error(e, p, 3, "submit_time")
    # mostly integers: the odd date is the bad cell
    p = write(tmp_path, "mostlyints.csv", CSV_HEADER + "a,1,1,1\nb,2020-09-01,1,1\nc,3,1,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert "'2020-09-01'" in assert_error(e, p, 3, "submit_time")


def test_skip_bad_rows_integer_submit_times(tmp_path):
    p = write(tmp_path, "ints.csv", CSV_HEADER + "a,1,10,1\nb,-4,10,1\nc,,10,1\nd,9,10,1\n")
    t = load_trace(p, skip_bad_rows=True)
    assert t.origin is None
    assert list(t.jobs["job_id"]) == ["a", "d"]
    assert t.dropped == {"missing submit_time": 1, "negative submit_time": 1}


def test_all_rows_bad_is_an_error(tmp_path):
    p = write(tmp_path, "allbad.csv", CSV_HEADER + "a,1,-1,1\nb,1,-1,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, skip_bad_rows=True)
    assert "no jobs left" in str(e.value) and "2 negative duration" in str(e.value)


def test_interior_blank_line_is_counted_trailing_ones_ignored(tmp_path):
    p = write(tmp_path, "blank.csv", CSV_HEADER + "a,1,10,1\n\nb,2,10,1\n\n\n")
    t = load_trace(p)
    assert list(t.jobs["row"]) == [2, 4]
    assert t.dropped == {"empty line": 1}


# ------------------------------------------------------------------------------------------------
# formats


def test_venus_tiny(tmp_path):
    rows = [venus_row(7, 13219300), venus_row(5, 13219203, duration=97, gpu=8), venus_row(6, 13219300, gpu=2)]
    p = write(tmp_path, "venus.csv", "\n".join([VENUS_HEADER] + rows) + "\n")
    t = load_trace(p)
    assert isinstance(t, LoadedTrace) and t.fmt == "venus"
    assert t.origin == VENUS_ORIGIN == pd.Timestamp("2020-04-01 00:00:00")
    j = t.jobs
    assert list(j.columns) == list(CANONICAL_COLUMNS) + list(WORKLOAD_COLUMNS)
    assert list(j["job_id"]) == ["5", "7", "6"]  # sorted by submit_time, tie in file order
    assert list(j["submit_time"]) == [13219203, 13219300, 13219300]  # unchanged
    assert list(j["row"]) == [3, 2, 4] and list(j["seq"]) == [0, 1, 2]
    assert list(j["gpu_num"]) == [8, 1, 2]
    assert j["model"].iloc[0] == "ResNet18" and j["gmem"].iloc[0] == 3600.0
    assert t.missing_inputs == ["name"]
    assert (j["name"] == "").all()


def test_canonical_dtypes(tmp_path):
    t = load_trace(write(tmp_path, "v.csv", VENUS_HEADER + "\n" + venus_row(1, 10) + "\n"))
    j = t.jobs
    for c in ("gpu_num", "cpu_num", "submit_time", "duration", "row", "seq"):
        assert j[c].dtype == np.int64, c
    for c in ("job_id", "user", "vc", "state", "name", "model", "dataset"):
        assert pd.api.types.is_string_dtype(j[c]), c
        assert isinstance(j[c].iloc[0], str)
    for c in ("batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem"):
        assert j[c].dtype == np.float64, c


def test_helios_cpu_only_and_never_started(tmp_path):
    p = write(tmp_path, "cluster_log.csv", HELIOS_HEADER + "\n" + "\n".join([
        "11,u1,vcA,train_a,1,4,1,COMPLETED,2020-09-01 08:00:00,2020-09-01 08:00:05,2020-09-01 09:00:05,3600,5",
        "12,u1,vcA,prep,0,16,1,COMPLETED,2020-09-01 07:00:00,2020-09-01 07:00:00,2020-09-01 07:10:00,600,0",
        "13,u2,vcB,train_b,8,32,1,FAILED,2020-09-02 10:30:00,2020-09-02 10:30:00,2020-09-02 10:31:00,60.4,0",
        "14,u2,vcB,cpu_job,0,2,1,CANCELLED,2020-09-02 11:00:00,,,,",
        "15,u3,vcB,gone,2,8,1,CANCELLED,2020-09-02 11:00:00,,,,",
        "16,u3,vcB,tie,4,8,1,COMPLETED,2020-09-01 08:00:00,2020-09-01 08:00:00,2020-09-01 08:00:30,30,0",
    ]) + "\n")
    assert detect_format(p) == "helios"
    t = load_trace(p)
    assert t.fmt == "helios"
    assert t.dropped == {"cpu-only job": 2, "never started": 1}
    assert t.origin == pd.Timestamp("2020-09-01 00:00:00")  # midnight of the first submit's day
    j = t.jobs
    assert list(j["job_id"]) == ["11", "16", "13"]
    assert list(j["submit_time"]) == [8 * 3600, 8 * 3600, 86400 + 10 * 3600 + 1800]
    assert list(j["duration"]) == [3600, 30, 60]
    assert list(j["name"]) == ["train_a", "tie", "train_b"]
    assert list(j["state"]) == ["COMPLETED", "COMPLETED", "FAILED"]
    assert list(j["cpu_num"]) == [4, 8, 32]
    assert t.missing_inputs == ["workload"]
    assert "2 cpu-only job" in t.report()


def test_helios_negative_gpu_is_an_error(tmp_path):
    p = write(tmp_path, "hneg.csv", HELIOS_HEADER + "\n"
              "1,u1,vcA,j,-1,4,1,COMPLETED,2020-09-01 08:00:00,,,10,0\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert_error(e, p, 2, "gpu_num")


def test_philly_tiny(tmp_path):
    p = write(tmp_path, "philly.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
              "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
              "2017-10-09 06:13:03,2951.6,2,5903.2,6214e9\n"
              "2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0\n"
              "2017-10-09 06:13:03,5.0,4,20.0,6214e9\n\n")
    t = load_trace(p)
    assert t.fmt == "philly"
    assert t.origin == pd.Timestamp("2017-09-29 00:00:00")
    j = t.jobs
    assert list(j["job_id"]) == ["philly-4", "philly-3", "philly-5", "philly-2"]
    assert list(j["row"]) == [4, 3, 5, 2]
    assert list(j["vc"]) == ["6c71a0", "6214e9", "6214e9", "11cb48"]
    assert list(j["gpu_num"]) == [1, 2, 4, 1]
    assert list(j["duration"]) == [860662, 2952, 5, 66]
    assert j["submit_time"].iloc[0] == 7 * 3600 + 58 * 60 + 32
    assert (j["state"] == "COMPLETED").all() and (j["user"] == "").all() and (j["name"] == "").all()
    assert (j["cpu_num"] == 0).all()
    assert t.missing_inputs == ["user", "name", "workload"]
    assert t.dropped == {}
    assert list(j.columns) == list(CANONICAL_COLUMNS)


def test_csv_defaults_and_generated_ids(tmp_path):
    p = write(tmp_path, "min.csv", "submit_time,duration,gpu_num\n10,5.5,1\n0,7,2\n")
    t = load_trace(p)
    j = t.jobs
    assert t.fmt == "csv" and t.origin is None
    assert list(j["job_id"]) == ["job-3", "job-2"]
    assert (j["vc"] == "default").all() and (j["user"] == "").all() and (j["state"] == "").all()
    assert (j["cpu_num"] == 0).all()
    assert list(j["duration"]) == [7, 6]  # 5.5 rounds half to even -> 6
    assert t.missing_inputs == ["user", "name", "workload"]
    assert "no wall-clock origin" in t.report()


def test_csv_datetime_submit_times(tmp_path):
    p = write(tmp_path, "dt.csv", "job_id,user,vc,name,submit_time,duration,gpu_num,start_time\n"
              "x,alice,vc1,run1,2021-03-02T10:00:00,60,1,whatever\n"
              "y,bob,,run2,2021-03-01 23:59:59,60,2,\n")
    t = load_trace(p)
    assert t.origin == pd.Timestamp("2021-03-01")
    assert list(t.jobs["submit_time"]) == [86399, 86400 + 36000]
    assert list(t.jobs["vc"]) == ["default", "vc1"]  # empty optional vc -> default
    assert t.missing_inputs == ["workload"]


def test_stable_tie_order(tmp_path):
    lines = [f"j{i},{t},10,1" for i, t in enumerate([5, 3, 5, 3, 5, 1, 3])]
    p = write(tmp_path, "ties.csv", CSV_HEADER + "\n".join(lines) + "\n")
    j = load_trace(p).jobs
    assert list(j["job_id"]) == ["j5", "j1", "j3", "j6", "j0", "j2", "j4"]
    assert list(j["seq"]) == list(range(7))
    assert j["row"].is_monotonic_increasing is False
    # within each submit_time, rows are in file order
    assert (j.groupby("submit_time")["row"].apply(lambda r: r.is_monotonic_increasing)).all()


def test_window_in_seconds_and_timestamps(tmp_path):
    p = write(tmp_path, "win.csv", "job_id,submit_time,duration,gpu_num\n"
              "a,2020-09-01 00:00:00,1,1\nb,2020-09-01 12:00:00,1,1\n"
              "c,2020-09-02 00:00:00,1,1\nd,2020-09-03 00:00:00,1,1\n")
    t = load_trace(p, start=3600, end=86400)
    assert list(t.jobs["job_id"]) == ["b"]  # end is exclusive
    assert t.dropped == {"outside window": 3}
    assert "3 outside window" in t.report()
    t = load_trace(p, start="2020-09-01 12:00", end=pd.Timestamp("2020-09-03"))
    assert list(t.jobs["job_id"]) == ["b", "c"]
    assert list(t.jobs["submit_time"]) == [43200, 86400]  # seconds stay relative to the file's origin
    t = load_trace(p, start="86400")
    assert list(t.jobs["job_id"]) == ["c", "d"]
    with pytest.raises(TraceError):
        load_trace(p, start=10, end=5)
    with pytest.raises(TraceError):
        load_trace(p, start="2020-09-05")  # nothing left


def test_window_needs_origin_for_dates(tmp_path):
    p = write(tmp_path, "secs.csv", CSV_HEADER + "a,1,10,1\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, start="2020-09-01")
    assert "origin" in str(e.value)


def test_window_rows_outside_are_not_validated(tmp_path):
    p = write(tmp_path, "winbad.csv", CSV_HEADER + "a,1,-10,1\nb,100,10,1\n")
    t = load_trace(p, start=50)
    assert list(t.jobs["job_id"]) == ["b"] and t.dropped == {"outside window": 1}


def test_report(tmp_path):
    p = write(tmp_path, "rep.csv", CSV_HEADER + "a,1,10,1\nb,2,-1,1\n")
    t = load_trace(p, skip_bad_rows=True)
    rep = t.report()
    assert rep.splitlines()[0] == f"1 jobs loaded from {p} (csv); dropped: 1 negative duration"


# ------------------------------------------------------------------------------------------------
# sample trace


def test_sample_trace_loads_with_all_columns():
    t = load_trace(sample_trace_path())
    assert t.fmt == "csv" and t.dropped == {} and t.missing_inputs == []
    j = t.jobs
    assert list(j.columns) == list(CANONICAL_COLUMNS) + list(WORKLOAD_COLUMNS)
    assert 2000 <= len(j) <= 3000
    assert j["user"].nunique() >= 30 and (j["name"] != "").all() and (j["user"] != "").all()
    assert j[list(WORKLOAD_COLUMNS)].notna().all().all()
    assert set(j["state"]) >= {"COMPLETED", "FAILED", "CANCELLED"}
    assert j["submit_time"].max() < 7 * 86400
    short_jobs = j["duration"] < 300
    assert short_jobs.mean() > 0.2  # many short (debug/failed) jobs
    assert j["gmem"].between(500, 23000).all() and j["gpu_util"].between(0, 100).all()
    vcs = pd.read_csv(sample_vc_config_path(), index_col=0)
    assert list(vcs.columns) == ["num"] and set(j["vc"]) == set(vcs.index)
    cap = j["vc"].map(vcs["num"] * 8)
    assert (j["gpu_num"] <= cap).all()
    load = (j["gpu_num"] * j["duration"]).groupby(j["vc"]).sum() / (vcs["num"] * 8 * 7 * 86400)
    assert load.between(0.6, 0.95).all(), load


def test_sample_is_deterministic_and_committed_copy_is_current(tmp_path):
    from lucidd.sample import generate_sample, write_sample

    a = generate_sample()
    b = generate_sample()
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(generate_sample(seed=8))
    trace, vcs = write_sample(tmp_path)
    assert trace.read_bytes() == sample_trace_path().read_bytes(), (
        "lucidd/data/sample_trace.csv is stale: run `python -m lucidd.sample`")
    assert vcs.read_bytes() == sample_vc_config_path().read_bytes()
    assert vcs.read_text().splitlines()[0] == ",num"


# ------------------------------------------------------------------------------------------------
# the real traces in ../shared


def _need_shared(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"../shared not found: {path}")


@pytest.mark.shared
def test_full_venus_and_philly():
    _need_shared(VENUS)
    _need_shared(PHILLY)
    v = load_trace(VENUS)
    assert v.fmt == "venus" and len(v.jobs) == 23_859 and v.dropped == {}
    assert v.origin == pd.Timestamp("2020-04-01 00:00:00")
    raw = pd.read_csv(VENUS)
    # the file is sorted by submit_time: order, ids and integer submit times are unchanged
    assert list(v.jobs["job_id"]) == raw["job_id"].astype(str).tolist()
    assert (v.jobs["submit_time"].to_numpy() == raw["submit_time"].to_numpy()).all()
    assert v.jobs["submit_time"].min() == 13_219_203 and v.jobs["submit_time"].max() == 15_465_490
    assert v.jobs["vc"].nunique() == 15 and v.missing_inputs == ["name"]

    p = load_trace(PHILLY)
    assert p.fmt == "philly" and len(p.jobs) == 82_247 and p.dropped == {}
    assert p.origin == pd.Timestamp("2017-09-04 00:00:00")
    assert p.jobs["submit_time"].is_monotonic_increasing
    assert p.jobs["vc"].nunique() == 15

    w = load_trace(PHILLY, start="2017-10-01", end="2017-10-08")
    assert w.dropped["outside window"] == 82_247 - len(w.jobs)
    # load speed (targets 2 s for Venus, 3 s for Philly) is printed by bench/bench_baselines.py
