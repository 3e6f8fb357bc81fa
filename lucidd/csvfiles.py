"""Reading the small CSV files an admin writes by hand or exports from a spreadsheet (VC configs,
estimates files): one check that pandas would otherwise hide."""

from __future__ import annotations

import csv

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
    trailing comma leaves, are allowed and dropped; a longer row is a RowWidthError. A compressed
    file (COMPRESSED_SUFFIXES) is left to pandas, which decompresses it, unchecked."""
    if str(path).lower().endswith(COMPRESSED_SUFFIXES):
        return pd.read_csv(path, index_col=False, **kw)
    csv.field_size_limit(1 << 30)  # pandas reads longer fields than the csv module's 128 KiB default
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.reader(f)
        header = next(rows, None)
        width = len(header) if header is not None else 0
        for line, row in enumerate(rows, start=2):
            while len(row) > width and row[-1].strip() == "":
                row = row[:-1]
            if len(row) > width:
                raise RowWidthError(line, len(row), width)
    return pd.read_csv(path, index_col=False, **kw)
