"""Loading and validating job traces for the simulator.

Four input formats are understood (see docs/traces.md for the full description):

* ``venus``  -- the Helios Venus job list as used by the Lucid artifact (integer ``submit_time``
  seconds since 2020-04-01 00:00:00, plus Lucid's workload annotation columns);
* ``helios`` -- a HeliosData ``cluster_log.csv`` style Slurm log (datetime strings);
* ``philly`` -- the processed Philly list (``timestamp,duration,num_gpus,gpu_time,cluster``);
* ``csv``    -- lucidd's own generic schema.

Every format is turned into one canonical :class:`pandas.DataFrame` (:data:`CANONICAL_COLUMNS`).
Bad input never escapes as a pandas/numpy exception: it raises :class:`lucidd.errors.TraceError`
naming the file, the source line ("row") and the column, or, with ``skip_bad_rows=True``, the
offending rows are dropped and counted by reason in :attr:`LoadedTrace.dropped`.
"""

from __future__ import annotations

import csv
import io
import math
import os
import pathlib
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from lucidd.csvfiles import COMPRESSED_SUFFIXES
from lucidd.errors import EmptyWindowError, TraceError

__all__ = [
    "FORMATS",
    "WORKLOAD_COLUMNS",
    "WORKLOAD_NUMERIC_COLUMNS",
    "CANONICAL_COLUMNS",
    "TIME_LIMIT_COLUMN",
    "VENUS_ORIGIN",
    "LoadedTrace",
    "detect_format",
    "load_trace",
    "sample_trace_path",
    "sample_vc_config_path",
]

FORMATS = ("venus", "helios", "philly", "csv")
WORKLOAD_COLUMNS = ("model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem")
WORKLOAD_NUMERIC_COLUMNS = ("batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem")
WORKLOAD_TEXT_COLUMNS = ("model", "dataset")

# The user's Slurm time limit in seconds (optional; `lucidctl import-sacct` writes it). Slurm's
# backfill plans with it, and every estimate is capped at it; an empty cell is "no limit known"
# (the simulator then models one: --limit-rule).
TIME_LIMIT_COLUMN = "time_limit"

# Canonical columns, always present, in this order (the workload columns follow when present).
CANONICAL_COLUMNS = (
    "job_id", "user", "vc", "gpu_num", "cpu_num", "submit_time", "duration",
    "state", "name", "row", "seq",
)

# Lucid's Venus trace counts seconds from this (local, UTC+8) wall-clock time.
VENUS_ORIGIN = pd.Timestamp("2020-04-01 00:00:00")

DEFAULT_VC = "default"

# Columns of each format, by their names in the source file.
_VENUS_REQUIRED = ("job_id", "user", "vc", "gpu_num", "cpu_num", "state", "submit_time", "duration")
_HELIOS_REQUIRED = _VENUS_REQUIRED
_HELIOS_SIGNATURE = ("node_num", "start_time", "end_time", "queue")
_PHILLY_REQUIRED = ("timestamp", "duration", "num_gpus", "cluster")
_CSV_REQUIRED = ("submit_time", "duration", "gpu_num")

# Source column -> canonical column, per format (only the names that differ).
_RENAMES = {
    "venus": {},
    "helios": {"jobname": "name"},
    "philly": {"timestamp": "submit_time", "num_gpus": "gpu_num", "cluster": "vc"},
    "csv": {},
}

_MAX_SECONDS = 2**53  # larger numbers cannot be exact seconds; treat as invalid
_MAX_SUBMIT_S = 1e11  # the year 5138 as Unix seconds: larger submit times are milliseconds (or worse)
_MAX_DURATION_S = 366 * 86400  # no GPU job of a real trace runs a year (whole Philly's longest: 54 days)
_BAD_FIELDS = "\uffff lucidd: bad line \uffff"  # sentinel for lines with too many fields (no NUL:
# pandas 3 string comparisons stop at NUL characters)
_BAD_QUOTE = "\uffff lucidd: unbalanced quote \uffff"  # the same, for a stray quote's line

# Cells are read as written: a user, VC or job called "NA" or "null" is a name, not a gap. Only in
# number and time columns do these spellings (what R, numpy and databases write for "no value")
# mean an empty cell.
_NO_VALUE_TEXT = frozenset({"na", "n/a", "nan", "-nan", "null", "none", "<na>", "#n/a", "nat"})


