"""Errors that carry a message meant for an admin, not a traceback."""


class LucidError(Exception):
    """Base class: the CLI prints str(error) and exits non-zero."""


class TraceError(LucidError):
    """A trace file cannot be used. The message names the file and, where known, the row and column."""

    def __init__(self, path, message, row=None, column=None):
        self.path = str(path)
        self.row = row
        self.column = column
        where = self.path
        if row is not None:
            where += f", row {row}"
        if column is not None:
            where += f", column '{column}'"
        super().__init__(f"{where}: {message}")


class EmptyWindowError(TraceError):
    """No job of the trace was submitted inside the asked-for window (every other row was fine)."""


class ConfigError(LucidError):
    """A configuration file or flag value is invalid."""
