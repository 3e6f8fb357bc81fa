"""Co-located progress rates for the simulator: measured where a pair was measured, else estimated.

Measurement table layout (the Lucid artifact's colocate_info.csv; docs/lucid.md):
model1,dataset1,batchsize1,amp1,speed1,model2,dataset2,batchsize2,amp2,speed2[,gpu_util,gmem_util,gmem]
where speedN is job N's throughput while sharing, normalised to its exclusive throughput.

Unmeasured pairs use a documented estimate from the two jobs' SM utilisation. Two are kept:
* `estimated_pair_speed` (Lucid's own engine, `lucid-standalone`, as the artifact's measurements
  behave): below a combined 100 % the GPU has idle cycles and each job keeps nearly full speed;
  above it, the jobs time-share the saturated GPU, each slowed in proportion to the oversubscription.
* `time_sliced_pair_speed` (`lucid`, lucidd on Slurm, whose GPU shards give no MPS): each job keeps
  1 / (1 + its partner's utilisation). On an H200 (bench/nvml_on_gpu.py, docs/deploy.md "Measured
  on an H200") pairs of ResNet-18 trainings at 24.5 % and 53 % kept 0.80 and 0.65, as this says,
  where the first estimate says 0.97 for both.
"""

from __future__ import annotations

import pandas as pd

KEY = ("model", "dataset", "batchsize", "amp")


def _key(profile: dict | None):
    if not profile:
        return None
    try:
        return (str(profile["model"]), str(profile["dataset"]), int(float(profile["batchsize"])), int(float(profile["amp"])))
    except (KeyError, TypeError, ValueError):
        return None


UNKNOWN_PAIR_SPEED = 0.75  # a pair whose utilisations are not known: assume a clear slowdown


def _known(*utils) -> bool:
    """Every utilisation given and a number (not None, not NaN)."""
    return all(u is not None and u == u for u in utils)


def estimated_pair_speed(util_a: float | None, util_b: float | None, contention: float = 0.03) -> tuple[float, float]:
    """Estimate for an unmeasured pair (utilisations in %)."""
    if not _known(util_a, util_b):
        return UNKNOWN_PAIR_SPEED, UNKNOWN_PAIR_SPEED
    total = max(1.0, float(util_a) + float(util_b))
    if total <= 100:
        s = 1.0 - contention
        return s, s
    # Saturated: the GPU's cycles split in proportion to demand.
    share = 100.0 / total
    return max(0.3, (1.0 - contention) * min(1.0, share * (1 + (100 - float(util_a)) / 100))), \
        max(0.3, (1.0 - contention) * min(1.0, share * (1 + (100 - float(util_b)) / 100)))


def time_sliced_pair_speed(util_a: float | None, util_b: float | None) -> tuple[float, float]:
    """Estimate for an unmeasured pair on a GPU that time-slices between them (no MPS; utilisations
    in %): each job keeps about 1 / (1 + its partner's utilisation)."""
    if not _known(util_a, util_b):
        return UNKNOWN_PAIR_SPEED, UNKNOWN_PAIR_SPEED
    return (max(0.3, 1.0 / (1.0 + max(0.0, float(util_b)) / 100.0)),
            max(0.3, 1.0 / (1.0 + max(0.0, float(util_a)) / 100.0)))


class PairSpeeds:
    """Callable (job_a, job_b) -> (rate_a, rate_b) for SimHooks.share_speeds. `estimate`: the rule for
    pairs the table does not hold (estimated_pair_speed or time_sliced_pair_speed)."""

    def __init__(self, table: pd.DataFrame | None = None, cap: float = 1.0, estimate=estimated_pair_speed):
        self.estimate = estimate
        self.cap = cap  # measured speeds above 1 (measurement noise) are capped: sharing never speeds a job up
        self.measured: dict = {}
        self.used_measured = 0
        self.used_estimate = 0
        if table is not None:
            for r in table.itertuples(index=False):
                a = (str(r.model1), str(r.dataset1), int(r.batchsize1), int(r.amp1))
                b = (str(r.model2), str(r.dataset2), int(r.batchsize2), int(r.amp2))
                self.measured[(a, b)] = (float(r.speed1), float(r.speed2))
                self.measured.setdefault((b, a), (float(r.speed2), float(r.speed1)))

    @classmethod
    def from_csv(cls, path, **kw):
        return cls(pd.read_csv(path), **kw)

    def __call__(self, job_a, job_b):
        ka, kb = _key(job_a.profile), _key(job_b.profile)
        if ka is not None and kb is not None and (ka, kb) in self.measured:
            self.used_measured += 1
            sa, sb = self.measured[(ka, kb)]
        else:
            self.used_estimate += 1
            pa, pb = job_a.profile or {}, job_b.profile or {}
            sa, sb = self.estimate(_num(pa.get("gpu_util")), _num(pb.get("gpu_util")))
        return min(self.cap, sa), min(self.cap, sb)


def _num(v):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if v != v else v