@dataclass
class LoadedTrace:
    """A validated trace in canonical form.

    ``jobs`` has the columns of :data:`CANONICAL_COLUMNS` (plus :data:`WORKLOAD_COLUMNS` when the
    file has any of them, then ``time_limit`` when the file has it: seconds, NaN where unknown),
    sorted stably by ``submit_time``.
    """

    jobs: pd.DataFrame
    path: str
    fmt: str
    origin: pd.Timestamp | None  # wall-clock time of submit_time == 0 (None: unknown)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> rows dropped
    missing_inputs: list[str] = field(default_factory=list)  # of "user", "name", "workload"
    vc_defaulted: int = 0  # jobs with an empty cell in the file's vc column: in DEFAULT_VC

    def __len__(self) -> int:
        return len(self.jobs)

    @property
    def n_dropped(self) -> int:
        return sum(self.dropped.values())

    def report(self) -> str:
        """A short human summary: jobs loaded, what was dropped and why, what inputs are missing."""
        lines = [f"{len(self.jobs)} jobs loaded from {self.path} ({self.fmt})"]
        if self.dropped:
            parts = ", ".join(f"{n} {reason}" for reason, n in self.dropped.items())
            lines[0] += f"; dropped: {parts}"
        else:
            lines[0] += "; dropped: none"
        if len(self.jobs):
            first = int(self.jobs["submit_time"].iloc[0])
            last = int(self.jobs["submit_time"].iloc[-1])
            span = f"submit_time {first}..{last} s"
            if self.origin is not None:
                span += (f" ({_fmt_ts(self.origin + pd.Timedelta(seconds=first))} .. "
                         f"{_fmt_ts(self.origin + pd.Timedelta(seconds=last))})")
            else:
                span += " (no wall-clock origin)"
            lines.append(
                f"{span}; {self.jobs['vc'].nunique()} VCs; "
                + _gpu_hours(self.jobs['gpu_num'].mul(self.jobs['duration']).sum() / 3600)
            )
        if TIME_LIMIT_COLUMN in self.jobs and len(self.jobs):
            lim = self.jobs[TIME_LIMIT_COLUMN]
            known = int(lim.notna().sum())
            below = int((lim < self.jobs["duration"]).sum())
            # far past it is no kill grace: a unit mix-up (minutes written as seconds), say
            far = int(((self.jobs["duration"] > 2 * lim) & (self.jobs["duration"] > lim + 600)).sum())
            lines.append(f"time limits: {known} of {len(self.jobs)} jobs have one (the time_limit column; "
                         "the others get a modelled one, --limit-rule)"
                         + (f"; {below} job(s) ran past theirs (Slurm's OverTimeLimit, the kill grace): "
                            "Slurm's engine plans them with the duration they ran" if below else "")
                         + (f"; {far} ran more than twice theirs and over 10 min past it, which no kill grace "
                            "explains: is time_limit in seconds?" if far else ""))
        if self.vc_defaulted:
            lines.append(f"{self.vc_defaulted} job(s) with an empty vc cell (or a row short of it) are in VC "
                         f"'{DEFAULT_VC}'" + (", which has nodes of its own" if self.jobs["vc"].nunique() > 1 else ""))
        if self.missing_inputs:
            lines.append("optional columns not in the file (fine, nothing is dropped): "
                         + "; ".join(f"{m} ({_MISSING_MEANS.get(m, 'not used')})" for m in self.missing_inputs))
        return "\n".join(lines)


_MISSING_MEANS = {
    "user": "duration estimates do without per-user history",
    "name": "duration estimates do without job-name similarity",
    "workload": "no GPU utilisation/memory columns, so Lucid packs no jobs onto shared GPUs",
}


def _fmt_ts(ts: pd.Timestamp) -> str:
    try:
        return ts.strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, NotImplementedError):  # pragma: no cover - out-of-range timestamps
        return str(ts)


# --------------------------------------------------------------------------------------------
# Bundled sample data


def _data_dir() -> pathlib.Path:
    try:
        from importlib.resources import files

        p = pathlib.Path(str(files("lucidd") / "data"))
        if p.is_dir():
            return p
    except Exception:  # pragma: no cover - importlib.resources quirk (zipped install)
        pass
    return pathlib.Path(__file__).resolve().parent / "data"


def sample_trace_path() -> pathlib.Path:
    """The bundled synthetic sample trace (generic ``csv`` format)."""
    return _data_dir() / "sample_trace.csv"


def sample_vc_config_path() -> pathlib.Path:
    """VC configuration for the sample trace (``,num`` header; VC name, number of 8-GPU nodes)."""
    return _data_dir() / "sample_vc_config.csv"


# --------------------------------------------------------------------------------------------
# Reading


def _no_decompressor(path, e: ImportError) -> TraceError:
    return TraceError(path, f"cannot decompress it here ({_one_line(e).split('.')[0]}): decompress it first "
                      "(lucidctl reads .csv, .csv.gz, .bz2, .xz and .zip)")


def _check_readable(path: pathlib.Path) -> None:
    if not path.exists():
        raise TraceError(path, "file not found")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file")
    if not path.is_file():  # a pipe (`<(zcat ...)`, /dev/stdin) or a device: its size says nothing
        raise TraceError(path, "is a pipe or a device, not a file (a trace is read more than once): save it to a file")
    if not os.access(path, os.R_OK):
        raise TraceError(path, "file is not readable (permission denied)")
    try:
        if path.stat().st_size == 0:
            raise TraceError(path, "file is empty (expected a CSV header line and job rows)")
    except OSError as e:
        raise TraceError(path, f"cannot read file: {e.strerror or e}") from e


def _read_header(path: pathlib.Path) -> list[str]:
    _check_readable(path)
    try:
        # header=None: the raw names, without pandas' renaming of duplicates ("x" -> "x.1")
        head = pd.read_csv(path, header=None, nrows=1, dtype=str, index_col=False,
                           keep_default_na=False, encoding="utf-8-sig")
    except pd.errors.EmptyDataError as e:
        raise TraceError(path, "file is empty (expected a CSV header line and job rows)") from e
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from e
    except ImportError as e:  # .zst: pandas needs the zstandard package, which lucidd does not install
        raise _no_decompressor(path, e) from e
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, pd.errors.ParserError) as e:
        # EOFError / BadZipFile: a truncated .gz/.bz2/.xz/.zip file
        raise TraceError(path, f"cannot read the CSV header: {_one_line(e)}", row=1) from e
    if head.empty:
        raise TraceError(path, "file is empty (expected a CSV header line and job rows)")
    cols = [str(c).strip() for c in head.iloc[0].tolist()]
    seen, dup = set(), []
    for c in cols:
        if c in seen and c not in dup:
            dup.append(c)
        seen.add(c)
    if dup:
        raise TraceError(path, f"duplicate column name(s) in the header: {', '.join(dup)}",
                         row=1, column=dup[0])
    return cols


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _open_binary(path: pathlib.Path):
    suffix = path.suffix.lower()
    if suffix == ".gz":
        import gzip

        return gzip.open(path, "rb")
    if suffix == ".bz2":
        import bz2

        return bz2.open(path, "rb")
    if suffix == ".xz":
        import lzma

        return lzma.open(path, "rb")
    return open(path, "rb")


