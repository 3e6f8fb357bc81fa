"""Output directories of `lucidctl simulate` and `lucidctl tune`.

Checked before any long work starts (a file in the way, a directory that cannot be written), and
kept to one run's files: a re-run into the same directory first removes what an earlier run of
lucidctl wrote there (the files its ``manifest.json`` lists, or, from before manifests, the files
lucidctl names its outputs), and refuses a directory holding anything else, so stale results
never sit beside fresh ones and nobody's own files are deleted. After the run, ``manifest.json``
lists every file written, with the command that wrote them.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import os
import shutil
import tempfile

from .errors import ConfigError

MANIFEST = "manifest.json"
#: What lucidctl writes into an output directory (simulate, tune, and simulate's saved models).
OUR_NAMES = ("summary.csv", "jobs_*.csv", "jct_cdf.png", "timeline.png", "proposal.json", "tuning_points.csv",
             MANIFEST)
MODELS_DIR = "models"
OUR_MODEL_NAMES = ("index.json", "job_features.csv", "*.joblib")


def _ours(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) == 1:
        return any(fnmatch.fnmatchcase(parts[0], p) for p in OUR_NAMES)
    if len(parts) == 2 and parts[0] == MODELS_DIR:
        return any(fnmatch.fnmatchcase(parts[1], p) for p in OUR_MODEL_NAMES)
    return False


def _files(root: str) -> list[str]:
    """What the directory holds, as '/'-separated paths relative to it: its files, the files of
    its models/ folder, and any other folder as 'name/' (never looked into)."""
    out = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            if entry.name != MODELS_DIR:
                out.append(entry.name + "/")
                continue
            for sub in sorted(os.scandir(entry.path), key=lambda e: e.name):
                is_dir = sub.is_dir(follow_symlinks=False)
                out.append(f"{MODELS_DIR}/{sub.name}" + ("/" if is_dir else ""))
        else:
            out.append(entry.name)
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class OutputDir:
    """An output directory made ready for one run (see the module docstring)."""

    def __init__(self, path: str, command: str, stale: list[str]):
        self.path = path
        self.command = command
        self.stale = stale  # relative paths an earlier lucidctl run left; removed by clear()

    @classmethod
    def prepare(cls, path, command: str, flag: str = "--out", protect=()) -> "OutputDir":
        """Create the directory if needed and check it can be written and holds nothing foreign.
        `protect`: this run's input files, never to be removed. Raises ConfigError naming `flag`
        and the path."""
        path = os.fspath(path)
        where = f"{flag} {path}"
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ConfigError(f"{where}: exists and is not a directory; give a directory for the output files")
        if not os.path.isdir(path):
            parent = os.path.dirname(os.path.abspath(path))
            while parent and not os.path.lexists(parent):
                parent = os.path.dirname(parent)
            if not os.path.isdir(parent):
                raise ConfigError(f"{where}: {parent} is not a directory")
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"{where}: cannot create the directory ({exc.strerror or exc})") from None
        try:
            fd, probe = tempfile.mkstemp(dir=path, prefix=".lucidctl-write-test-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise ConfigError(f"{where}: cannot write files there ({exc.strerror or exc})") from None

        listed = set()
        manifest = os.path.join(path, MANIFEST)
        if os.path.isfile(manifest):
            try:
                with open(manifest) as fh:
                    m = json.load(fh)
                if m.get("tool") == "lucidctl":
                    listed = {str(f) for f in m.get("files", [])}
            except (OSError, ValueError, AttributeError):
                listed = set()
        present = _files(path)
        if listed:
            stale = [f for f in present if f in listed or f == MANIFEST]
        else:
            # No manifest (a run from before manifests): our output names count as ours only
            # beside a summary.csv or proposal.json, the files every such run wrote; a lone
            # jobs_mine.csv is the user's.
            legacy = "summary.csv" in present or "proposal.json" in present
            stale = [f for f in present if legacy and _ours(f)]
        inputs = {os.path.realpath(p) for p in protect if p}
        for f in stale:
            if os.path.realpath(os.path.join(path, f)) in inputs:
                raise ConfigError(f"{where}: holds {f}, an input of this run; give another output directory")
        foreign = [f for f in present if f not in stale]
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise ConfigError(f"{where}: the directory holds files lucidctl did not write ({shown}); "
                              "give a new or empty directory, or move those files away")
        return cls(path, command, stale)

    def clear(self) -> None:
        """Remove the earlier run's files (call just before writing the new ones)."""
        for rel in self.stale:
            try:
                os.unlink(os.path.join(self.path, rel))
            except FileNotFoundError:
                pass
        models = os.path.join(self.path, MODELS_DIR)
        if os.path.isdir(models) and not os.listdir(models):
            shutil.rmtree(models, ignore_errors=True)
        self.stale = []

    def finish(self, info: dict | None = None) -> str:
        """Write manifest.json listing every file now in the directory; returns its path."""
        from . import __version__

        files = [f for f in _files(self.path) if f != MANIFEST]
        doc = {"tool": "lucidctl", "version": __version__, "command": self.command,
               "written": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               **(info or {}), "files": files}
        target = os.path.join(self.path, MANIFEST)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".manifest-")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; the other outputs follow the umask
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=2, default=str)
            fh.write("\n")
        os.replace(tmp, target)
        return target
