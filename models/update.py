"""Update engine: periodic refit, drift measure and atomic model swap (see docs/models-update.md).

Three parts, all pure Python and driven by a time passed in (``now``, integer seconds in the clock
of the job table's ``submit_time``), so the simulator and the daemon drive them the same way; no
function here reads a clock.

* :class:`ModelStore` -- a directory of versioned model files (``duration-v0003.joblib``, written
  with each model's own ``save``, i.e. ``models.base.save_model``: temp file + rename, with a
  version stamp) plus one pointer file per kind (``duration.current``, content = the file name),
  replaced with ``os.replace``; :meth:`ModelStore.load_current` falls back to the previous good
  version when the current file is missing, corrupt or incompatible, and says so.  The last
  ``keep`` versions are kept.  ``updates.jsonl`` is an append-only log of every refit attempt,
  drift measurement and rollback.
* :class:`UpdateEngine` -- decides when a refit is due (:meth:`UpdateEngine.due`), refits the duration
  model on jobs that ended by ``now - holdout_s`` (never on the future), compares candidate and
  current model on the held-out jobs and swaps only when the candidate is not worse than the
  current by more than a tolerance.  Data or fit problems never raise: the result says what
  happened and why, and the current model stays.
* :func:`psi` / :class:`DriftReport` -- population stability index of the model inputs between the
  training window and the recent window, plus the current model's error on recent jobs against
  its error when it was swapped in.  A flagged drift makes :meth:`UpdateEngine.due` return True.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from models.base import ModelError

log = logging.getLogger(__name__)

__all__ = [
    "DAY",
    "WEEK",
    "DECISIONS",
    "ModelStore",
    "LoadedModel",
    "UpdateConfig",
    "UpdateEngine",
    "RefitResult",
    "FeatureDrift",
    "DriftReport",
    "psi",
    "psi_test",
    "duration_metrics",
    "visible_jobs",
]

DAY = 86_400
WEEK = 7 * DAY

#: every value RefitResult.decision can take
DECISIONS = ("swapped", "rejected", "skipped", "failed")

LOG_NAME = "updates.jsonl"
_KIND_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_TMP_MODEL_PREFIX = ".tmp-model-"  # models.base.save_model's temp-file prefix
_TMP_POINTER_PREFIX = ".tmp-pointer-"


def _default_classes() -> dict[str, Any]:
    """Model kind -> class with ``.save(path)`` and ``Class.load(path)`` (imported lazily)."""
    from models.duration import DurationModel
    from models.packing import PackingModel
    from models.throughput import ThroughputModel

    return {"duration": DurationModel, "throughput": ThroughputModel, "packing": PackingModel}


# ================================================================================================
# JSON helpers
# ================================================================================================
def _jsonable(obj: Any) -> Any:
    """Plain JSON data: numpy scalars -> Python, NaN/inf -> None, tuples -> lists, dataclasses -> dicts."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (pd.Timestamp,)):
        return obj.isoformat()
    return obj


# ================================================================================================
# model store
# ================================================================================================
#: How far the clock may seem to step back (seconds) before a refit logged "in the future" is
#: taken as a clock that was wrong, and the refit counts as due.
CLOCK_BACK_SLACK_S = 600
#: While no model file of a kind loads, a refit is due at most this often (or retry_s, if shorter).
UNUSABLE_REFIT_GAP_S = 3600


@dataclass
class LoadedModel:
    """What :meth:`ModelStore.load_current` returns.

    fallback: True when the model is not the one the pointer names (that one was missing, corrupt or
    incompatible, or there is no pointer); ``message`` then says why, for an admin.
    """

    kind: str
    version: int
    path: Path
    model: Any
    stamp: Any = None
    fallback: bool = False
    message: str = ""


