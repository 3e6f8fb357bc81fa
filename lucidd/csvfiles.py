"""Reading the small CSV files an admin writes by hand or exports from a spreadsheet (VC configs,
estimates files): one check that pandas would otherwise hide."""

from __future__ import annotations

import csv
import io

import pandas as pd


# files pandas decompresses by their name (read as they are; not line-checked)
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zip", ".zst", ".tar")


class RowWidthError(ValueError):
    """A data row with more fields than the header (line counts from 1, the header's included)."""

    def __init__(self, line: int, fields: int, header: int):
        super().__init__(f"row {line} has {fields} fields, the header {header}")
        self.line, self.fields, self.header = line, fields, header


def read_table(path: str, **kw) -> pd.DataFrame:
    """pd.read_csv, with each row's width checked against the header. A row one field longer makes
    pandas take the first column as the index and shift the others (a spreadsheet's trailing comma
    on every row did that: a VC config read its node counts as names). Empty trailing fields, as a
    trailing comma leaves, are allowed and dropped, on some rows as on all (pandas is given the rows
    so trimmed: given the file, it refused one trailing comma among rows without); a longer row is
    a RowWidthError. Blank lines are skipped, as pandas skips them. `frame.attrs["lines"]` holds each
    row's line in the file (a quoted line break makes a row span two), for messages; a compressed
    file (COMPRESSED_SUFFIXES) is left to pandas, which decompresses it, unchecked, and has none."""
    if str(path).lower().endswith(COMPRESSED_SUFFIXES):
        return pd.read_csv(path, index_col=False, **kw)
    csv.field_size_limit(1 << 30)  # pandas reads longer fields than the csv module's 128 KiB default
    out, lines = io.StringIO(), []
    writer = csv.writer(out, lineterminator="\n")
    # strict: a file that is not UTF-8 is refused (pandas, reading the file itself, refused it too)
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        if header is not None:
            writer.writerow(header)
        width = len(header) if header is not None else 0
        last = rows.line_num
        for row in rows:
            line, last = last + 1, rows.line_num  # where the row starts (it may span several lines)
            if not row:
                continue  # a blank line
            while len(row) > width and row[-1].strip() == "":
                row = row[:-1]
            if len(row) > width:
                raise RowWidthError(line, len(row), width)
            writer.writerow(row)
            lines.append(line)
    out.seek(0)
    frame = pd.read_csv(out, index_col=False, **kw) if header is not None else pd.read_csv(path, index_col=False, **kw)
    frame.attrs["lines"] = lines
    return frame


def row_line(frame: pd.DataFrame, i: int) -> int:
    """The file line of the frame's `i`-th row (read_table's), or i + 2 where it is not known."""
    lines = frame.attrs.get("lines")
    return int(lines[i]) if lines and 0 <= i < len(lines) else i + 2