def _not_utf8(path: pathlib.Path, e: UnicodeDecodeError) -> TraceError:
    """The error for a file that is not UTF-8, naming the line and byte of the first bad byte.

    The decoder's own offset is within whatever chunk pandas handed it, so the file is scanned
    again, line by line (a UTF-8 sequence never spans a newline byte)."""
    offset = 0
    try:
        with _open_binary(path) as f:
            for number, line in enumerate(f, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    return TraceError(path, f"not a UTF-8 text/CSV file ({bad.reason} at byte "
                                            f"{offset + bad.start} of the file)", row=number)
                offset += len(line)
    except (OSError, EOFError, ValueError):
        pass  # zip archives and unreadable files: the decoder's own words
    return TraceError(path, f"not a UTF-8 text/CSV file ({e.reason})")


def detect_format(path) -> str:
    """Guess a trace file's format from its header line.

    * ``philly``: has ``timestamp`` and ``num_gpus``;
    * ``helios``: has at least two of ``node_num, start_time, end_time, queue`` (a Slurm log);
    * ``venus``:  has all Venus columns (job_id, user, vc, gpu_num, cpu_num, state, submit_time,
      duration and the eight workload columns) and no ``name``;
    * ``csv``:    has ``submit_time``, ``duration`` and ``gpu_num``.

    Raises :class:`TraceError` if none matches.
    """
    path = pathlib.Path(path)
    cols = _read_header(path)
    fmt = _detect_from_columns(cols)
    if fmt is None:
        shown = ", ".join(cols[:12]) + (f", ... ({len(cols)} columns)" if len(cols) > 12 else "")
        name, missing = _closest_format(cols)
        raise TraceError(
            path,
            f"unrecognised trace format: missing column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(m) for m in missing)} for the closest format, {name} (the header has {shown}; "
            "the formats and their columns: docs/traces.md)",
            row=1, column=missing[0],
        )
    return fmt


def _closest_format(cols) -> tuple[str, list[str]]:
    """The format whose required columns the header misses fewest of (ties: the generic csv
    first), and those missing columns."""
    s = set(cols)
    needs = [("csv", _CSV_REQUIRED), ("philly", _PHILLY_REQUIRED), ("venus", _VENUS_REQUIRED + WORKLOAD_COLUMNS),
             ("helios", _HELIOS_REQUIRED + _HELIOS_SIGNATURE)]
    ranked = sorted(needs, key=lambda fn: (len([c for c in fn[1] if c not in s]) / len(fn[1]),
                                           len([c for c in fn[1] if c not in s])))
    name, required = ranked[0]
    missing = [c for c in required if c not in s]
    return name, missing or list(required[:1])


def _detect_from_columns(cols) -> str | None:
    s = set(cols)
    if {"timestamp", "num_gpus"} <= s:
        return "philly"
    if len(s & set(_HELIOS_SIGNATURE)) >= 2 and "submit_time" in s:
        return "helios"
    if set(_VENUS_REQUIRED) <= s and set(WORKLOAD_COLUMNS) <= s and "name" not in s and "jobname" not in s:
        return "venus"
    if set(_CSV_REQUIRED) <= s:
        return "csv"
    return None


def _parse_error_line(e: Exception) -> int | None:
    m = re.search(r"line (\d+)", str(e))
    return int(m.group(1)) if m else None


def _read_rows(path: pathlib.Path, skip_bad_rows: bool) -> tuple[pd.DataFrame, np.ndarray, int]:
    """Read every cell as text.

    Returns (frame, source line number of each frame row, number of lines with too many fields).
    Blank lines are kept as all-NaN rows. Lines with extra non-empty fields become rows filled
    with a sentinel (dropped later as "wrong number of fields"), or raise unless skip_bad_rows.
    """
    kw = dict(dtype=str, skip_blank_lines=False, index_col=False, encoding="utf-8-sig",
              keep_default_na=False, na_values=[""])
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", pd.errors.ParserWarning)
            try:
                df = pd.read_csv(path, **kw)
            except pd.errors.ParserError:
                df = None  # a line with too many fields (or broken quoting): slow path below
        if (df is not None and not any(issubclass(w.category, pd.errors.ParserWarning) for w in caught)
                and _one_record_per_line(path, len(df))):
            return df, np.arange(2, len(df) + 2, dtype=np.int64), 0
        # pandas truncates or rejects over-long lines; re-read record by record to find them.
        return _read_rows_slow(path, skip_bad_rows, kw)
    except TraceError:
        raise
    except pd.errors.EmptyDataError as e:
        raise TraceError(path, "file is empty (expected a CSV header line and job rows)") from e
    except UnicodeDecodeError as e:
        raise _not_utf8(path, e) from e
    except ImportError as e:
        raise _no_decompressor(path, e) from e
    except pd.errors.ParserError as e:
        raise TraceError(path, "malformed CSV: " + _one_line(e), row=_parse_error_line(e)) from e
    except (OSError, ValueError, csv.Error, EOFError, MemoryError) as e:
        raise TraceError(path, f"cannot read file: {_one_line(e)}") from e


def _one_record_per_line(path: pathlib.Path, n_rows: int) -> bool:
    """True when data row i is physical line i + 2 (no quoted line breaks, no bare-CR endings)."""
    if path.suffix.lower() in COMPRESSED_SUFFIXES:
        return True  # compressed: not checked (row numbers assume one record per line)
    data = path.read_bytes()
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    return n_lines == n_rows + 1


def _fields_of_cut_last_line(path: pathlib.Path, n_columns: int) -> int | None:
    """The number of fields of the file's last line when the file ends without a line end and that
    line has fewer fields than the header (a file cut off mid-row); None otherwise. Compressed files
    are not checked (a cut one fails to decompress)."""
    if path.suffix.lower() in COMPRESSED_SUFFIXES:
        return None
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 65536))
            tail = f.read()
    except OSError:
        return None
    if not tail or tail.endswith((b"\n", b"\r")):
        return None
    # The last record starts at the line end before it whose text after it has balanced quotes: a
    # quoted field may hold line breaks (job names from sacct), so the last line alone may be the
    # end of a longer record (a review). Unbalanced within the tail: cannot tell, not flagged.
    lines = tail.decode("utf-8", "replace").split("\n")
    record = None
    for k in range(len(lines) - 1, 0 if size > len(tail) else -1, -1):
        text = "\n".join(lines[k:])
        if text.count('"') % 2 == 0:
            record = text
            break
    if record is None:
        return None
    try:
        rec = next(csv.reader(io.StringIO(record)), [])
    except csv.Error:
        return None
    return len(rec) if 0 < len(rec) < n_columns else None


