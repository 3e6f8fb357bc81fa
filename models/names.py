"""Job-name similarity buckets for the duration model.

Users re-submit the same experiment with small changes ("resnet_lr0.1_seed1", "resnet_lr0.1_seed2", ...).
Those names carry a strong duration signal but are far too many to use as a categorical feature, so we
group them into buckets:

1. **normalise** each name (lower-case; dates, UUIDs, hex hashes and all digits removed; runs of
   punctuation collapsed to one ``_``), so variants of one experiment collapse to one string;
2. compute the **normalised Levenshtein distance** ``lev(a, b) / max(len(a), len(b))`` (package
   ``Levenshtein``) between the distinct normalised names;
3. cluster with **affinity propagation** (``sklearn.cluster.AffinityPropagation(affinity="precomputed")``)
   on the negative distances; each cluster is a bucket, represented by its exemplar name. The
   preference (the similarity a name "pays" to be its own exemplar) defaults to -0.5: names that
   differ in more than about half their characters rarely share a bucket. (scikit-learn's default,
   the median similarity, merges unrelated families when there are only a few distinct names.)

Affinity propagation is O(n^2) in memory and time per iteration, so only the ``max_names`` (default 500)
most frequent normalised names are clustered; every other name (and every name first seen at transform
time) goes to the bucket of its nearest exemplar by the same distance. Empty names (and names that are
empty once normalised, e.g. only digits) map to bucket -1. Cost: ~1 s for 500 distinct names plus
~0.1 s per 10,000 further distinct names (2 cores).

Deterministic: ties in frequency are broken by the name itself and affinity propagation gets a fixed
``random_state``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import warnings
from collections import Counter
from typing import Iterable

import Levenshtein
import numpy as np

from models.base import ModelError

__all__ = ["NameBuckets", "normalise_name", "normalise_names", "name_distance"]

_DATE = re.compile(r"(?:19|20)\d{2}[-_./]?(?:0[1-9]|1[0-2])[-_./]?(?:0[1-9]|[12]\d|3[01])")
_TIME = re.compile(r"\b\d{1,2}[:h]\d{2}(?:[:m]\d{2})?s?\b")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# a hex run of >= 6 characters that contains at least one digit, not glued to other letters/digits
_HEX = re.compile(r"(?<![0-9a-z])(?=[a-f]*\d)[0-9a-f]{6,}(?![0-9a-z])")
_DIGITS = re.compile(r"\d+")
# anything but a letter or a digit, in any script: `[^0-9a-z]` read a name in Chinese or Cyrillic
# as missing ("训练任务_v2" -> "v"), so the name features said nothing on such clusters (a review);
# on ASCII names the two are the same
_PUNCT = re.compile(r"[\W_]+")


def normalise_name(name: object) -> str:
    """Canonical form of a job name: variants of one experiment map to the same string.

    >>> normalise_name("ResNet_lr0.1_seed2")
    'resnet_lr_seed'
    >>> normalise_name("train-2020-09-01-3fa9c2d1")
    'train'
    """
    if name is None or (isinstance(name, float) and np.isnan(name)):
        return ""
    return _normalise(str(name))


@functools.lru_cache(maxsize=1 << 17)
def _normalise(name: str) -> str:
    # cached: the live estimator normalises every name of its history (hundreds of thousands on a
    # large cluster, most of them repeats) for each new job's features: 1 s a cycle uncached
    # NFKC: one form per letter (an accent composed or not; full-width Latin as ASCII), so that an
    # accent is not a separator
    s = unicodedata.normalize("NFKC", name).lower()
    s = _UUID.sub(" ", s)
    s = _DATE.sub(" ", s)
    s = _TIME.sub(" ", s)
    s = _HEX.sub(" ", s)
    s = _DIGITS.sub(" ", s)
    s = _PUNCT.sub("_", s).strip("_")
    return s


def normalise_names(names) -> np.ndarray:
    """normalise_name of each of `names` (an array or list), each distinct name once: a history of
    hundreds of thousands of names, more distinct ones than the cache holds (names carrying seeds or
    run numbers), cost 1.7 s a cycle when normalised one by one (a review)."""
    import pandas as pd

    codes, uniques = pd.factorize(pd.Series(list(names), dtype=object), use_na_sentinel=True)
    done = np.array([normalise_name(x) for x in uniques] + [""], dtype=object)  # code -1 (None, NaN): ""
    return done[codes]


def name_distance(a: str, b: str) -> float:
    """Levenshtein distance normalised to [0, 1] by the longer string."""
    longest = max(len(a), len(b))
    return Levenshtein.distance(a, b) / longest if longest else 0.0


def _distance_matrix(rows: list[str], cols: list[str]) -> np.ndarray:
    """Normalised Levenshtein distances, shape (len(rows), len(cols)).

    Uses rapidfuzz's vectorised ``cdist`` (rapidfuzz is the engine behind, and a dependency of, the
    ``Levenshtein`` package; same distance) and falls back to a loop over ``Levenshtein.distance``.
    """
    if not rows or not cols:
        return np.zeros((len(rows), len(cols)), dtype=np.float64)
    try:
        from rapidfuzz.distance import Levenshtein as _RFLevenshtein
        from rapidfuzz.process import cdist
    except ImportError:  # pragma: no cover - rapidfuzz ships with Levenshtein
        cdist = None
    if cdist is not None:
        return cdist(rows, cols, scorer=_RFLevenshtein.normalized_distance, dtype=np.float64, workers=1)
    out = np.empty((len(rows), len(cols)), dtype=np.float64)
    col_len = np.array([len(c) for c in cols], dtype=np.float64)
    dist = Levenshtein.distance
    for i, a in enumerate(rows):
        raw = np.fromiter((dist(a, b) for b in cols), dtype=np.float64, count=len(cols))
        longest = np.maximum(col_len, len(a))
        out[i] = np.divide(raw, longest, out=np.zeros_like(raw), where=longest > 0)
    return out


class NameBuckets:
    """Cluster job names into similarity buckets (see module docstring).

    Attributes after fit: ``exemplars_`` (normalised exemplar name of each bucket, bucket id = index),
    ``bucket_of_`` (normalised name -> bucket for every name seen in fit), ``converged_``.
    """

    def __init__(
        self,
        max_names: int = 500,
        damping: float = 0.7,
        max_iter: int = 200,
        convergence_iter: int = 15,
        preference: float | None = -0.5,
        random_state: int = 0,
    ):
        self.max_names = max_names
        self.damping = damping
        self.max_iter = max_iter
        self.convergence_iter = convergence_iter
        self.preference = preference
        self.random_state = random_state

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, names: Iterable[object]) -> "NameBuckets":
        from sklearn.cluster import AffinityPropagation
        from sklearn.exceptions import ConvergenceWarning

        counts = Counter(n for n in (normalise_name(x) for x in names) if n)
        # most frequent first, ties broken by the name so the result does not depend on input order
        ranked = sorted(counts, key=lambda n: (-counts[n], n))
        clustered = sorted(ranked[: self.max_names])
        self.converged_ = True
        if len(clustered) <= 2:
            # affinity propagation is meaningless on 1-2 points: every name is its own bucket
            self.exemplars_ = list(clustered)
        else:
            sim = -_distance_matrix(clustered, clustered)
            ap = AffinityPropagation(
                affinity="precomputed",
                damping=self.damping,
                max_iter=self.max_iter,
                convergence_iter=self.convergence_iter,
                preference=self.preference,
                random_state=self.random_state,
            )
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                ap.fit(sim)
            self.converged_ = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
            centers = [int(i) for i in np.asarray(getattr(ap, "cluster_centers_indices_", []))]
            if len(centers) == 0:
                # degenerate run (no exemplar at all): fall back to one bucket per clustered name
                self.exemplars_ = list(clustered)
            else:
                self.exemplars_ = [clustered[i] for i in centers]
        self.n_names_seen_ = len(counts)
        self.bucket_of_ = {}
        if self.exemplars_:
            self.bucket_of_.update(zip(ranked, self._nearest(ranked)))
        return self

    def _nearest(self, norm_names: list[str]) -> np.ndarray:
        """Bucket of each normalised (non-empty) name: its nearest exemplar (ties: lowest bucket id)."""
        if not norm_names:
            return np.empty(0, dtype=np.int64)
        exemplar_index = {e: i for i, e in enumerate(self.exemplars_)}
        out = np.empty(len(norm_names), dtype=np.int64)
        todo = []
        for i, n in enumerate(norm_names):
            j = exemplar_index.get(n)
            if j is None:
                todo.append(i)
            else:
                out[i] = j
        if todo:
            d = _distance_matrix([norm_names[i] for i in todo], self.exemplars_)
            out[todo] = d.argmin(axis=1)
        return out

    # -- use ----------------------------------------------------------------------------------
    @property
    def n_buckets(self) -> int:
        self._check_fitted()
        return len(self.exemplars_)

    def _check_fitted(self) -> None:
        if not hasattr(self, "exemplars_"):
            raise ModelError("NameBuckets is not fitted; call fit(names) first")

    def transform(self, names: Iterable[object]) -> np.ndarray:
        """Bucket id per name (int64); empty/unknown-empty names -> -1, unseen names -> nearest exemplar."""
        self._check_fitted()
        norm = [normalise_name(x) for x in names]
        out = np.full(len(norm), -1, dtype=np.int64)
        if not self.exemplars_:
            return out
        unseen = sorted({n for n in norm if n and n not in self.bucket_of_})
        extra = dict(zip(unseen, self._nearest(unseen)))
        for i, n in enumerate(norm):
            if n:
                b = self.bucket_of_.get(n)
                out[i] = extra[n] if b is None else b
        return out

    def fit_transform(self, names: Iterable[object]) -> np.ndarray:
        names = list(names)
        return self.fit(names).transform(names)

    def exemplar(self, bucket: int) -> str:
        """Human-readable label of a bucket (its exemplar's normalised name); '' for -1."""
        self._check_fitted()
        return "" if bucket < 0 else self.exemplars_[bucket]
