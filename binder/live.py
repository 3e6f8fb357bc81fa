"""GPU packing on a live Slurm cluster: which waiting 1-GPU jobs may share a GPU now.

Pure functions of plain data (a job's NVML figures from its profiling run, its partition's
queue); the decider calls them and the daemon applies the result as a shard count
(docs/deploy.md, "GPU packing"). How Slurm 22.05 can share a GPU at all decides the shape:

* job_submit.lua turns a 1-GPU request into `shard:2` (2 shards per GPU: a GPU of its own);
  lucidd lowers a waiting job to `shard:1` and Slurm's first-fit puts it on the lowest GPU of its
  node with a free shard, which is a GPU where another 1-shard job runs, if there is one.
* So lucidd does not choose the partner: any two 1-shard jobs may meet. The binder's pair rules
  (binder/pairing.py) therefore become rules on each job alone, strict enough that every pair
  they allow passes: a sharing score of at most GSS / 2 (with the default GSS 1: Tiny; with 2,
  Tiny or Medium, so a pair sums to at most 2) and at most half of a GPU's memory (less the
  headroom) each. The rule on relative lengths (a short job never stretches a long one) cannot be
  kept: Slurm picks the pair.
  One rule the simulator's binder never needed: a job whose estimate, slowed to the slowest speed a
  partner may leave it (0.87 by default), would pass its time limit keeps its GPU (Slurm would end
  it there; `limit_blocker`).
* Lazy, as in simulation (orchestrator/policy.py `free_gpus_wanted`): a job is lowered only
  while its partition has a job waiting for GPUs (Slurm's reason Resources or Priority); then
  free GPUs are wanted and sharing frees one. When nobody waits, it is raised back to a GPU of its
  own, since sharing slows both jobs.

The sharing score comes from the NVML sampler's figures of the job's profiling run: a packing
model file (models/packing.py, fitted on co-location measurements) where one is configured, or
the rule on SM utilisation below. NVML cannot see mixed precision (`amp`, one of the model's
inputs), so a model is asked with amp off and on and the higher score is taken.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lucidd.backends.base import partition_names

from .pairing import JUMBO, MEDIUM, SCORE_NAMES, TINY
from .speeds import time_sliced_pair_speed
# Slurm's pending reasons that mean a job waits for GPUs (for a higher-priority job that does).
WAITING_FOR_GPUS = ("Resources", "Priority")
SHARED, OWN = 1, 2  # shard counts: may share a GPU, a GPU of its own
# Jumbo jobs sharing (GSS 4): the slowest measured pairs kept 0.44 (RTX 3090s, the Lucid artifact)
# and 0.46 (two jobs at 93 % on an H200, bench/nvml_on_gpu.py).
JUMBO_PAIR_SPEED = 0.45


def slowest_shared_speed(cfg) -> float:
    """The slowest a job that may share is expected to run beside any partner the rule admits (the
    highest class GSS lets share, at the top of its utilisation band). Slurm's shards give no MPS:
    the GPU time-slices, and a job keeps about 1 / (1 + its partner's SM utilisation) (the estimate
    the replay gives pairs too, binder.speeds.time_sliced_pair_speed). Measured on
    an H200 (bench/nvml_on_gpu.py): two ResNet-18 trainings at 24.5 % kept 0.80 (estimate 0.80), at
    53 % 0.65 (0.65); two at 14 % kept 0.91 (0.88). So with the default Tiny band (below 15 %) and
    GSS 1, 1 / 1.15 = 0.87."""
    top = min(max(cfg.gss, 0) // 2, JUMBO)
    if top == JUMBO:
        return JUMBO_PAIR_SPEED
    return time_sliced_pair_speed(0.0, cfg.tiny_below_util if top == TINY else cfg.jumbo_from_util)[0]


@dataclass(frozen=True)
class LivePackingConfig:
    # 1: Tiny jobs share, never Medium ones: two Medium jobs keep about 0.65-0.70 of their speed on
    # a time-sliced H200 (bench/nvml_on_gpu.py), which the labels call Jumbo behaviour
    gss: int = 1
    gpu_memory_mib: float = 0.0  # one GPU's memory; 0: unknown, nothing shares (see with_gpu_memory)
    memory_headroom_mib: float = 1024.0  # kept free on a shared GPU (CUDA contexts, fragmentation)
    # mean SM utilisation (%) below which a job is Tiny (rule): 15 keeps a pair of Tiny jobs at 0.87
    # of their speed or more by time-slicing's estimate (two ResNet-18s at 24.5 % kept 0.80 on an H200)
    tiny_below_util: float = 15.0
    jumbo_from_util: float = 60.0  # ... from which it is Jumbo (rule); Medium between
    min_util_samples: int = 3  # NVML readings of utilisation a class needs
    memory_unknown: str = ""  # why gpu_memory_mib is 0, when with_gpu_memory found no figure


def with_gpu_memory(cfg: LivePackingConfig, partitions: str, gpu_memory: dict) -> LivePackingConfig:
    """`cfg` with the GPU memory that the memory rule assumes for a job that may run in `partitions`
    (Slurm's comma list): `[packing] gpu_memory_mib` when set, else (0) the smallest GPU on those
    partitions' GPU nodes as their NVML samplers report it (`gpu_memory`: partition -> {node: the
    node's smallest GPU in MiB, None when its sampler has not said}). Slurm may put a lowered job
    on any of those nodes, so one node without a figure leaves the memory unknown, and nothing shares."""
    if cfg.gpu_memory_mib > 0:
        return cfg
    nodes = {}
    for part in (partitions or "").split(","):
        nodes.update(gpu_memory.get(part, {}))
    if not nodes:
        return replace(cfg, memory_unknown=f"GPU memory unknown: no GPU node of {partitions or '?'} is known "
                                           "([packing] gpu_memory_mib = 0: the smallest GPU its samplers report)")
    unknown = sorted(n for n, mib in nodes.items() if not mib)
    if unknown:
        named = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        return replace(cfg, memory_unknown=(
            f"GPU memory unknown: no NVML sampler has reported the GPUs of {named} ({len(unknown)} of "
            f"{len(nodes)} GPU node(s) of {partitions}; [packing] gpu_memory_mib = 0 takes the smallest GPU "
            "their samplers report)"))
    return replace(cfg, gpu_memory_mib=float(min(nodes.values())))


def share_score(profile, cfg: LivePackingConfig, model=None) -> tuple[int | None, str]:
    """(sharing score, how it was found) from a job's profiling-run figures (an object with
    gpu_util, gmem_util, gmem_mib, util_samples; None: no figures), or (None, why none)."""
    if profile is None:
        return None, "no GPU figures from its profiling run (not profiled, or no NVML sampler on its node)"
    incomplete = getattr(profile, "incomplete", "")
    if incomplete:
        # figures of part of the run only (the sampler's last flush_s not yet written, a sampler that
        # died, a database that was away): its startup can look Tiny and small beside the 20 GiB it
        # held later. Store.profiling_gpu_profiles says why; the next cycles judge it again.
        return None, incomplete
    util, samples = profile.gpu_util, int(profile.util_samples or 0)
    if util is None or samples < cfg.min_util_samples:
        return None, (f"{samples} utilisation reading(s) from its profiling run, fewer than {cfg.min_util_samples} "
                      "(a MIG GPU has none)")
    rule = TINY if util < cfg.tiny_below_util else MEDIUM if util < cfg.jumbo_from_util else JUMBO
    rule_how = (f"SM utilisation {util:.0f} % over {samples} readings: {SCORE_NAMES[rule]} (Tiny below "
                f"{cfg.tiny_below_util:g} %, Jumbo from {cfg.jumbo_from_util:g} %)")
    if model is None:
        return rule, rule_how
    mem_util = profile.gmem_util if profile.gmem_util is not None else 0.0
    gmem = profile.gmem_mib if profile.gmem_mib is not None else 0.0
    try:
        scores = [int(model.predict_one(util, mem_util, gmem, amp)) for amp in (0, 1)]
    except Exception as exc:  # noqa: BLE001 - a tree unpickled from another scikit-learn fails in any way
        # (AttributeError, ValueError...): the rule, as with no model, rather than a decide() that
        # raises at every cycle and orders nothing (a review)
        return rule, f"{rule_how} (the packing model failed: {type(exc).__name__}: {exc})"
    score = max(scores)
    how = (f"packing model: {SCORE_NAMES[score]} from SM {util:.0f} %, memory read/write {mem_util:.0f} %, "
           f"{gmem:.0f} MiB")
    if scores[0] != scores[1]:
        how += " (the higher of amp off and on: NVML cannot see amp)"
    if rule > score:
        # A model may hold a job back, never admit one above the rule's band: the time-limit rule
        # (slowest_shared_speed) counts on every partner being inside it, and a model fitted on
        # other GPUs (the artifact's RTX 3090s) misjudges a time-sliced one (two ResNet-18s at 24.5 %,
        # Tiny by the artifact's 30 %, kept 0.80 on an H200).
        return rule, f"{how}; but {rule_how}, and the higher class counts"
    return score, how


def sharing_blocker(profile, score: int | None, why_score: str, cfg: LivePackingConfig) -> str | None:
    """Why a job may share a GPU with no job at all, or None when it may share with any other
    job that passes this test (every such pair keeps the binder's GSS and memory rules)."""
    if score is None:
        return f"no packing class: {why_score}"
    if 2 * score > cfg.gss:
        return f"{why_score}; a pair of such jobs could exceed GSS {cfg.gss}"
    if cfg.gpu_memory_mib <= 0:
        return cfg.memory_unknown or "[packing] gpu_memory_mib is not set: whether two jobs fit one GPU is unknown"
    gmem = profile.gmem_mib
    if gmem is None:
        return "its GPU memory is unknown"
    half = (cfg.gpu_memory_mib - cfg.memory_headroom_mib) / 2
    if gmem > half:
        return (f"{why_score}; it used {gmem:.0f} MiB of GPU memory, more than half of a GPU's "
                f"{cfg.gpu_memory_mib:.0f} MiB less {cfg.memory_headroom_mib:.0f} MiB headroom ({half:.0f} MiB)")
    return None


def packing_test(profile, cfg: LivePackingConfig, model=None) -> tuple[int | None, str, str | None]:
    """(score, how it was found, why the job may share with nobody or None): share_score and
    sharing_blocker together, as every caller asks them."""
    score, how = share_score(profile, cfg, model)
    return score, how, sharing_blocker(profile, score, how, cfg)


def partitions_wanting_gpus(waiting) -> dict:
    """partition -> a job there that waits for GPUs (reason Resources or Priority), from the
    pending jobs of the managed partitions (LiveJob-like: partition, reason, held, dependency)."""
    out = {}
    for j in waiting:
        if j.reason in WAITING_FOR_GPUS and j.gpus > 0:
            for p in (j.partition or "").split(","):
                out.setdefault(p, j.job_id)
    return out


CONSTANT_ESTIMATES = ("default", "fallback:constant")  # estimate sources that say nothing of the job


def limit_blocker(estimate_s, time_limit_s, cfg: LivePackingConfig, source: str | None = None) -> str | None:
    """Why sharing could make the job run past its time limit (Slurm ends it there: TIMEOUT), or None:
    its estimate at the slowest speed a partner the rule admits may leave it (slowest_shared_speed).
    A job with no limit, or no estimate at all (lucidd makes none with [ordering] off), is not held
    back by this; one with a limit whose estimate is a constant (`source` "default" or
    "fallback:constant": [ordering] default_estimate_s, the same for every job while lucidd has no
    history for it) is, as nothing says how close to its limit it runs (an audit)."""
    if not time_limit_s or not estimate_s:
        return None
    if source in CONSTANT_ESTIMATES:
        return (f"it has a time limit ({time_limit_s:,.0f} s) and no estimate of its own yet, so nothing says "
                "sharing would leave it time enough")
    speed = slowest_shared_speed(cfg)
    slowed = estimate_s / speed
    if slowed > time_limit_s:
        return (f"its time limit, {time_limit_s:,.0f} s, is too close: its estimate, {estimate_s:,.0f} s, at "
                f"{speed:.2f} of its speed beside a partner (GSS {cfg.gss}) would take {slowed:,.0f} s")
    return None


def shard_decision(job, partition: str, profile, wanting: dict, cfg: LivePackingConfig,
                   model=None, estimate_s=None, estimate_source=None) -> tuple[int, str]:
    """(shard count, why) for a waiting job of shards (`job.packable`) that waits in (or is
    released to) `partition`; `estimate_s`: its duration estimate (its time limit is the job's), and
    `estimate_source` where it came from (limit_blocker)."""
    _, why, blocked = packing_test(profile, cfg, model)
    blocked = blocked or limit_blocker(estimate_s, getattr(job, "time_limit_s", None), cfg, estimate_source)
    if blocked is not None:
        return OWN, f"a GPU of its own: {blocked}"
    parts = partition_names(partition)
    waiter = next((wanting[p] for p in parts if p in wanting), None)
    if waiter is None:
        return OWN, (f"a GPU of its own: {why}, but nobody waits for GPUs in {partition} (lazy packing: "
                     "sharing slows both jobs, so it waits until free GPUs are wanted)")
    who = ("it waits for GPUs itself" if waiter == job.job_id else
           f"job {waiter} waits for GPUs there (or did within the last minute)")
    return SHARED, (f"may share a GPU (one shard): {why}; {who}; any job it meets on a GPU passed the same "
                    f"test (GSS {cfg.gss}, at most half a GPU's memory each)")
