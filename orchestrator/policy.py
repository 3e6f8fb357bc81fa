"""The Lucid scheduling policy: a pure function of the queue, the running jobs and free GPUs.

Order: priority = estimated duration x GPUs, smallest first (jobs are not preempted), aged: a
waiting job's priority value halves every `aging_halflife_s` it waits, so a job whose estimate
ranks it last still reaches the front eventually (the order stays a static sort key; see
`pending_key`).
Placement: consolidated; a job that does not fit exclusively may share the GPUs of a compatible
running job (binder rules) when the adaptive switch allows packing. A job that does fit packs
first only while free GPUs are wanted: some queued job cannot start on them, or a multi-node job
(which can never share) is running or queued in the VC. Otherwise it runs alone, since sharing
slows both jobs down.
Starvation guard: a job waiting longer than `starvation_s` jumps the queue, and while it cannot
start it holds a reservation: later jobs may take free GPUs, or pack onto running ones, only if
their estimated end comes before the reserved job's estimated start (EASY backfilling). Once the
starving job is `backfill_grace_s` past the threshold, the VC drains for it (nothing else starts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import chain

from binder.pairing import SCORE_NAMES, BinderConfig, PackingSwitch, find_partner
from lucidd.cluster import place_consolidated
from lucidd.policies.base import ClusterView, Policy, Share, Start


@dataclass(frozen=True)
class LucidConfig:
    packing: bool = True
    pack_first: bool = True  # pack a queued job onto a compatible running one before using free GPUs (artifact; measured better on Venus, docs/lucid.md)
    # ... but only while free GPUs are wanted (free_gpus_wanted). Packing when nobody needs the
    # free GPUs only adds run time: on Venus' lightly loaded VCs always-pack-first cost up to
    # 374 s of average JCT per VC for queues Tiresias keeps at ~10 s (docs/lucid.md).
    lazy_pack_first: bool = True
    # Aging: the sort value estimate x GPUs halves every this many seconds of waiting (0: no
    # aging, pure estimate x GPUs). Without it a job the estimate ranks last waits until the
    # guard below fires; on Venus those jobs (32-GPU jobs in vcHvQ, 128-GPU jobs behind others
    # with shorter estimates) set a p99.9 above Tiresias' with the guard at 60 or 72 h, while a
    # guard low enough for Venus made Philly's order nearly FIFO. 48 h: Venus and Philly both
    # beat Tiresias on all three measures for every half-life replayed from 18 to 72 h with a
    # guard at 84-120 h (docs/lucid.md, "Aging").
    aging_halflife_s: int = 48 * 3600
    # The hard bound behind aging (which alone cannot bound a wait: a job 2^20 times larger than
    # a stream of tiny ones needs 20 half-lives). 96 h: with aging, Philly's jobs start before
    # it fires, and Venus' average JCT is within 51 s of running with no guard at all. Without
    # aging the guard was the only tail control and 72 h was the compromise (at 48 h Philly's
    # queue turned nearly FIFO, at 84 h its p99.9 exceeded Tiresias'). The tuner proposes a
    # value per cluster.
    starvation_s: int = 96 * 3600
    # Lucid on Slurm (orchestrator/live.site_factor) only: the order among starving jobs. Their
    # submission counts this much later per doubling of estimate x GPUs (the aged key with this
    # half-life); 0: oldest first. lucid-standalone's guard does not read it.
    starving_halflife_s: int = 0
    # Lucid on Slurm only: a job that needs k nodes (its GPUs over its partition's GPUs per node,
    # rounded up) starves after starvation_s / min(k, starvation_node_cap). 1: the same wait for
    # every job (lucid-standalone's guard, which does not read it).
    starvation_node_cap: int = 1
    guard_one: bool = True  # only the longest-waiting starving job jumps the queue
    # Backfilling around a starving job trusts estimates, which can be far too short: each
    # backfilled job that overruns pushes the reservation back, with no bound. After this long
    # past the guard threshold the VC drains for the starving job: nothing new starts or packs
    # until it has started (a bound, at the cost of idle GPUs while the drain lasts).
    backfill_grace_s: int = 24 * 3600
    binder: BinderConfig = field(default_factory=BinderConfig)
    switch: PackingSwitch = field(default_factory=PackingSwitch)


class LucidPolicy(Policy):
    name = "lucid"
    tracks_progress = True
    release_lag = 1  # same release timing as the artifact's Lucid loop (and SRTF/Tiresias here)

    def __init__(self, config: LucidConfig | None = None):
        self.config = config or LucidConfig()

    def pending_key(self, job):
        """Queue order, ascending: estimate x GPUs, halved per `aging_halflife_s` waited.

        size * 2^-(now - submitted)/H orders jobs the same as log2(size) + submitted/H, since
        the now/H term is common to every job at any instant. So aging needs no re-sort as
        time passes: the key is fixed at submission, like the unaged one.
        """
        size = _size(job)
        halflife = self.config.aging_halflife_s
        if not halflife or halflife <= 0:
            return (size, job.seq)
        return (math.log2(size) + _submitted(job) / halflife, job.seq)

    def priority_text(self, job, now) -> str:
        """The job's sort value at `now`, as the decision text shows it."""
        size = _size(job)
        if not job.gpu_num:  # estimate x 0 GPUs, floored at 1 GPU-s: ahead of every GPU job
            return "priority 1 GPU-s, the least: it asks for no GPU"
        halflife = self.config.aging_halflife_s
        if not halflife or halflife <= 0:
            return f"priority {size:,.0f} GPU-s = estimate x GPUs"
        waited = max(0.0, now - _submitted(job))
        return (f"priority {size * 2.0 ** (-waited / halflife):,.0f} GPU-s = estimate x GPUs {size:,.0f} "
                f"halved per {halflife / 3600:g} h waited, {waited / 3600:.1f} h")

    def _gss(self, view) -> int:
        if not self.config.packing:
            return -1
        forecast = (view.context or {}).get("forecast")
        return self.config.switch.gss(forecast, len(view.pending), self.config.binder)

    def schedule(self, view):
        cfg = self.config
        now = view.now
        gss = self._gss(view)
        starving = [j for j in view.pending if now - _submitted(j) > cfg.starvation_s]
        starving.sort(key=lambda j: (_submitted(j), j.seq))
        if cfg.guard_one:
            starving = starving[:1]  # one reservation at a time (EASY): the rest keep their SJF rank
        starving_ids = {id(j) for j in starving}
        order = starving + [j for j in view.pending if id(j) not in starving_ids]
        cluster = view.cluster
        candidates = {}  # GPU count -> running jobs without a partner, in start order (pairs need equal counts)
        for j in view.running:
            if j.partner is None:
                candidates.setdefault(j.gpu_num, []).append(j)
        # Once per decision, on the free GPUs before this decision starts anything.
        keep_free = None
        if gss >= 0 and cfg.pack_first:
            keep_free = free_gpus_wanted(order, view.running, cluster) if cfg.lazy_pack_first else "always pack first"
        decisions = []
        draining_for = None  # a starving job that cannot start yet: only jobs ending before its
        shadow = None        # estimated start ("shadow" time, EASY backfilling) may take free GPUs
        for rank, job in enumerate(order):
            layout = cluster.place(job.gpu_num)
            drained = draining_for is not None and (
                now - _submitted(draining_for) > cfg.starvation_s + cfg.backfill_grace_s)
            if drained:
                break  # the starving job's GPUs are being drained: start nothing else
            # While draining, a packed job must also end before the reserved start (it would
            # otherwise keep its shared GPUs busy past it, as chains of packed jobs did).
            backfill_ok = draining_for is None or now + job.estimate <= shadow
            if gss >= 0 and (keep_free is not None or layout is None or draining_for is not None) and backfill_ok:
                same_size = candidates.get(job.gpu_num, ())
                partner, why_not = find_partner(job, same_size, cfg.binder, gss)
                if partner is not None:
                    same_size.remove(partner)
                    why_pack = ("no exclusive GPUs free" if layout is None else
                                f"free GPUs kept: {keep_free}" if keep_free is not None else
                                f"draining for starving job {draining_for.job_id}")
                    decisions.append(Share(job, partner, reason=(
                        f"packed with job {partner.job_id}: {SCORE_NAMES[job.share_score]}+"
                        f"{SCORE_NAMES[partner.share_score]} <= GSS {gss}, same {job.gpu_num} GPU(s), memory fits; "
                        f"{why_pack}")))
                    continue
            elif gss < 0:
                why_not = "packing off (low demand or nobody waiting)"
            elif not backfill_ok:
                why_not = f"would outlast the reservation for starving job {draining_for.job_id}"
            elif cfg.pack_first and cfg.lazy_pack_first:
                why_not = "exclusive GPUs were free and no other job needed them"
            else:
                why_not = "exclusive GPUs were free"
            if layout is not None and not backfill_ok:
                continue  # would still hold GPUs when the starving job is due to start
            if layout is not None:
                cluster.take(layout)
                decisions.append(Start(job, layout, reason=(
                    f"{'starvation guard, ' if id(job) in starving_ids else ''}queue rank {rank + 1} "
                    f"({self.priority_text(job, now)}), exclusive; not packed: {why_not}")))
                continue
            if id(job) in starving_ids and draining_for is None:
                draining_for = job
                shadow = shadow_start(job, view.running, cluster, now)
        return decisions


