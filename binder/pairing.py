"""Affine-pair binder: which queued job may share GPUs with which running job (lazy packing).

Pure functions of plain jobs and numbers; the orchestrator calls them, backends apply the result.
Rules (docs/lucid.md): two jobs share GPUs only if they ask for the same GPU count, neither spans
several nodes, their GPU memory fits one GPU, their sharing scores sum to at most GSS, neither
already shares (at most two jobs per GPU set), and the queued job is not much longer than the
running one (so a short job never stretches a long one's tail, and vice versa).
"""

from __future__ import annotations

from dataclasses import dataclass

from lucidd.jobs import Job

TINY, MEDIUM, JUMBO = 0, 1, 2
SCORE_NAMES = {TINY: "Tiny", MEDIUM: "Medium", JUMBO: "Jumbo"}


@dataclass(frozen=True)
class BinderConfig:
    gss: int = 2  # GPU sharing score budget: scores of a pair sum to at most this
    gpu_memory_mb: float = 24576  # per-GPU memory of the cluster's GPU model (RTX 3090 in the artifact)
    memory_headroom_mb: float = 0  # kept free on a shared GPU for CUDA contexts
    max_priority_ratio: float = 2.0  # queued job's priority <= ratio x running job's (artifact rule)
    max_gpus_per_node: int = 8  # jobs spanning nodes never share


def sharing_blocker(job: Job, other: Job, cfg: BinderConfig, gss: int | None = None) -> str | None:
    """Why `job` (queued) may not share `other`'s (running) GPUs, or None if it may."""
    gss = cfg.gss if gss is None else gss
    if job.gpu_num > cfg.max_gpus_per_node or other.is_distributed or other.gpu_num > cfg.max_gpus_per_node:
        return "distributed jobs never share GPUs"
    if other.partner is not None:
        return f"job {other.job_id} already shares its GPUs"
    if job.gpu_num != other.gpu_num:
        return f"different GPU counts ({job.gpu_num} vs {other.gpu_num})"
    if job.share_score is None or other.share_score is None:
        return "no packing class (not profiled)"
    if job.share_score + other.share_score > gss:
        return (f"sharing scores {SCORE_NAMES[job.share_score]}+{SCORE_NAMES[other.share_score]} "
                f"= {job.share_score + other.share_score} exceed GSS {gss}")
    mem_a, mem_b = _gmem(job), _gmem(other)
    if mem_a is None or mem_b is None:
        return "GPU memory footprint unknown"
    if mem_a + mem_b + cfg.memory_headroom_mb > cfg.gpu_memory_mb:
        return f"GPU memory {mem_a:.0f}+{mem_b:.0f} MB exceeds {cfg.gpu_memory_mb:.0f} MB"
    if job.estimate is not None and other.estimate is not None and other.estimate > 0:
        if job.estimate * job.gpu_num > cfg.max_priority_ratio * other.estimate * other.gpu_num:
            return "queued job much longer than the running one"
    return None


def own_blocker(job: Job, cfg: BinderConfig) -> str | None:
    """Why `job` may share with nobody at all, or None. Checked once per queued job so that a
    queue of unprofiled jobs costs O(queue), not O(queue x running), per decision."""
    if job.gpu_num > cfg.max_gpus_per_node:
        return "distributed jobs never share GPUs"
    if job.share_score is None:
        return "no packing class (not profiled)"
    if _gmem(job) is None:
        return "GPU memory footprint unknown"
    return None


def find_partner(job: Job, running, cfg: BinderConfig, gss: int | None = None):
    """(first running job, in start order, that `job` may share with, None) as the artifact picks,
    or (None, why the first candidate was refused) when there is none."""
    reason = own_blocker(job, cfg)
    if reason is not None:
        return None, reason
    first_reason = None
    for other in running:
        reason = sharing_blocker(job, other, cfg, gss)
        if reason is None:
            return other, None
        first_reason = first_reason or reason
    return None, first_reason or "no running job to pair with"


def pick_partner(job: Job, running, cfg: BinderConfig, gss: int | None = None):
    """First running job (in start order) that `job` may share with, or None."""
    return find_partner(job, running, cfg, gss)[0]


def _gmem(job: Job):
    p = job.profile or {}
    v = p.get("gmem")
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if v != v else v  # NaN -> unknown


@dataclass(frozen=True)
class PackingSwitch:
    """Adaptive packing: GSS 2 when demand is high, 1 when moderate, off when low.

    `forecast` is the predicted GPU-job arrivals per 10 minutes over the next hour; `queued` the
    jobs currently waiting. Packing only pays when jobs would otherwise wait.
    """

    high_arrivals: float = 6.0
    low_arrivals: float = 2.0
    min_queued: int = 1

    def gss(self, forecast: float | None, queued: int, cfg: BinderConfig) -> int:
        if queued < self.min_queued:
            return -1  # off: nobody waits
        if forecast is None:
            return cfg.gss
        if forecast <= self.low_arrivals:
            return -1
        if forecast < self.high_arrivals:
            return min(1, cfg.gss)
        return cfg.gss


def should_evict(util_samples, cv_limit: float = 0.5, min_samples: int = 6) -> bool:
    """A packed job whose GPU utilisation turns unstable (coefficient of variation above
    `cv_limit` over recent samples) is evicted from its shared GPUs and re-queued."""
    xs = [float(x) for x in util_samples if x is not None]
    if len(xs) < min_samples:
        return False
    mean = sum(xs) / len(xs)
    if mean <= 0:
        return False
    var = sum((x - mean) ** 2 for x in xs) / len(xs)
    return (var ** 0.5) / mean > cv_limit