class ModelStore:
    """Versioned model files, an atomically replaced pointer per kind, and the update log.

    Layout of ``root``::

        duration-v0001.joblib  duration-v0002.joblib  duration.current   (-> "duration-v0002.joblib")
        throughput-v0001.joblib  throughput.current
        packing-v0001.joblib     packing.current
        updates.jsonl            (one JSON object per line, append-only)
        .lock                    (writers serialise on it with flock)

    ``keep``: versions kept per kind (the newest ``keep``, plus the current one if an admin rolled
    back to an older version).  ``classes``: kind -> model class (default: duration, throughput,
    packing); a class needs ``obj.save(path)`` and ``Class.load(path)``.

    The folder is made by the first write (a publish, a pointer change, a prune, a log line), not
    here: a store that is only read (`lucidd --once --dry-run`, `lucidctl explain`) creates nothing,
    and a folder that does not exist yet reads as a store with no model.
    """

    def __init__(self, root: str | os.PathLike, keep: int = 5, classes: dict[str, Any] | None = None):
        if int(keep) < 1:
            raise ModelError(f"keep must be >= 1, not {keep}")
        self.root = Path(root)
        self.keep = int(keep)
        self._classes = dict(classes) if classes is not None else None

    # -- names ------------------------------------------------------------------------------------
    @property
    def classes(self) -> dict[str, Any]:
        if self._classes is None:
            self._classes = _default_classes()
        return self._classes

    def _check_kind(self, kind: str) -> str:
        if not isinstance(kind, str) or not _KIND_RE.match(kind):
            raise ModelError(f"invalid model kind {kind!r} (lower-case letters, digits, '_')")
        return kind

    def _class(self, kind: str):
        self._check_kind(kind)
        try:
            return self.classes[kind]
        except KeyError:
            have = ", ".join(sorted(self.classes))
            raise ModelError(f"no model class registered for kind '{kind}' (have: {have})") from None

    @staticmethod
    def file_name(kind: str, version: int) -> str:
        return f"{kind}-v{int(version):04d}.joblib"

    def path_of(self, kind: str, version: int) -> Path:
        return self.root / self.file_name(self._check_kind(kind), version)

    def pointer_path(self, kind: str) -> Path:
        return self.root / f"{self._check_kind(kind)}.current"

    @property
    def log_path(self) -> Path:
        return self.root / LOG_NAME

    def _parse(self, kind: str, name: str) -> int | None:
        m = re.fullmatch(rf"{re.escape(kind)}-v(\d+)\.joblib", name)
        return int(m.group(1)) if m else None

    def versions(self, kind: str) -> list[int]:
        """Versions of ``kind`` present on disk, ascending."""
        self._check_kind(kind)
        if not self.root.is_dir():  # never written yet
            return []
        out = []
        for p in self.root.iterdir():
            v = self._parse(kind, p.name)
            if v is not None and p.is_file():
                out.append(v)
        return sorted(out)

    def current_version(self, kind: str) -> int | None:
        """The version the pointer names (None: no pointer, or an unreadable one)."""
        name = self._read_pointer(kind)
        return None if name is None else self._parse(kind, name)

    def _read_pointer(self, kind: str) -> str | None:
        try:
            return self.pointer_path(kind).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("%s: unreadable pointer (%s)", self.pointer_path(kind), exc)
            return ""

    # -- writing ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self):
        """Serialise writers (one refit at a time per store); readers never take it."""
        self.root.mkdir(parents=True, exist_ok=True)  # every writer comes through here first
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _fsync_dir(self) -> None:
        try:
            fd = os.open(self.root, os.O_RDONLY)
        except OSError:  # pragma: no cover - e.g. platforms without directory fds
            return
        try:
            os.fsync(fd)
        except OSError:  # pragma: no cover
            pass
        finally:
            os.close(fd)

    @staticmethod
    def _fsync_file(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_pointer(self, kind: str, name: str) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f"{_TMP_POINTER_PREFIX}{kind}-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(name + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.pointer_path(kind))
            self._fsync_dir()
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _clean_temp(self) -> None:
        """Remove temp files left by a writer that died (we hold the writer lock, so none is live)."""
        for p in self.root.iterdir():
            if p.name.startswith((_TMP_MODEL_PREFIX, _TMP_POINTER_PREFIX)):
                with contextlib.suppress(OSError):
                    p.unlink()

    def publish(self, kind: str, model: Any) -> int:
        """Write ``model`` as the next version of ``kind`` and make it current; returns its version.

        Order: model file written (atomically) and fsynced, then the pointer replaced, then old
        versions pruned. A crash at any point leaves the pointer naming a complete file.
        """
        self._class(kind)
        with self._lock():
            self._clean_temp()
            existing = self.versions(kind)
            version = max(existing + [self.current_version(kind) or 0]) + 1
            path = self.path_of(kind, version)
            model.save(path)
            self._fsync_file(path)
            self._fsync_dir()
            self._write_pointer(kind, path.name)
            self._prune_locked(kind)
        log.info("model store %s: %s is now current", self.root, path.name)
        return version

    def set_current(self, kind: str, version: int, now: int | None = None, reason: str = "") -> None:
        """Point ``kind`` at an existing ``version`` (an admin rollback); the file must load.

        Logs a ``rollback`` event. Raises ModelError if the version is missing or unusable.
        """
        cls = self._class(kind)
        path = self.path_of(kind, version)
        if not path.is_file():
            raise ModelError(f"{path}: no such model version")
        cls.load(path)  # refuse to point at a file that does not load
        with self._lock():
            previous = self.current_version(kind)
            self._write_pointer(kind, path.name)
        self.log_event({"event": "rollback", "kind": kind, "time": now, "version": int(version),
                        "previous_version": previous, "reason": reason})

    def prune(self, kind: str) -> list[int]:
        """Delete versions beyond the newest ``keep`` (never the current one); returns those deleted."""
        with self._lock():
            return self._prune_locked(kind)

    def _prune_locked(self, kind: str) -> list[int]:
        versions = self.versions(kind)
        current = self.current_version(kind)
        keep = set(versions[-self.keep:])
        if current is not None:
            keep.add(current)
        deleted = []
        for v in versions:
            if v not in keep:
                with contextlib.suppress(FileNotFoundError):
                    self.path_of(kind, v).unlink()
                deleted.append(v)
        return deleted

    # -- reading ----------------------------------------------------------------------------------
    def _load_file(self, kind: str, version: int) -> LoadedModel:
        path = self.path_of(kind, version)
        try:
            obj = self._class(kind).load(path)
        except ModelError:
            raise
        except Exception as exc:  # a pickle of another library version can fail in its own ways
            raise ModelError(f"{path}: cannot load ({exc.__class__.__name__}: {exc})") from None
        stamp = getattr(obj, "stamp_", None) or getattr(obj, "stamp", None)
        return LoadedModel(kind=kind, version=version, path=path, model=obj, stamp=stamp)

    def load(self, kind: str, version: int) -> LoadedModel:
        """One saved version (ModelError if it is missing or unusable)."""
        self._check_kind(kind)
        return self._load_file(kind, int(version))

    def load_current(self, kind: str) -> LoadedModel | None:
        """The current model of ``kind``, or the previous good version if the current one is unusable.

        Returns None when the store has no model of this kind at all (no pointer, no file). When the
        pointer names a file that is missing, corrupt or incompatible, the newest older version that
        loads is returned with ``fallback=True`` and a ``message`` saying what was wrong (also logged
        as a warning); the pointer itself is not changed (readers never write). Without a pointer,
        the newest loadable version is returned, also as a fallback. Raises ModelError only when
        model files exist but none of them loads.
        """
        self._check_kind(kind)
        name = self._read_pointer(kind)
        problems: list[str] = []
        current = None
        if name:
            current = self._parse(kind, name)
            if current is None:
                problems.append(f"pointer {self.pointer_path(kind).name} names '{name}', not a {kind} model file")
            else:
                try:
                    return self._load_file(kind, current)
                except ModelError as exc:
                    # a writer may have swapped and pruned between our two reads: follow the pointer once more
                    again = self.current_version(kind)
                    if again is not None and again != current:
                        try:
                            return self._load_file(kind, again)
                        except ModelError as exc2:
                            current, exc = again, exc2
                    problems.append(f"current model {self.file_name(kind, current)} is unusable ({exc})")
        elif name == "":
            problems.append(f"pointer {self.pointer_path(kind).name} is empty or unreadable")
        versions = self.versions(kind)
        if name is None and not versions:
            return None
        candidates = [v for v in reversed(versions) if current is None or v < current]
        if name is None:
            problems.append(f"no pointer {self.pointer_path(kind).name}")
        for v in candidates:
            try:
                lm = self._load_file(kind, v)
            except ModelError as exc:
                problems.append(f"{self.file_name(kind, v)} is unusable ({exc})")
                continue
            lm.fallback = True
            lm.message = f"{kind}: " + "; ".join(problems) + f"; using previous version {lm.path.name}"
            log.warning("model store %s: %s", self.root, lm.message)
            return lm
        raise ModelError(f"{kind}: no usable model in {self.root}: " + "; ".join(problems or ["no model files"]))

    # -- the log ----------------------------------------------------------------------------------
    def log_event(self, record: dict) -> None:
        """Append one JSON line to updates.jsonl (a single O_APPEND write, fsynced)."""
        line = json.dumps(_jsonable(record), sort_keys=False, allow_nan=False) + "\n"
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_log(self, kind: str | None = None, event: str | None = None) -> list[dict]:
        """Parsed log records (optionally of one kind / event); unparseable lines are skipped with a
        warning, each on its own: one bad byte (a hand edit, a bad disk block) once made the whole
        log unreadable, and with it the update engine, so no model served and none was refitted (a
        review). A log that cannot be read at all (permissions, a directory there) is read as empty,
        with a warning: the model files stand without it."""
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("%s: cannot be read (%s): the update log is taken as empty", self.log_path,
                        exc.strerror or exc)
            return []
        out = []
        for i, raw in enumerate(data.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                log.warning("%s:%d: not JSON, skipped", self.log_path, i)
                continue
            if not isinstance(rec, dict):
                continue
            if kind is not None and rec.get("kind") != kind:
                continue
            if event is not None and rec.get("event") != event:
                continue
            out.append(rec)
        return out


# ================================================================================================
# drift
# ================================================================================================
def _as_float_array(x) -> np.ndarray:
    a = np.asarray(x if isinstance(x, (np.ndarray, pd.Series)) else list(x), dtype=float)
    return a[np.isfinite(a)]


def psi_test(reference: Iterable[float], recent: Iterable[float], bins: int = 10) -> tuple[float, float, int]:
    """(PSI, p-value, bins used) of ``recent`` against ``reference``; see :func:`psi`.

    The p-value is that of sampling noise alone: for two samples of one distribution
    ``PSI / (1/n_ref + 1/n_recent)`` is approximately chi-square with ``bins - 1`` degrees of
    freedom (PSI is the symmetric Kullback-Leibler divergence, which approximates the chi-square
    distance). NaNs when either side is empty.
    """
    from scipy.stats import chi2

    if bins < 2:
        raise ModelError("psi needs bins >= 2")
    ref, rec = _as_float_array(reference), _as_float_array(recent)
    if len(ref) == 0 or len(rec) == 0:
        return float("nan"), float("nan"), 0
    # at most one bin per 5 jobs of the smaller side (the chi-square rule of thumb)
    k_max = max(2, min(int(bins), min(len(ref), len(rec)) // 5))
    edges = np.unique(np.quantile(ref, np.linspace(0.0, 1.0, k_max + 1)[1:-1]))
    k = len(edges) + 1
    a = np.bincount(np.searchsorted(edges, ref, side="left"), minlength=k) + 0.5
    b = np.bincount(np.searchsorted(edges, rec, side="left"), minlength=k) + 0.5
    p, q = a / a.sum(), b / b.sum()
    value = float(np.sum((q - p) * np.log(q / p)))
    stat = value / (1.0 / len(ref) + 1.0 / len(rec))
    pval = float(chi2.sf(stat, k - 1)) if k > 1 else 1.0
    return value, pval, int(k)


def psi(reference: Iterable[float], recent: Iterable[float], bins: int = 10) -> float:
    """Population stability index of ``recent`` against ``reference``.

    Bins are the reference's quantiles (at most ``bins``, and at most one per 5 jobs of the smaller
    sample; duplicate edges merged, so a discrete input such as gpu_num gets one bin per value),
    right-closed and open at both ends. Bin counts get a pseudo-count of 0.5 (so an empty bin does
    not blow up the log). ``PSI = sum((recent - ref) * ln(recent / ref))`` over the bin shares: 0 for
    identical samples; < 0.1 small, 0.1-0.2 moderate, > 0.2 significant shift. Sampling noise alone
    averages about ``(k - 1) * (1/n_ref + 1/n_recent)`` for k bins (see :func:`psi_test`). NaN if
    either side is empty.
    """
    return psi_test(reference, recent, bins)[0]


@dataclass
class FeatureDrift:
    """PSI of one input between the reference (training) window and the recent window."""

    feature: str
    psi: float | None
    n_reference: int
    n_recent: int
    p_value: float | None = None
    bins: int = 0
    flagged: bool = False
    note: str = ""


@dataclass
class DriftReport:
    """Input drift (PSI per input) and prediction drift of the current model, as data.

    reference_window: (start or None, end) -- submissions of the training window (log duration: the
    jobs ended by ``end``); recent_window: (start, now). error_*: median |log1p(est) - log1p(true)|;
    ``error_reference`` is the model's error when it was swapped in (``error_basis`` says on what),
    ``error_recent`` its error on the jobs that ended in the recent window.
    """

    kind: str
    time: int
    model_version: int | None
    reference_window: tuple[int | None, int | None]
    recent_window: tuple[int, int]
    features: list[FeatureDrift] = field(default_factory=list)
    error_reference: float | None = None
    error_recent: float | None = None
    error_ratio: float | None = None
    error_basis: str = ""
    n_error_jobs: int = 0
    flagged: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return _jsonable(self)

    def summary(self) -> str:
        if not self.flagged:
            return "no significant drift"
        return "; ".join(self.reasons)


# ================================================================================================
# job tables: what is known at `now`
# ================================================================================================
def _end_times(submit: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """End time of the no-future rule (models.duration): submit + max(ceil(duration), 1); NaN if unknown."""
    with np.errstate(invalid="ignore"):
        return submit + np.maximum(np.ceil(duration), 1.0)


def visible_jobs(jobs_df: pd.DataFrame, now: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The job table as known at ``now``, and each row's end time (NaN while running).

    Keeps rows submitted at or before ``now`` (rows without a submit_time are dropped); a duration is
    kept only if the job ended by ``now`` (``submit + max(duration, 1) <= now``) and set to NaN
    otherwise. So a simulator may pass the whole trace: nothing after ``now`` leaks into a refit.
    Rows are sorted by submit_time (stable). Raises ModelError if a required column is missing.
    """
    for col in ("submit_time", "gpu_num", "duration"):
        if col not in jobs_df.columns:
            raise ModelError(f"job table has no '{col}' column (have: {', '.join(map(str, jobs_df.columns))})")
    submit = pd.to_numeric(jobs_df["submit_time"], errors="coerce").to_numpy(float)
    keep = np.isfinite(submit) & (submit <= now)
    view = jobs_df.loc[keep].copy()
    st = submit[keep]
    order = np.argsort(st, kind="stable")
    view = view.iloc[order]
    st = st[order]
    dur = pd.to_numeric(view["duration"], errors="coerce").to_numpy(float)
    end = _end_times(st, dur)
    ended = np.isfinite(end) & (end <= now)
    view["duration"] = np.where(ended, dur, np.nan)
    view["submit_time"] = st.astype(np.int64)
    end = np.where(ended, end, np.nan)
    return view, end


def duration_metrics(estimate: np.ndarray, true: np.ndarray) -> dict:
    """n, MAE (s), median and mean |log1p(est) - log1p(true)|, Spearman of estimate vs truth."""
    from scipy.stats import spearmanr

    e = np.asarray(estimate, float)
    y = np.asarray(true, float)
    ok = np.isfinite(e) & np.isfinite(y)
    e, y = e[ok], y[ok]
    if len(e) == 0:
        return {"n": 0}
    logerr = np.abs(np.log1p(np.maximum(e, 0.0)) - np.log1p(np.maximum(y, 0.0)))
    out = {
        "n": int(len(e)),
        "mae_s": float(np.mean(np.abs(e - y))),
        "median_abs_log_error": float(np.median(logerr)),
        "mae_log1p": float(np.mean(logerr)),
        "spearman": float("nan"),
    }
    if len(e) >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out["spearman"] = float(spearmanr(e, y).statistic)
    return out


def _hours(submit: np.ndarray, origin) -> np.ndarray:
    """Submit hour of day, as the duration model computes it (origin = wall-clock time of 0)."""
    submit = np.asarray(submit, dtype=np.int64)
    if origin is None:
        return ((submit // 3600) % 24).astype(float)
    idx = pd.DatetimeIndex(pd.Timestamp(origin) + pd.to_timedelta(submit, unit="s"))
    return idx.hour.to_numpy(float)


# ================================================================================================
# the engine
# ================================================================================================
@dataclass
class UpdateConfig:
    """Settings of the update engine; every duration is in seconds of the job table's clock.

    See docs/models-update.md for what each key does. A check or limit set to None is off.
    """

    # schedule
    refit_every_s: int = WEEK
    retry_s: int = DAY
    min_refit_gap_s: int = DAY
    # data
    window_s: int | None = None
    holdout_s: int = DAY
    min_train_jobs: int = 200
    min_holdout_jobs: int = 30
    swap_without_holdout: bool = True
    # swap rule (duration)
    max_log_error_increase: float | None = 0.05
    max_mae_increase: float | None = 0.10
    max_spearman_drop: float | None = 0.02
    # drift
    drift_window_s: int = DAY
    drift_check_every_s: int = DAY
    psi_bins: int = 10
    psi_threshold: float = 0.2
    psi_max_pvalue: float | None = 0.001
    error_ratio_threshold: float | None = 1.5
    min_drift_jobs: int = 100
    drift_triggers_refit: bool = True
    # store
    keep_versions: int = 5
    # models
    kinds: tuple[str, ...] = ("duration",)
    duration_params: dict = field(default_factory=dict)
    throughput_params: dict = field(default_factory=dict)
    min_train_bins: int = 2016
    min_holdout_bins: int = 36
    throughput_max_mae_increase: float | None = 0.05

    def __post_init__(self):
        for name in ("refit_every_s", "retry_s", "drift_window_s", "drift_check_every_s"):
            if getattr(self, name) <= 0:
                raise ModelError(f"update config: {name} must be > 0")
        for name in ("holdout_s", "min_refit_gap_s", "min_train_jobs", "min_holdout_jobs", "min_drift_jobs",
                     "min_train_bins", "min_holdout_bins"):
            if getattr(self, name) < 0:
                raise ModelError(f"update config: {name} must be >= 0")
        if self.window_s is not None and self.window_s <= 0:
            raise ModelError("update config: window_s must be > 0 or None")
        if self.psi_bins < 2:
            raise ModelError("update config: psi_bins must be >= 2")
        if self.keep_versions < 1:
            raise ModelError("update config: keep_versions must be >= 1")
        self.kinds = tuple(self.kinds)
        for k in self.kinds:
            if k not in ("duration", "throughput"):
                raise ModelError(f"update config: the engine refits 'duration' and 'throughput', not {k!r}")

    @classmethod
    def from_dict(cls, d: dict) -> "UpdateConfig":
        """Build from a mapping (e.g. a config file section); unknown keys are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ModelError(f"update config: unknown key(s) {', '.join(unknown)}")
        return cls(**d)

    def to_dict(self) -> dict:
        return _jsonable(self)


@dataclass
class RefitResult:
    """Outcome of one refit attempt (also what is logged, as ``event: "refit"``).

    decision: "swapped" (candidate is now current), "rejected" (candidate worse than current; current
    kept), "skipped" (too little data; current kept), "failed" (error while fitting, evaluating or
    writing; current kept). version: the current version after the attempt (None: no model).
    """

    kind: str
    time: int
    trigger: str
    decision: str = "failed"
    reason: str = ""
    version: int | None = None
    previous_version: int | None = None
    train_rows: int = 0
    holdout_rows: int = 0
    train_window: tuple[int | None, int] | None = None
    holdout_window: tuple[int, int] | None = None
    metrics: dict = field(default_factory=dict)
    drift: dict | None = None
    fit_seconds: float | None = None
    model_file: str | None = None
    notes: list[str] = field(default_factory=list)
    log_error: str = ""

    @property
    def swapped(self) -> bool:
        return self.decision == "swapped"

    def to_dict(self) -> dict:
        return _jsonable(self)


class UpdateEngine:
    """Periodic refit, drift measure and atomic swap of the duration (and throughput) models.

    ``store``: a ModelStore or a directory (then ``ModelStore(dir, keep=config.keep_versions)``).
    The engine's own state (last attempt, last drift measure per kind) is read back from the
    store's updates.jsonl, so a restarted daemon picks up where it left off. Use a fresh store per
    simulation run (times in the log are the simulation's).
    """

    def __init__(self, store: ModelStore | str | os.PathLike, config: UpdateConfig | None = None):
        self.config = config or UpdateConfig()
        self.store = store if isinstance(store, ModelStore) else ModelStore(store, keep=self.config.keep_versions)
        self._cache: dict[str, tuple[tuple, LoadedModel]] = {}
        self._last_attempt: dict[str, dict] = {}
        self._last_drift: dict[str, dict] = {}
        # kind -> (version, error): the current model loads but raised in predict (noted by its user)
        self._predict_failures: dict[str, tuple[int, str]] = {}
        for rec in self.store.read_log():
            kind = rec.get("kind")
            if rec.get("event") == "refit" and isinstance(rec.get("time"), (int, float)):
                self._last_attempt[kind] = rec
            elif rec.get("event") == "drift" and isinstance(rec.get("time"), (int, float)):
                self._last_drift[kind] = rec

    # -- current model ----------------------------------------------------------------------------
    def current(self, kind: str = "duration") -> LoadedModel | None:
        """The current model (store.load_current, cached while the file is unchanged); None if none.

        Never raises for an unusable store: a ModelError is logged and None returned.
        """
        try:
            name = self.store._read_pointer(kind)
            key = None
            if name:
                with contextlib.suppress(OSError):
                    st = (self.store.root / name).stat()
                    key = (name, st.st_mtime_ns, st.st_size)
            cached = self._cache.get(kind)
            if key is not None and cached is not None and cached[0] == key:
                return cached[1]
            lm = self.store.load_current(kind)
        except (ModelError, OSError) as exc:
            log.warning("update engine: no usable %s model: %s", kind, exc)
            self._cache.pop(kind, None)
            return None
        if lm is not None and key is not None:
            # a fallback too: while the broken current file is unchanged, the answer is the same
            # (and each reload would log its warning again)
            self._cache[kind] = (key, lm)
        else:
            self._cache.pop(kind, None)
        return lm

    def note_predict_failure(self, kind: str, version: int, error) -> None:
        """The current ``kind`` model, version ``version``, loaded but could not predict (a file
        written by another scikit-learn or InterpretML may unpickle and then fail in ``predict``):
        a refit is due as for a model that does not load. Cleared once the current version changes."""
        self._predict_failures[kind] = (int(version), str(error))

    def _failing_current(self, kind: str) -> tuple[int, str] | None:
        """(version, error) when the current model counts as unusable although it loads, else None.
        (One read of the dict: the cycle thread notes failures while the refit thread asks.)"""
        failed = self._predict_failures.get(kind)
        if failed is None:
            return None
        cur = self.current(kind)
        if cur is None or cur.version != failed[0]:
            self._predict_failures.pop(kind, None)  # a new version since (or none): judged afresh
            return None
        return failed

    # -- schedule ---------------------------------------------------------------------------------
    def due_reason(self, now: int, kind: str = "duration") -> str | None:
        """Why a refit of ``kind`` is due at ``now`` (None: not due). See docs/models-update.md."""
        cfg = self.config
        last = self._last_attempt.get(kind)
        if last is None:
            return "first refit: no refit attempt logged yet"
        elapsed = now - last["time"]
        if elapsed < -CLOCK_BACK_SLACK_S:
            # The last attempt is logged in the future: the clock was ahead then (a controller that
            # booted before time sync). Waiting for the clock to catch up would leave the model
            # stale for as long, without a word.
            return f"clock went back: the last attempt is logged at {last['time']}, {-elapsed} s after now"
        decision = last.get("decision")
        if decision in ("skipped", "failed"):
            if elapsed >= cfg.retry_s:
                return f"retry: last attempt at {last['time']} was {decision} ({elapsed} s >= retry_s={cfg.retry_s})"
        elif elapsed >= cfg.refit_every_s:
            return f"scheduled: {elapsed} s since the last refit attempt >= refit_every_s={cfg.refit_every_s}"
        elif elapsed >= min(cfg.retry_s, UNUSABLE_REFIT_GAP_S) and self.current(kind) is None and self.store.versions(kind):
            # Model files are there but none loads (truncated on disk, or pickles the installed
            # sklearn/InterpretML cannot read after an upgrade): the estimates fell back to the rule
            # of means, and stayed there until the next scheduled refit, up to refit_every_s later,
            # although the history to refit from was at hand (a review)
            return (f"unusable: no {kind} model file in {self.store.root} loads "
                    f"({len(self.store.versions(kind))} on disk); refit now rather than at the scheduled time")
        elif elapsed >= min(cfg.retry_s, UNUSABLE_REFIT_GAP_S) and (failing := self._failing_current(kind)):
            # it loads, so the branch above does not see it, but every estimate is the rule of means
            version, error = failing
            return (f"unusable: the current {kind} model v{version} cannot "
                    f"predict ({error}); refit now rather than at the scheduled time")
        drift = self._last_drift.get(kind)
        if (
            cfg.drift_triggers_refit
            and drift is not None
            and drift.get("flagged")
            and drift["time"] > last["time"]
            and elapsed >= cfg.min_refit_gap_s
        ):
            return f"drift measured at {drift['time']}: " + "; ".join(drift.get("reasons") or ["flagged"])
        return None

    def due(self, now: int, kind: str = "duration") -> bool:
        """True when a refit of ``kind`` is due at ``now`` (schedule, retry, or flagged drift)."""
        return self.due_reason(now, kind) is not None

    def _trigger(self, now: int, kind: str) -> str:
        reason = self.due_reason(now, kind)
        if reason is None:
            return "manual"
        return reason.split(":", 1)[0].split(" ", 1)[0]  # first / scheduled / retry / drift

    def maybe_refit(self, jobs_df: pd.DataFrame, now: int, origin=None) -> list[RefitResult]:
        """What a daemon tick or a simulator event calls: refit each configured kind when due.

        For the duration model, when no refit is due but ``drift_check_every_s`` has passed since the
        last drift measure, drift is measured (and logged); a flagged drift refits right away if
        ``min_refit_gap_s`` allows. Returns the refit results (empty when nothing was refitted).
        """
        out = []
        for kind in self.config.kinds:
            if (kind == "duration" and not self.due(now, kind) and self.drift_check_due(now)
                    and self.current("duration") is not None):
                self.measure_drift(jobs_df, now, origin)
            if self.due(now, kind):
                if kind == "duration":
                    out.append(self.refit_duration(jobs_df, now, origin))
                else:
                    out.append(self.refit_throughput(jobs_df, now, origin))
        return out

    def drift_check_due(self, now: int) -> bool:
        """True when the duration model's drift is to be measured at ``now`` (maybe_refit does it):
        ``drift_check_every_s`` after the last measure or refit attempt, or the clock went back."""
        last = self._last_drift.get("duration")
        attempt = self._last_attempt.get("duration")
        ref = max([r["time"] for r in (last, attempt) if r is not None], default=None)
        return ref is None or not -CLOCK_BACK_SLACK_S <= now - ref < self.config.drift_check_every_s

    # -- bookkeeping ------------------------------------------------------------------------------
    def _finish(self, res: RefitResult, decision: str, reason: str) -> RefitResult:
        res.decision, res.reason = decision, reason
        record = {"event": "refit", **res.to_dict()}
        try:
            self.store.log_event(record)
        except (OSError, ValueError) as exc:
            res.log_error = f"could not append to {self.store.log_path}: {exc}"
            log.error("update engine: %s", res.log_error)
        self._last_attempt[res.kind] = _jsonable(record)
        lvl = logging.WARNING if decision == "failed" else logging.INFO
        log.log(lvl, "update engine: %s refit at %s: %s (%s)", res.kind, res.time, decision, reason)
        return res

    def _begin(self, kind: str, now: int, trigger: str | None) -> tuple[RefitResult, LoadedModel | None]:
        res = RefitResult(kind=kind, time=int(now), trigger=trigger or self._trigger(int(now), kind))
        cur = self.current(kind)
        if cur is None and self.store.versions(kind):
            res.notes.append(f"no usable {kind} model in the store (see the daemon log)")
        if cur is not None and cur.fallback:
            res.notes.append(cur.message)
        res.previous_version = res.version = cur.version if cur is not None else None
        return res, cur

    def _publish(self, res: RefitResult, model: Any, meta: dict) -> bool:
        model.update_meta_ = _jsonable(meta)
        try:
            version = self.store.publish(res.kind, model)
        except Exception as exc:  # disk full, permissions, pickling ...
            res.notes.append(f"could not write the new model: {exc.__class__.__name__}: {exc}")
            return False
        res.version = version
        res.model_file = self.store.file_name(res.kind, version)
        return True

    # -- duration ---------------------------------------------------------------------------------
    def refit_duration(self, jobs_df: pd.DataFrame, now: int, origin=None, trigger: str | None = None) -> RefitResult:
        """Fit a candidate duration model, compare it with the current one, swap if not worse.

        Training: jobs that ended by ``now - holdout_s`` (``submit + max(duration,1) <= cutoff``; with
        ``window_s``, only those submitted at or after ``cutoff - window_s``). Holdout: jobs that
        ended in ``(cutoff, now]``. ``jobs_df`` may contain the future (a whole trace): only what is
        known at ``now`` is used (see :func:`visible_jobs`). Never raises for data or fit problems.
        """
        from models.duration import DurationModel

        cfg = self.config
        now = int(now)
        res, cur = self._begin("duration", now, trigger)
        cutoff = now - int(cfg.holdout_s)
        start = None if cfg.window_s is None else cutoff - int(cfg.window_s)
        res.train_window = (start, cutoff)
        res.holdout_window = (cutoff, now)
        try:
            view, end = visible_jobs(jobs_df, now)
        except Exception as exc:
            return self._finish(res, "failed", f"unusable job table: {exc}")
        st = view["submit_time"].to_numpy(np.int64)
        ended = np.isfinite(end)
        train = ended & (np.nan_to_num(end, nan=np.inf) <= cutoff)
        if start is not None:
            train &= st >= start
        hold = ended & (np.nan_to_num(end, nan=-np.inf) > cutoff)
        res.train_rows, res.holdout_rows = int(train.sum()), int(hold.sum())
        if res.train_rows < cfg.min_train_jobs:
            return self._finish(res, "skipped", f"only {res.train_rows} jobs ended by {cutoff} "
                                                f"(now - holdout_s) < min_train_jobs={cfg.min_train_jobs}; "
                                                + self._kept(cur))
        if cur is not None:
            try:
                res.drift = self._drift(view, end, now, cur, origin).to_dict()
            except Exception as exc:
                res.notes.append(f"drift not measured: {exc.__class__.__name__}: {exc}")
        train_df, hold_df = view[train], view[hold]
        try:
            cand = DurationModel(**cfg.duration_params).fit(train_df, origin, history_df=view)
        except Exception as exc:
            return self._finish(res, "failed", f"fit failed: {exc.__class__.__name__}: {exc}; " + self._kept(cur))
        res.fit_seconds = getattr(cand, "fit_seconds_", None)
        true = hold_df["duration"].to_numpy(float)
        cand_m = cur_m = None
        enough = res.holdout_rows >= max(cfg.min_holdout_jobs, 1)
        if enough:
            try:
                cand_m = duration_metrics(cand.predict(hold_df, view, origin), true)
            except Exception as exc:
                return self._finish(res, "failed", f"candidate could not predict the holdout: "
                                                   f"{exc.__class__.__name__}: {exc}; " + self._kept(cur))
            res.metrics["candidate"] = cand_m
            if cur is not None:
                try:
                    cur_m = duration_metrics(cur.model.predict(hold_df, view, origin), true)
                    res.metrics["current"] = cur_m
                except Exception as exc:
                    res.notes.append(f"current model v{cur.version} could not predict the holdout: "
                                     f"{exc.__class__.__name__}: {exc}")
        accept, why = self._duration_rule(cur, cand_m, cur_m, res.holdout_rows)
        if not accept:
            return self._finish(res, "rejected", why)
        if cand_m is not None:
            ref_err, basis = cand_m["median_abs_log_error"], f"holdout ({cand_m['n']} jobs ended in ({cutoff}, {now}])"
        else:
            try:
                tail = train_df.iloc[-5000:]
                m = duration_metrics(cand.predict(tail, view, origin), tail["duration"].to_numpy(float))
                ref_err, basis = m.get("median_abs_log_error"), f"training jobs (in-sample, last {len(tail)})"
            except Exception:
                ref_err, basis = None, "none"
        meta = {
            "kind": "duration", "refit_time": now, "train_start": start, "train_cutoff": cutoff,
            "train_rows": res.train_rows, "holdout_rows": res.holdout_rows,
            "reference_error": ref_err, "reference_basis": basis, "origin": origin,
        }
        if not self._publish(res, cand, meta):
            return self._finish(res, "failed", res.notes[-1] + "; " + self._kept(cur))
        return self._finish(res, "swapped", why)

    @staticmethod
    def _kept(cur: LoadedModel | None) -> str:
        return f"current model v{cur.version} kept" if cur is not None else "no model yet (fallback rule stays in use)"

    def _duration_rule(self, cur, cand_m, cur_m, n_hold) -> tuple[bool, str]:
        cfg = self.config
        if cur is None:
            return True, "no current model"
        if cand_m is None:
            msg = f"holdout has {n_hold} jobs < min_holdout_jobs={cfg.min_holdout_jobs}; no comparison possible"
            if cfg.swap_without_holdout:
                return True, msg + "; swapped (swap_without_holdout)"
            return False, msg + f"; current model v{cur.version} kept (swap_without_holdout=False)"
        if cur_m is None:
            return True, f"current model v{cur.version} could not be evaluated"
        bad = []
        ce, ke = cand_m["median_abs_log_error"], cur_m["median_abs_log_error"]
        if cfg.max_log_error_increase is not None and ce > ke + cfg.max_log_error_increase:
            bad.append(f"median |log error| {ce:.3f} > current {ke:.3f} + {cfg.max_log_error_increase:g}")
        ca, ka = cand_m["mae_s"], cur_m["mae_s"]
        if cfg.max_mae_increase is not None and ca > ka * (1 + cfg.max_mae_increase):
            bad.append(f"MAE {ca:.0f} s > current {ka:.0f} s x {1 + cfg.max_mae_increase:g}")
        cs, ks = cand_m["spearman"], cur_m["spearman"]
        if cfg.max_spearman_drop is not None and math.isfinite(ks):
            if not math.isfinite(cs) or cs < ks - cfg.max_spearman_drop:
                bad.append(f"Spearman {cs:.3f} < current {ks:.3f} - {cfg.max_spearman_drop:g}")
        summary = (f"candidate vs current v{cur.version} on {cand_m['n']} holdout jobs: median |log error| "
                   f"{ce:.3f} vs {ke:.3f}, MAE {ca:.0f} vs {ka:.0f} s, Spearman {cs:.3f} vs {ks:.3f}")
        if bad:
            return False, "candidate worse than current: " + "; ".join(bad) + f" ({summary}); current model kept"
        return True, "candidate within tolerance: " + summary

    # -- drift ------------------------------------------------------------------------------------
    def measure_drift(self, jobs_df: pd.DataFrame, now: int, origin=None, log_it: bool = True) -> DriftReport:
        """Drift of the current duration model at ``now`` (logged as ``event: "drift"`` unless log_it=False).

        Never raises for data problems: a report that could not be computed has flagged=False and
        says why in ``reasons``.
        """
        now = int(now)
        cur = self.current("duration")
        cfg = self.config
        if cur is None:
            rep = DriftReport("duration", now, None, (None, None), (now - cfg.drift_window_s, now),
                              reasons=["no current duration model"])
        else:
            try:
                view, end = visible_jobs(jobs_df, now)
                rep = self._drift(view, end, now, cur, origin)
            except Exception as exc:
                rep = DriftReport("duration", now, cur.version, (None, None), (now - cfg.drift_window_s, now),
                                  reasons=[f"drift not measured: {exc.__class__.__name__}: {exc}"])
        if log_it:
            record = {"event": "drift", **rep.to_dict()}
            try:
                self.store.log_event(record)
            except (OSError, ValueError) as exc:
                log.error("update engine: could not log drift: %s", exc)
            self._last_drift["duration"] = _jsonable(record)
        return rep

    def _drift(self, view: pd.DataFrame, end: np.ndarray, now: int, cur: LoadedModel, origin) -> DriftReport:
        cfg = self.config
        model = cur.model
        meta = getattr(model, "update_meta_", None) or {}
        ref_start = meta.get("train_start")
        ref_end = meta.get("train_cutoff")
        if ref_end is None:  # a model not published by the engine: use its training span
            span = getattr(model, "train_span_", None)
            if span:
                ref_end = int(span[1]) + 1
        # hours as the model saw them: the caller's origin, else the model's own (predict does the same)
        hour_origin = origin if origin is not None else (getattr(model, "origin_", None) or meta.get("origin"))
        rec_start = now - int(cfg.drift_window_s)
        rep = DriftReport("duration", now, cur.version, (ref_start, ref_end), (rec_start, now))
        if ref_end is None:
            rep.reasons.append("model has no training window; drift not measured")
            return rep
        st = view["submit_time"].to_numpy(np.int64)
        ended = np.isfinite(end)
        e = np.nan_to_num(end, nan=-np.inf)
        ref_sub = st < ref_end
        if ref_start is not None:
            ref_sub &= st >= ref_start
        rec_sub = st > rec_start
        ref_end_mask = ref_sub & ended & (e <= ref_end)
        rec_end_mask = ended & (e > rec_start)

        inputs: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
        gpu = pd.to_numeric(view["gpu_num"], errors="coerce").to_numpy(float)
        inputs.append(("gpu_num", gpu, ref_sub, rec_sub))
        if "cpu_num" in view.columns:
            cpu = pd.to_numeric(view["cpu_num"], errors="coerce").to_numpy(float)
            cpu = np.where(cpu > 0, cpu, np.nan)
            if np.isfinite(cpu[ref_sub]).any() and np.isfinite(cpu[rec_sub]).any():
                inputs.append(("cpu_num", cpu, ref_sub, rec_sub))
        inputs.append(("submit_hour", _hours(st, hour_origin), ref_sub, rec_sub))
        logd = np.log1p(np.maximum(view["duration"].to_numpy(float), 0.0))
        inputs.append(("log_duration", logd, ref_end_mask, rec_end_mask))
        for name, vals, rm, cm in inputs:
            a, b = vals[rm], vals[cm]
            a, b = a[np.isfinite(a)], b[np.isfinite(b)]
            fd = FeatureDrift(name, None, int(len(a)), int(len(b)))
            if len(a) < cfg.min_drift_jobs or len(b) < cfg.min_drift_jobs:
                fd.note = f"too few jobs (< min_drift_jobs={cfg.min_drift_jobs})"
            else:
                fd.psi, fd.p_value, fd.bins = psi_test(a, b, cfg.psi_bins)
                noise = cfg.psi_max_pvalue is not None and not fd.p_value < cfg.psi_max_pvalue
                fd.flagged = fd.psi > cfg.psi_threshold and not noise
                if fd.flagged:
                    rep.reasons.append(f"PSI({name}) = {fd.psi:.3f} > {cfg.psi_threshold:g} "
                                       f"(p = {fd.p_value:.2g}, {fd.n_reference} vs {fd.n_recent} jobs)")
                elif fd.psi > cfg.psi_threshold:
                    fd.note = f"PSI above threshold but within sampling noise (p = {fd.p_value:.2g})"
            rep.features.append(fd)

        # prediction drift
        rep.error_reference = meta.get("reference_error")
        rep.error_basis = meta.get("reference_basis", "")
        rec_jobs = view[rec_end_mask]
        rep.n_error_jobs = int(len(rec_jobs))
        if rep.error_reference is None:
            ref_jobs = view[ref_end_mask].iloc[-5000:]
            if len(ref_jobs):
                m = duration_metrics(model.predict(ref_jobs, view, origin), ref_jobs["duration"].to_numpy(float))
                rep.error_reference = m.get("median_abs_log_error")
                rep.error_basis = f"training window jobs (in-sample, last {len(ref_jobs)})"
        if len(rec_jobs) >= max(cfg.min_drift_jobs, 1):
            m = duration_metrics(model.predict(rec_jobs, view, origin), rec_jobs["duration"].to_numpy(float))
            rep.error_recent = m.get("median_abs_log_error")
            if rep.error_reference is not None and rep.error_recent is not None and rep.error_reference > 0:
                rep.error_ratio = rep.error_recent / rep.error_reference
                if cfg.error_ratio_threshold is not None and rep.error_ratio > cfg.error_ratio_threshold:
                    rep.reasons.append(
                        f"median |log error| on recent jobs {rep.error_recent:.3f} = {rep.error_ratio:.2f} x "
                        f"reference {rep.error_reference:.3f} > {cfg.error_ratio_threshold:g}"
                    )
        rep.flagged = bool(rep.reasons)
        return rep

    # -- throughput -------------------------------------------------------------------------------
    def refit_throughput(self, jobs_df: pd.DataFrame, now: int, origin=None, trigger: str | None = None) -> RefitResult:
        """Refit the throughput model on the arrival bins before ``now - holdout_s``; swap if not worse.

        Bins: ``bin_arrivals`` of the jobs submitted before ``now``, complete bins only (the last
        ends at or before ``now``). The candidate is fitted on the bins that end by the cutoff;
        candidate and current model are scored (MAE against the mean demand over the next
        ``horizon_bins`` bins) at every decision point in the holdout whose window is complete.
        """
        from models.throughput import BIN_S, DAY_S, ThroughputModel, bin_arrivals

        cfg = self.config
        now = int(now)
        res, cur = self._begin("throughput", now, trigger)
        params = dict(cfg.throughput_params)
        bin_s = int(params.get("bin_s", BIN_S))
        horizon = int(params.get("horizon_bins", 6))
        target = params.get("target", "submit_gpu_job")
        cutoff = now - int(cfg.holdout_s)
        res.holdout_window = (cutoff, now)
        try:
            if "submit_time" not in jobs_df.columns or "gpu_num" not in jobs_df.columns:
                raise ModelError("job table needs 'submit_time' and 'gpu_num' columns")
            submit = pd.to_numeric(jobs_df["submit_time"], errors="coerce")
            seen = jobs_df[submit.notna() & (submit < now)]
            last_start = (now // bin_s) * bin_s - bin_s
            if seen.empty:
                return self._finish(res, "skipped", "no job submitted before now; " + self._kept(cur))
            first = int(pd.to_numeric(seen["submit_time"]).min())
            start = first if cfg.window_s is None else max(first, cutoff - int(cfg.window_s))
            if start > last_start:
                return self._finish(res, "skipped", "no complete bin before now; " + self._kept(cur))
            bins = bin_arrivals(seen, origin, bin_s, start=start, end=last_start)
        except Exception as exc:
            return self._finish(res, "failed", f"could not bin arrivals: {exc.__class__.__name__}: {exc}")
        times = bins["time"].to_numpy(np.int64)
        train_bins = bins[times + bin_s <= cutoff].copy()
        train_bins.attrs = dict(bins.attrs)
        res.train_window = (int(times[0]) if len(times) else None, cutoff)
        res.train_rows = int(len(train_bins))
        need = max(cfg.min_train_bins, 2 * (DAY_S // bin_s) + horizon)
        if res.train_rows < need:
            return self._finish(res, "skipped", f"only {res.train_rows} bins before {cutoff} < {need} "
                                                f"(min_train_bins, at least 2 days + horizon); " + self._kept(cur))
        try:
            cand = ThroughputModel(**params).fit(train_bins)
        except Exception as exc:
            return self._finish(res, "failed", f"fit failed: {exc.__class__.__name__}: {exc}; " + self._kept(cur))
        res.fit_seconds = getattr(cand, "fit_seconds_", None)
        vals = bins[target].to_numpy(float)
        y = pd.Series(vals).rolling(horizon, min_periods=horizon).mean().shift(-(horizon - 1)).to_numpy()
        points = np.flatnonzero((times >= cutoff) & np.isfinite(y))
        res.holdout_rows = int(len(points))

        def score(model) -> dict:
            pred = model.predict_series(bins).to_numpy(float)
            err = np.abs(pred[points] - y[points])
            return {"n": int(len(points)), "mae": float(np.mean(err)),
                    "switch_agree": float(np.mean((pred[points] > 2.0) == (y[points] > 2.0)))}

        cand_m = cur_m = None
        if res.holdout_rows >= max(cfg.min_holdout_bins, 1):
            try:
                cand_m = score(cand)
            except Exception as exc:
                return self._finish(res, "failed", f"candidate could not forecast the holdout: "
                                                   f"{exc.__class__.__name__}: {exc}; " + self._kept(cur))
            res.metrics["candidate"] = cand_m
            if cur is not None:
                cm = cur.model
                same = (getattr(cm, "target", None), getattr(cm, "horizon_bins", None), getattr(cm, "bin_s", None)) == (
                    cand.target, cand.horizon_bins, cand.bin_s)
                if not same:
                    res.notes.append(f"current model v{cur.version} forecasts another target/horizon/bin size; "
                                     "not comparable")
                else:
                    try:
                        cur_m = score(cm)
                        res.metrics["current"] = cur_m
                    except Exception as exc:
                        res.notes.append(f"current model v{cur.version} could not forecast the holdout: "
                                         f"{exc.__class__.__name__}: {exc}")
        if cur is None:
            accept, why = True, "no current model"
        elif cand_m is None:
            msg = f"holdout has {res.holdout_rows} decision points < min_holdout_bins={cfg.min_holdout_bins}"
            accept = cfg.swap_without_holdout
            why = msg + ("; swapped (swap_without_holdout)" if accept else f"; current model v{cur.version} kept")
        elif cur_m is None:
            accept, why = True, f"current model v{cur.version} could not be compared"
        else:
            tol = cfg.throughput_max_mae_increase
            summary = f"MAE {cand_m['mae']:.3f} vs current v{cur.version} {cur_m['mae']:.3f} on {cand_m['n']} points"
            if tol is not None and cand_m["mae"] > cur_m["mae"] * (1 + tol):
                accept, why = False, f"candidate worse than current: {summary} (> x {1 + tol:g}); current model kept"
            else:
                accept, why = True, "candidate within tolerance: " + summary
        if not accept:
            return self._finish(res, "rejected", why)
        meta = {"kind": "throughput", "refit_time": now, "train_start": res.train_window[0], "train_cutoff": cutoff,
                "train_rows": res.train_rows, "holdout_rows": res.holdout_rows,
                "reference_error": cand_m["mae"] if cand_m else None,
                "reference_basis": "holdout MAE" if cand_m else "none"}
        if not self._publish(res, cand, meta):
            return self._finish(res, "failed", res.notes[-1] + "; " + self._kept(cur))
        return self._finish(res, "swapped", why)