def free_gpus_wanted(order, running, cluster) -> str | None:
    """Why the VC's free GPUs are wanted by others (so a job that fits should pack first), or None.

    Wanted when a queued job cannot start on them even after those ahead of it in `order` have
    started, or when a multi-node job is running or queued: it can never share, and packing the
    small jobs is what keeps whole nodes free for it (on Venus' vcEwI, where one user submits
    hundreds of 32-GPU jobs, packing only when blocked made them wait 50x longer).
    """
    per_node = cluster.gpus_per_node
    for j in chain(order, running):
        if j.gpu_num > per_node:
            return f"multi-node job {j.job_id} in the VC needs whole nodes"
    trial = ClusterView(cluster.name, per_node, cluster.free)  # a scratch copy of the free counts
    for j in order:  # each placement takes >= 1 GPU: at most total GPUs + 1 steps
        layout = trial.place(j.gpu_num)
        if layout is None:
            return f"job {j.job_id} ({j.gpu_num} GPU(s)) cannot start on the free GPUs"
        trial.take(layout)
    return None


MAX_ESTIMATE_S = 1e12  # ~31,700 years: above any real estimate, and finite


def _size(job) -> float:
    """estimate x GPUs in GPU-seconds, at least 1 (so its log is defined). A missing or invalid
    estimate (None, NaN, <= 0) counts as 1 s: a NaN key would corrupt the sorted queue. Backends
    always set an estimate (a fallback when the model has none), so this is a last resort."""
    est = job.estimate
    if est is None or not est > 0:  # `not est > 0` is also true for NaN
        est = 1.0
    # an infinite estimate (a model's overflow) ranks last, with a finite key: log2(inf) made the
    # live SiteFactor's int() raise every cycle (an audit)
    return max(min(float(est), MAX_ESTIMATE_S) * job.gpu_num, 1.0)


def _submitted(job) -> int:
    """Original submission time (jobs requeued from the profiler keep theirs in attrs)."""
    return job.attrs.get("submitted", job.submit_time)


def shadow_start(job, running, cluster, now) -> float:
    """Estimated time `job` could start if running jobs end as estimated (EASY backfilling)."""
    free = list(cluster.free)
    ends = []
    for r in running:
        if r.partner is not None and r.partner.status == "running" and r.seq > r.partner.seq:
            continue  # the GPUs free up when the pair's other job ends
        left = max(0.0, (r.estimate or 0.0) - (now - (now if r.start_time is None else r.start_time)))
        ends.append((now + left, r))
    ends.sort(key=lambda e: e[0])
    if place_consolidated(free, job.gpu_num, cluster.gpus_per_node) is not None:
        return now
    for t, r in ends:
        for node, gpus in r.alloc:
            free[node] += len(gpus)
        if place_consolidated(free, job.gpu_num, cluster.gpus_per_node) is not None:
            return t
    return float("inf")
