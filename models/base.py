"""Shared plumbing for lucidd's interpretable models.

Every model exposes fit / predict / explain and persists with a version stamp, so the update
engine can swap a refitted model in atomically and the daemon can refuse a file written by an
incompatible version. Explanations are plain data (dataclasses); rendering lives in
``models.render`` so the CLI, JSON output and plots all start from the same objects.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import joblib

#: Bumped whenever the pickled layout of any model changes incompatibly.
MODEL_FORMAT_VERSION = 1


def portable_ebm() -> None:
    """Make InterpretML's EBMs fit the same on every CPU: its native booster takes an AVX-512 or
    an AVX2 path where the CPU has one (`acceleration`, all by default), and the paths round
    differently. Measured on Venus (`lucidctl simulate --policies lucid`): Lucid's average JCT was
    14,169 s where AVX-512 was used, 14,174 s on an AVX2-only CPU and 14,116 s on the portable
    path, enough to make the same command print different tables on two machines. The portable
    path cost no time there (18 s either way). Called before each EBM fit; the option is passed to
    the booster's worker processes with each call."""
    from interpret import develop
    from interpret.utils._native import Native

    develop.set_option("acceleration", Native.AccelerationFlags_NONE)


class ModelError(Exception):
    """A model cannot be fitted, loaded or used; the message is meant for an admin."""


@dataclass
class Contribution:
    """One term of an additive explanation (an EBM term, or a tree split on the path)."""

    term: str
    value: Any
    contribution: float


@dataclass
class Explanation:
    """Why a model produced `prediction` for one input, as data.

    kind: "ebm" (additive terms; `terms` sorted by |contribution|, `intercept` set),
          "tree" (`path` lists the decisions from root to leaf), or "fallback" (no model
          applied; `reason` says why and which rule was used instead).
    """

    model: str
    kind: str
    prediction: Any
    intercept: float | None = None
    terms: list[Contribution] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class ModelStamp:
    """Written next to every saved model: what it is, when and on what it was trained."""

    model: str
    format_version: int
    lucidd_version: str
    trained_at: str
    train_rows: int
    train_span: tuple[int, int] | None = None  # (first, last) submit_time of the training data
    metrics: dict = field(default_factory=dict)


def make_stamp(model: str, train_rows: int, train_span=None, metrics=None) -> ModelStamp:
    from lucidd import __version__

    return ModelStamp(
        model=model,
        format_version=MODEL_FORMAT_VERSION,
        lucidd_version=__version__,
        trained_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        train_rows=int(train_rows),
        train_span=train_span,
        metrics=dict(metrics or {}),
    )


def save_model(obj: Any, stamp: ModelStamp, path: str | os.PathLike) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a model."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-model-")
    os.close(fd)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes it 0600; a saved model is as readable as other outputs
    try:
        joblib.dump({"stamp": dataclasses.asdict(stamp), "model": obj}, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_model(path: str | os.PathLike, expected_model: str, expected_type: type | None = None) -> tuple[Any, ModelStamp]:
    """Load a model saved by save_model; refuse other kinds, other format versions and (with
    `expected_type`) a file whose stamp is right but whose object is of another class."""
    try:
        payload = joblib.load(os.fspath(path))
    except FileNotFoundError:
        raise ModelError(f"{path}: no such model file") from None
    except Exception as exc:  # corrupt or foreign pickle
        raise ModelError(f"{path}: not a readable lucidd model ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(payload, dict) or "stamp" not in payload or "model" not in payload:
        raise ModelError(f"{path}: not a lucidd model file (no version stamp)")
    raw = payload["stamp"]
    if not isinstance(raw, dict):
        raise ModelError(f"{path}: not a lucidd model file (its version stamp is a {type(raw).__name__})")
    # Kind and format version first, from the raw stamp: a file written by another lucidd version
    # may have other stamp fields, and must be refused as such (ModelError, so the store falls
    # back to an older file), not fail in ModelStamp(**raw).
    if raw.get("model") != expected_model:
        raise ModelError(f"{path}: holds a '{raw.get('model')}' model, expected '{expected_model}'")
    if raw.get("format_version") != MODEL_FORMAT_VERSION:
        raise ModelError(
            f"{path}: model format version {raw.get('format_version')}, this lucidd reads {MODEL_FORMAT_VERSION}; "
            "refit it"
        )
    known = {f.name for f in dataclasses.fields(ModelStamp)}
    try:
        stamp = ModelStamp(**{k: v for k, v in raw.items() if k in known})
    except TypeError as exc:  # a field this lucidd needs is missing
        raise ModelError(f"{path}: incomplete version stamp ({exc})") from None
    obj = payload["model"]
    if expected_type is not None and not isinstance(obj, expected_type):
        raise ModelError(f"{path}: stamped '{expected_model}' but holds a {type(obj).__name__}, "
                         f"expected {expected_type.__name__}")
    return obj, stamp