def _open_text(path: pathlib.Path):
    return io.TextIOWrapper(_open_binary(path), encoding="utf-8-sig", newline="")


def _read_rows_slow(path: pathlib.Path, skip_bad_rows: bool, kw: dict):
    """Only for malformed files: a per-record pass with the csv module that normalises every
    record to the header's width (keeping exact source line numbers), then pandas on the result.

    A quoted field may hold line breaks (job names from sacct do), but a stray, unbalanced quote
    would otherwise swallow every line up to the next quote, or to the end of the file, as one
    field. So a record that runs over several lines is taken only if it has the header's width,
    its quotes close, and no line inside it looks like a row of its own (the header's number of
    commas); otherwise it is a bad line, and reading resumes on the line after it."""
    with _open_text(path) as f:
        text = f.readlines()  # newline="": "\n", "\r\n" and "\r" endings, as csv counts lines
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    lines: list[int] = []
    n_bad = 0
    reader = csv.reader(iter(text))
    header = next(reader, None)
    if header is None:
        raise TraceError(path, "file is empty (expected a CSV header line and job rows)")
    n = len(header)
    writer.writerow(header)
    base, prev = 0, reader.line_num  # text[base:] is what `reader` reads; prev: its lines so far
    while True:
        rec = next(reader, None)
        if rec is None:
            break
        start, end = base + prev + 1, base + reader.line_num  # physical lines, 1-based
        prev = reader.line_num
        if end > start and (len(rec) != n or not _quotes_close(text[start - 1:end])
                            or any(line.count(",") == n - 1 for line in text[start:end - 1])):
            if not skip_bad_rows:
                raise TraceError(path, f"a quote opened on this line is not closed where the row "
                                       f"should end (the field runs on to line {end}); check for "
                                       f"a stray '\"'" + _SKIP_HINT, row=start)
            n_bad += 1
            writer.writerow([_BAD_QUOTE] * n)
            lines.append(start)
            base, prev = start, 0  # read on from the line after the bad one
            reader = csv.reader(text[i] for i in range(base, len(text)))
            continue
        if len(rec) > n:
            if all(not x.strip() for x in rec[n:]):
                rec = rec[:n]  # trailing separators only
            else:
                if not skip_bad_rows:
                    raise TraceError(path, f"the line has {len(rec)} fields but the header has {n}"
                                     + _SKIP_HINT, row=start)
                n_bad += 1
                rec = [_BAD_FIELDS] * n
        elif len(rec) < n:
            rec = rec + [""] * (n - len(rec))
        writer.writerow(rec)
        lines.append(start)
    buf.seek(0)
    kw = {k: v for k, v in kw.items() if k != "encoding"}
    df = pd.read_csv(buf, **kw)
    return df, np.asarray(lines, dtype=np.int64), n_bad


def _quotes_close(record_lines: list[str]) -> bool:
    """True when the quoted fields of one multi-line record end before the text does."""
    try:
        for _ in csv.reader(iter(record_lines), strict=True):
            pass
    except csv.Error:
        return False
    return True


# How to get past a bad row, in the Python API's words; `lucidctl` swaps in its flag (SKIP_HINT_CLI).
SKIP_HINT_API = " (fix the file, or load it with skip_bad_rows=True to drop such rows)"
SKIP_HINT_CLI = " (fix the file, or pass --skip-bad-rows to drop such rows and count them)"
_SKIP_HINT = SKIP_HINT_API


# --------------------------------------------------------------------------------------------
# Validation helper


class _Rows:
    """Tracks which rows are still alive and raises/drops for bad ones."""

    def __init__(self, path: pathlib.Path, lines: np.ndarray, skip: bool, colname: Callable[[str], str]):
        self.path = path
        self.lines = lines
        self.skip = skip
        self.alive = np.ones(len(lines), dtype=bool)
        self.dropped: dict[str, int] = {}
        self.colname = colname

    def drop(self, mask: np.ndarray, reason: str) -> None:
        """Always drop (not an error), counting rows not dropped already."""
        mask = mask & self.alive
        n = int(mask.sum())
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n
            self.alive &= ~mask

    def bad(self, mask: np.ndarray, reason: str, column: str, raw: pd.Series | None,
            describe: Callable[[object], str]) -> None:
        """Rows in ``mask`` are invalid: raise for the first one, or drop all when skipping."""
        mask = np.asarray(mask, dtype=bool) & self.alive
        if not mask.any():
            return
        if self.skip:
            self.drop(mask, reason)
            return
        idx = np.flatnonzero(mask)
        i = int(idx[0])
        value = None if raw is None else raw.iloc[i]
        msg = describe(value)
        if len(idx) > 1:
            msg += f"; {len(idx)} rows have this problem, the first is shown"
        raise TraceError(self.path, msg + _SKIP_HINT, row=int(self.lines[i]), column=self.colname(column))


def _no_value(raw: pd.Series) -> np.ndarray:
    """Empty cells and the spellings of "no value" (_NO_VALUE_TEXT): for number and time columns."""
    return raw.isna().to_numpy() | raw.str.strip().str.lower().isin(_NO_VALUE_TEXT).to_numpy()


def _empty_cell(v) -> str:
    return "empty cell" if v is None or (isinstance(v, float) and math.isnan(v)) else repr(str(v))


def _show(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "an empty cell"
    return repr(str(v))


def _numeric(rows: _Rows, raw: pd.Series, column: str, *, required: bool, what: str,
             invalid_reason: str | None = None) -> np.ndarray:
    """Parse a numeric column. Empty cells: error when required, else NaN. Non-numbers: error."""
    empty = _no_value(raw)
    num = pd.to_numeric(raw.where(~empty), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if required:
        rows.bad(empty, f"missing {column}", column, raw,
                 lambda v: f"missing {column} ({_empty_cell(v)}); expected {what}")
    bad = (~empty & ~np.isfinite(num)) | (np.abs(np.nan_to_num(num)) > _MAX_SECONDS)
    rows.bad(bad, invalid_reason or f"invalid {column}", column, raw,
             lambda v: f"{column} must be {what}, got {_show(v)}")
    return num


def _to_int64(num: np.ndarray) -> np.ndarray:
    """Round to int64; non-finite / out-of-range cells (already flagged as bad) become 0."""
    ok = np.isfinite(num) & (np.abs(num) <= _MAX_SECONDS)
    return np.rint(np.where(ok, num, 0.0)).astype(np.int64)


def _text(rows: _Rows, raw: pd.Series | None, column: str, *, required: bool, default: str = "") -> pd.Series:
    if raw is None:
        return None
    s = raw.str.strip()
    empty = s.isna().to_numpy() | (s.fillna("") == "").to_numpy()
    if required:
        rows.bad(empty, f"missing {column}", column, raw,
                 lambda v: f"missing {column} (empty cell); this column is required")
    return s.fillna(default).where(~empty, default)


# --------------------------------------------------------------------------------------------
# Times


def _parse_datetimes(rows: _Rows, raw: pd.Series, column: str) -> pd.Series:
    s = raw.str.strip()
    try:
        ts = pd.to_datetime(s, format="ISO8601", errors="coerce")
    except (ValueError, TypeError) as e:
        if "timezone" in str(e).lower() or "tz" in str(e).lower():
            # Mixed offsets: report the first cell whose offset differs from the first one.
            raise TraceError(rows.path, "submit times mix different time zones / UTC offsets; "
                             "use one offset (or none) throughout", column=rows.colname(column)) from e
        ts = pd.to_datetime(s, format="mixed", errors="coerce")
    if ts.dt.tz is not None:
        lo, hi = pd.Timestamp("1970-01-01", tz=ts.dt.tz), pd.Timestamp("2200-01-01", tz=ts.dt.tz)
    else:
        lo, hi = pd.Timestamp("1970-01-01"), pd.Timestamp("2200-01-01")
    ts = ts.where((ts >= lo) & (ts < hi))  # "-1" or "5" parse as years; not plausible submit times
    empty = _no_value(raw)
    bad = ts.isna().to_numpy() & ~empty
    rows.bad(empty, f"missing {column}", column, raw,
             lambda v: f"missing {column} ({_empty_cell(v)})")
    rows.bad(bad, f"unparseable {column}", column, raw,
             lambda v: f"cannot parse {column} {_show(v)} as a date/time "
                       "(expected e.g. '2020-09-01 08:00:00')")
    return ts


def _datetimes_to_seconds(ts: pd.Series, origin: pd.Timestamp) -> np.ndarray:
    delta = (ts - origin).to_numpy()
    out = np.zeros(len(ts), dtype=np.int64)
    ok = ~pd.isna(delta)
    out[ok] = (delta[ok] // np.timedelta64(1, "s")).astype(np.int64)
    return out


def _seconds(rows: _Rows, raw: pd.Series, column: str, what: str = "a number of seconds") -> np.ndarray:
    num = _numeric(rows, raw, column, required=True, invalid_reason=f"unparseable {column}", what=what)
    rows.bad(num < 0, f"negative {column}", column, raw,
             lambda v: f"negative {column} {_show(v)}; times must be >= 0 seconds")
    return _to_int64(num)


def _window_bound(value, origin: pd.Timestamp | None, path, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())  # seconds, checked as a number below; else a date/time
        except ValueError:
            pass
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if not np.isfinite(value):
            raise TraceError(path, f"{name} must be a finite number of seconds, got {value!r}")
        return float(value)
    if isinstance(value, pd.Timedelta):
        return value.total_seconds()
    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError) as e:
        raise TraceError(path, f"{name}={value!r} is neither seconds nor a date/time: {_one_line(e)}") from e
    if ts is pd.NaT:
        raise TraceError(path, f"{name}={value!r} is not a date/time")
    if origin is None:
        raise TraceError(path, f"{name}={value!r} is a date/time, but this trace's submit times are plain "
                               "seconds with no wall-clock origin; give the window in seconds")
    if ts.tzinfo is None and origin.tzinfo is not None:
        ts = ts.tz_localize(origin.tzinfo)
    elif ts.tzinfo is not None and origin.tzinfo is None:
        ts = ts.tz_convert(None)
    return (ts - origin).total_seconds()


# --------------------------------------------------------------------------------------------
# Loading


def load_trace(path, fmt: str | None = None, *, start=None, end=None,
               skip_bad_rows: bool = False) -> LoadedTrace:
    """Load and validate a trace file.

    Args:
        path: the CSV file (``.gz``/``.bz2``/``.zip``/``.xz`` compressed files work too).
        fmt: one of :data:`FORMATS`; ``None`` detects it from the header (:func:`detect_format`).
        start, end: optional submit-time window ``start <= submit_time < end``, either seconds
            relative to the trace origin or anything :class:`pandas.Timestamp` accepts (needs a
            trace with a wall-clock origin). Rows outside are dropped ("outside window").
        skip_bad_rows: drop invalid rows (counted by reason in ``dropped``) instead of raising.

    Raises:
        TraceError: the file is missing, unreadable, empty, has an unknown format, lacks required
            columns, or (unless ``skip_bad_rows``) contains an invalid row.
    """
    path = pathlib.Path(path)
    if fmt is None:
        fmt = detect_format(path)
    elif fmt not in FORMATS:
        raise TraceError(path, f"unknown trace format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    else:
        _read_header(path)  # readable, not empty, no duplicate column names

    df, lines, n_bad_lines = _read_rows(path, skip_bad_rows)
    df.columns = [str(c).strip() for c in df.columns]

    required = {"venus": _VENUS_REQUIRED, "helios": _HELIOS_REQUIRED,
                "philly": _PHILLY_REQUIRED, "csv": _CSV_REQUIRED}[fmt]
    missing_cols = [c for c in required if c not in df.columns]
    if missing_cols:
        raise TraceError(
            path,
            f"missing required column(s) for the {fmt} format: {', '.join(missing_cols)} "
            f"(the header has: {', '.join(df.columns)}; the {fmt} format needs: {', '.join(required)})",
            row=1, column=missing_cols[0],
        )
    if len(df) == 0:
        raise TraceError(path, "the file has a header but no job rows")

    renames = dict(_RENAMES[fmt])
    if fmt == "csv" and "name" not in df.columns and "jobname" in df.columns:
        renames["jobname"] = "name"
    source_name = {v: k for k, v in renames.items()}
    colname = lambda c: source_name.get(c, c)  # noqa: E731 - canonical -> name in the file
    df = df.rename(columns=renames)
    if fmt == "philly":
        df = df.drop(columns=[c for c in ("job_id", "user", "state", "name") if c in df.columns])

    rows = _Rows(path, lines, skip_bad_rows, colname)

    # Blank lines (and lines with only separators) are not jobs. Those at the end of the file are
    # ignored; any others are dropped and counted ("empty line"). Lines with too many fields are bad.
    all_empty = df.isna().all(axis=1).to_numpy()
    if all_empty.any():
        nonempty_idx = np.flatnonzero(~all_empty)
        last = int(nonempty_idx[-1]) if len(nonempty_idx) else -1
        trailing = np.arange(len(df)) > last
        rows.alive &= ~(all_empty & trailing)
        rows.drop(all_empty & ~trailing, "empty line")
    if n_bad_lines:
        rows.drop((df.iloc[:, 0] == _BAD_FIELDS).to_numpy(), "wrong number of fields")
        rows.drop((df.iloc[:, 0] == _BAD_QUOTE).to_numpy(), "unbalanced quote")
    # A file cut off mid-row (a copy or download stopped) ends without a line end, its last row
    # short of fields: read as a row with empty cells, it made a phantom VC (an admin trial).
    fields = _fields_of_cut_last_line(path, len(df.columns))
    if fields is not None and rows.alive.any():
        last = np.zeros(len(df), dtype=bool)
        last[int(np.flatnonzero(rows.alive)[-1])] = True
        rows.bad(last, "truncated last line", df.columns[min(fields, len(df.columns) - 1)], None,
                 lambda _v: f"the file ends in the middle of this row ({fields} of {len(df.columns)} fields and no "
                            "line end): was it cut off in a copy or download?")

    # ---- submit times and origin -------------------------------------------------------------
    raw_submit = df["submit_time"]
    origin: pd.Timestamp | None
    if fmt == "venus":
        submit = _seconds(rows, raw_submit, "submit_time")
        origin = VENUS_ORIGIN
    elif fmt in ("helios", "philly"):
        ts = _parse_datetimes(rows, raw_submit, "submit_time")
        origin, submit = _origin_and_seconds(ts, rows)
    else:  # csv: integer seconds or datetimes, detected
        stripped = raw_submit.str.strip()
        nonempty = (stripped.notna() & (stripped != "")).to_numpy() & rows.alive
        as_num = pd.to_numeric(stripped, errors="coerce").notna().to_numpy()
        # integer seconds unless most cells are not numbers (then date/time strings)
        if int((as_num & nonempty).sum()) * 2 >= int(nonempty.sum()):
            submit = _seconds(rows, raw_submit, "submit_time",
                              what="a number of seconds (or date/times like '2020-09-01 08:00:00' "
                                   "throughout the column)")
            origin = None
        else:
            ts = _parse_datetimes(rows, raw_submit, "submit_time")
            origin, submit = _origin_and_seconds(ts, rows)

    if origin is None:
        # seconds (not dates): past 1e11 (the year 5138 as Unix seconds) they are milliseconds, or
        # worse; read as seconds, a trace of one job a minute spread over 1,700 years and queued nothing
        rows.bad(np.nan_to_num(submit) >= _MAX_SUBMIT_S, "implausible submit_time", "submit_time", raw_submit,
                 lambda v: f"submit_time {_show(v)} is past the year 5000 as seconds: Unix milliseconds? "
                           "give seconds (or date/times)")

    # ---- window --------------------------------------------------------------------------------
    lo = _window_bound(start, origin, path, "start")
    hi = _window_bound(end, origin, path, "end")
    if lo is not None and hi is not None and hi <= lo:
        raise TraceError(path, f"empty submit-time window: end ({end!r}) is not after start ({start!r})")
    if lo is not None or hi is not None:
        outside = np.zeros(len(df), dtype=bool)
        if lo is not None:
            outside |= submit < lo
        if hi is not None:
            outside |= submit >= hi
        rows.drop(outside, "outside window")

    # ---- job id ----------------------------------------------------------------------------------
    if fmt == "philly":
        job_id = "philly-" + pd.Series(lines).astype(str)
        gen_ids = True
    elif "job_id" in df.columns:
        job_id = _text(rows, df["job_id"], "job_id", required=True)
        gen_ids = False
    else:
        job_id = "job-" + pd.Series(lines).astype(str)
        gen_ids = True

    # ---- gpus ------------------------------------------------------------------------------------
    raw_gpu = df["gpu_num"]
    gpu = _numeric(rows, raw_gpu, "gpu_num", required=True, what="a whole number of GPUs >= 1")
    gpu0 = np.nan_to_num(gpu, nan=1.0)
    rows.bad(gpu0 != np.round(gpu0), "non-integer gpu_num", "gpu_num", raw_gpu,
             lambda v: f"gpu_num must be a whole number of GPUs >= 1, got {_show(v)}")
    if fmt == "helios":
        rows.drop(gpu0 == 0, "cpu-only job")
    rows.bad(gpu0 <= 0, "non-positive gpu_num", "gpu_num", raw_gpu,
             lambda v: f"gpu_num must be >= 1, got {_show(v)}"
             + (" (CPU-only jobs have no place in a GPU trace; remove them)" if fmt != "helios" else ""))

    # ---- duration --------------------------------------------------------------------------------
    raw_dur = df["duration"]
    if fmt == "helios" and "start_time" in df.columns:
        never = _no_value(raw_dur) & _no_value(df["start_time"])
        rows.drop(never, "never started")
    dur = _numeric(rows, raw_dur, "duration", required=True, what="a number of seconds >= 0")
    rows.bad(np.nan_to_num(dur) < 0, "negative duration", "duration", raw_dur,
             lambda v: f"negative duration {_show(v)}; durations must be >= 0 seconds")
    rows.bad(np.nan_to_num(dur) > _MAX_DURATION_S, "implausible duration", "duration", raw_dur,
             lambda v: f"duration {_show(v)} s is over a year: milliseconds? durations are seconds")

    # ---- cpus ------------------------------------------------------------------------------------
    if "cpu_num" in df.columns:
        raw_cpu = df["cpu_num"]
        cpu = _numeric(rows, raw_cpu, "cpu_num", required=fmt in ("venus", "helios"),
                       what="a whole number of CPUs >= 0")
        cpu0 = np.nan_to_num(cpu, nan=0.0)
        rows.bad((cpu0 < 0) | (cpu0 != np.round(cpu0)), "invalid cpu_num", "cpu_num", raw_cpu,
                 lambda v: f"cpu_num must be a whole number of CPUs >= 0, got {_show(v)}")
    else:
        cpu0 = np.zeros(len(df))

    # ---- text fields -----------------------------------------------------------------------------
    strict = fmt in ("venus", "helios")
    vc = _text(rows, df.get("vc"), "vc", required=strict or fmt == "philly", default=DEFAULT_VC)
    # an empty cell (or a field missing from a short row) in a vc column: the default VC, as
    # documented, but said in the report: it made a VC, with a node of its own, that no message explained
    vc_cells = df["vc"].str.strip() if "vc" in df.columns and not strict and fmt != "philly" else None
    vc_defaulted = (vc_cells.isna() | (vc_cells == "")).to_numpy() if vc_cells is not None else None
    if vc is None:
        vc = pd.Series(DEFAULT_VC, index=df.index, dtype=str)
    user = _text(rows, df.get("user"), "user", required=strict)
    state = _text(rows, df.get("state"), "state", required=strict)
    name = _text(rows, df.get("name"), "name", required=False)

    # ---- workload ----------------------------------------------------------------------------------
    workload_present = [c for c in WORKLOAD_COLUMNS if c in df.columns]
    workload: dict[str, object] = {}
    if workload_present:
        for c in WORKLOAD_TEXT_COLUMNS:
            workload[c] = _text(rows, df.get(c), c, required=False) if c in df.columns else None
        for c in WORKLOAD_NUMERIC_COLUMNS:
            if c in df.columns:
                lo, hi, what = _WORKLOAD_RANGES[c]
                v = _numeric(rows, df[c], c, required=False, what=what)
                out_of_range = ~np.isnan(v) & ((np.nan_to_num(v) < lo) | (np.nan_to_num(v) > hi))
                if c == "amp":
                    out_of_range |= ~np.isnan(v) & ~np.isin(v, (0.0, 1.0))
                rows.bad(out_of_range, f"invalid {c}", c, df[c],
                         lambda x, c=c, what=what: f"{c} must be {what}, got {_show(x)}")
                workload[c] = v
            else:
                workload[c] = None

    # ---- time limit ----------------------------------------------------------------------------------
    limit = None
    if TIME_LIMIT_COLUMN in df.columns:
        raw_lim = df[TIME_LIMIT_COLUMN]
        # sacct's and scontrol's spellings of "no limit" are no limit known, not an error
        unlimited = raw_lim.astype(str).str.strip().str.lower().isin(("unlimited", "infinite")).to_numpy()
        raw_lim = raw_lim.where(~unlimited, None)
        limit = _numeric(rows, raw_lim, TIME_LIMIT_COLUMN, required=False,
                         what="a time limit in seconds >= 1 (empty: none known)")
        rows.bad(~np.isnan(limit) & (np.nan_to_num(limit, nan=1.0) < 1), "invalid time_limit", TIME_LIMIT_COLUMN,
                 raw_lim, lambda v: f"time_limit must be seconds >= 1 (empty: none known), got {_show(v)}")

    # ---- duplicate job ids (among surviving rows) ----------------------------------------------
    if not gen_ids:
        dup = job_id.where(rows.alive).duplicated(keep="first").to_numpy() & rows.alive
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            same = np.flatnonzero((job_id == job_id.iloc[i]).to_numpy() & rows.alive)
            first = int(lines[same[0]])
            rows.bad(dup, "duplicate job_id", "job_id", job_id,
                     lambda v: f"duplicate job_id {_show(v)} (first seen on row {first})")

    # ---- assemble ------------------------------------------------------------------------------------
    keep = rows.alive
    if not keep.any():
        if set(rows.dropped) <= {"empty line"}:
            raise TraceError(path, "the file has a header but no job rows")
        summary = ", ".join(f"{n} {r}" for r, n in rows.dropped.items()) or "nothing"
        if set(rows.dropped) <= {"empty line", "outside window"}:
            raise EmptyWindowError(path, f"no jobs left after dropping rows ({summary})")
        raise TraceError(path, f"no jobs left after dropping rows ({summary})")

    n = len(df)
    out = {
        "job_id": job_id.to_numpy(dtype=object),
        "user": (user if user is not None else pd.Series("", index=df.index)).to_numpy(dtype=object),
        "vc": vc.to_numpy(dtype=object),
        "gpu_num": _to_int64(gpu),
        "cpu_num": _to_int64(cpu0),
        "submit_time": submit,
        "duration": _to_int64(dur),
        "state": (state if state is not None else
                  pd.Series("COMPLETED" if fmt == "philly" else "", index=df.index)).to_numpy(dtype=object),
        "name": (name if name is not None else pd.Series("", index=df.index)).to_numpy(dtype=object),
        "row": lines,
    }
    if workload_present:
        for c in WORKLOAD_COLUMNS:
            v = workload[c]
            if c in WORKLOAD_TEXT_COLUMNS:
                out[c] = (v if v is not None else pd.Series("", index=df.index)).to_numpy(dtype=object)
            else:
                out[c] = v if v is not None else np.full(n, np.nan)
    if limit is not None:
        out[TIME_LIMIT_COLUMN] = np.ceil(limit)

    jobs = pd.DataFrame({k: (np.asarray(v)[keep]) for k, v in out.items()})
    order = np.argsort(jobs["submit_time"].to_numpy(), kind="stable")
    jobs = jobs.iloc[order].reset_index(drop=True)
    jobs["seq"] = np.arange(len(jobs), dtype=np.int64)

    cols = list(CANONICAL_COLUMNS) + (list(WORKLOAD_COLUMNS) if workload_present else []) \
        + ([TIME_LIMIT_COLUMN] if limit is not None else [])
    jobs = jobs[cols]
    for c in ("job_id", "user", "vc", "state", "name") + (WORKLOAD_TEXT_COLUMNS if workload_present else ()):
        jobs[c] = jobs[c].astype(str)
    for c in ("gpu_num", "cpu_num", "submit_time", "duration", "row", "seq"):
        jobs[c] = jobs[c].astype(np.int64)
    if workload_present:
        for c in WORKLOAD_NUMERIC_COLUMNS:
            jobs[c] = jobs[c].astype(np.float64)
    if limit is not None:
        jobs[TIME_LIMIT_COLUMN] = jobs[TIME_LIMIT_COLUMN].astype(np.float64)

    missing_inputs = []
    if "user" not in df.columns:
        missing_inputs.append("user")
    if "name" not in df.columns:
        missing_inputs.append("name")
    if len(workload_present) < len(WORKLOAD_COLUMNS):
        missing_inputs.append("workload")

    return LoadedTrace(jobs=jobs, path=str(path), fmt=fmt, origin=origin,
                       dropped=dict(rows.dropped), missing_inputs=missing_inputs,
                       vc_defaulted=int((vc_defaulted & keep).sum()) if vc_defaulted is not None else 0)


# What a profiling run can measure (the packing and speed models read these as such); a value
# outside is a unit mix-up (a fraction for a percentage, bytes for MiB) or a broken row.
_WORKLOAD_RANGES = {
    "batchsize": (0.0, math.inf, "a batch size >= 0"),
    "amp": (0.0, 1.0, "0 or 1 (mixed precision off/on)"),
    "speed": (0.0, math.inf, "a speed >= 0 (iterations or samples per second)"),
    "gpu_util": (0.0, 100.0, "a percentage from 0 to 100"),
    "gmem_util": (0.0, 100.0, "a percentage from 0 to 100"),
    "gmem": (0.0, 16.0 * 2**20, "GPU memory in MiB, from 0 to 16 TiB"),
}


def _origin_and_seconds(ts: pd.Series, rows: _Rows) -> tuple[pd.Timestamp | None, np.ndarray]:
    valid = ts.dropna()
    if valid.empty:
        return None, np.zeros(len(ts), dtype=np.int64)
    origin = valid.min().normalize()  # midnight of the earliest submit's day
    return origin, _datetimes_to_seconds(ts, origin)


def _gpu_hours(h: float) -> str:
    """GPU-hours as a report line gives them: whole hours, tenths below 10 (a small test trace's
    0.5 read as 0)."""
    return f"{h:.1f} GPU-hours" if h < 10 else f"{h:.0f} GPU-hours"
