"""Lucid's decisions on a live Slurm cluster: the decider `lucidd` calls every reconcile cycle.

The same objects as in simulation make the decisions: jobs become `lucidd.jobs.Job`, the
profiling queue is ordered by the profiler's `LeastGPUFirst.pending_key`, and the main queue by
`LucidPolicy.pending_key` (estimate x GPUs, halved per `aging_halflife_s` waited, counted from the
original submission) with the policy's starvation threshold in front. What differs is only how a
decision reaches the cluster: Slurm places jobs itself, so the order is applied as SiteFactor
(docs/deploy.md), and profiling is a partition lucidd moves jobs into and requeues them out of.

SiteFactor of a waiting job:
  starving (waited > starvation_s, less for a job of several nodes: `starvation_after`):
                                     2,000,000,000 - minutes since EPOCH of its submission
  otherwise:                         1,000,000,000 - round(points_per_doubling * key)
where key = log2(estimate x GPUs) + (submitted - EPOCH) / aging_halflife_s, which is
`LucidPolicy.pending_key` up to the constant EPOCH/halflife. Both values depend only on what
is known at submission, so a job's SiteFactor is written once (and again only if its estimate
changes or it starts starving).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import threading
import time
from dataclasses import replace
from datetime import datetime

import pandas as pd

from lucidd.backends.base import next_rank, partition_names, waits_for_other_than_gpus
from lucidd.jobs import Job, within_limit
from lucidd.live.reconcile import (NOT_ESTIMATED, PARTITION_GPU_NODES_KEY, Decider, DecisionInput, Plan,
                                   estimate_explanation, grace_s, packing_explanation, partition_gpu_memory)
from profiler.lgf import LeastGPUFirst

from .policy import LucidConfig, LucidPolicy, _size

log = logging.getLogger("lucidd.lucid")

EPOCH = 1767225600  # 2026-01-01 UTC: keeps the aged key small; any fixed instant gives the same order
NORMAL_BASE = 1_000_000_000
STARVING_BASE = 2_000_000_000


def live_job(j, record) -> Job:
    """A live job as the simulator's Job: vc = its partition, submitted at its original time."""
    submitted = int(record.original_submit) if record is not None else int(j.submit_time)
    job = Job(j.job_id, record.target_partition if record is not None else j.partition, j.gpus, submitted, 0,
              j.job_id, user=j.user, name=j.name, cpu_num=j.cpus, time_limit=j.time_limit_s)
    job.attrs["submitted"] = submitted
    # An estimate is made once, at first sight, as the simulator makes it; but the constant given
    # when no estimate could be made at all ("default") is tried again at the next cycle.
    if record is not None and record.estimate_s and getattr(record, "estimate_source", None) != "default":
        job.estimate = float(record.estimate_s)
    return job


def model_partition(partition: str | None) -> str | None:
    """The partition the duration model is given for a job: the first of a list. Its history names
    the one partition each job ran in (sacct's), so a pending `-p main,research`, given as the whole
    list, was a VC the model had never seen and its same-VC history features found nothing."""
    names = partition_names(partition)
    return names[0] if names else partition


def partition_node_gpus(node_gpus: dict, partition: str | None) -> int:
    """The most GPUs on one node of `partition`, or of any partition of a list (`-p main,research`:
    its job may run in either; keyed by the whole list it found none, and a wide job asking so
    started starving 4x later)."""
    return max((node_gpus.get(p, 0) for p in partition_names(partition)), default=0)


def starvation_divisor(cfg: LucidConfig, job: Job, node_gpus: int) -> int:
    """What starvation_s is divided by for `job`: the nodes it needs (its GPUs over `node_gpus`, its
    partition's most GPUs on one node, rounded up), at most starvation_node_cap; 1 for a job that
    fits on one node, or when node_gpus is 0 (unknown). Why: backfill starts a smaller job wherever
    one fits, so a job of several whole nodes is the one the cluster never drains for unless it is
    guarded; waiting as long as a 1-GPU job, it set the tail of the small clusters (docs/lucid.md,
    "Wide jobs starve sooner")."""
    cap = cfg.starvation_node_cap
    if cap <= 1 or node_gpus <= 0 or job.gpu_num <= node_gpus:
        return 1
    return min(-(-job.gpu_num // node_gpus), cap)


def starvation_after(cfg: LucidConfig, job: Job, node_gpus: int) -> int:
    """Seconds `job` waits before it starves (`starvation_divisor`)."""
    return cfg.starvation_s // starvation_divisor(cfg, job, node_gpus)


def site_factor(policy: LucidPolicy, job: Job, now: int, points_per_doubling: int,
                node_gpus: int = 0) -> tuple[int, bool]:
    """(SiteFactor, starving) for a waiting job, from the policy's own sort key; `node_gpus`: the
    most GPUs on one node of its partition (`starvation_after`)."""
    cfg = policy.config
    submitted = job.attrs.get("submitted", job.submit_time)
    if now - submitted > starvation_after(cfg, job, node_gpus):
        # Oldest first, a job's submission counted starving_halflife_s later per doubling of its
        # estimate x GPUs: a bounded preference for small jobs (at most ~25 half-lives between the
        # smallest and the largest), so a queue where most jobs starve is not plain FIFO.
        late = cfg.starving_halflife_s * math.log2(_size(job)) if cfg.starving_halflife_s > 0 else 0.0
        return max(2, STARVING_BASE - int(submitted - EPOCH + late) // 60), True
    key = policy.pending_key(job)[0]
    if cfg.aging_halflife_s and cfg.aging_halflife_s > 0:
        key -= EPOCH / cfg.aging_halflife_s  # same order, a smaller number
    else:
        key = math.log2(key)  # the unaged key is estimate x GPUs itself
    return int(min(STARVING_BASE - 1, max(2, NORMAL_BASE - round(points_per_doubling * key)))), False


# ----- profiling admission: one pure function for the daemon and the simulator ---------------------
#
# `p` is lucidd's [profiler] config section (orchestrator.slurm_mode builds the same section for a
# replay); jobs are `LiveJob`s (or objects with the same fields) and records `JobRow`s (or objects
# with first_seen, profile, requested_partition, original_submit, target_partition, estimate_s, profile_start).

def profiling_capacity(p, profiling_gpus: int, queue_len: int) -> int:
    """GPUs the profiling jobs may hold at once: `capacity_gpus`, or automatically the larger of
    Nprof and 3 % of the profiling partition's GPUs; `burst_capacity_gpus` while more than
    `burst_queue` jobs wait for profiling; never more than the partition has."""
    cap = p.capacity_gpus or max(p.nprof_gpus, int(math.ceil(0.03 * profiling_gpus)))
    if queue_len > p.burst_queue and p.burst_capacity_gpus > cap:
        cap = p.burst_capacity_gpus
    return min(cap, profiling_gpus) if profiling_gpus else 0


def profiling_skip_reason(p, j, record) -> str | None:
    """Why job `j` goes to its partition without profiling, or None."""
    if not p.enabled:
        return "profiling is off ([profiler] enabled = false)"
    if j.gpus <= 0:
        return "asks for no GPU: nothing to profile"
    if j.gpus > p.nprof_gpus:
        return f"asks for {j.gpus} GPUs > Nprof {p.nprof_gpus}"
    if not j.requeue:
        return "submitted with --no-requeue: Slurm cannot restart it after profiling"
    if not getattr(j, "batch", True):
        # salloc/srun: Slurm requeues only batch jobs, so a session admitted to profiling would run
        # to its end there, ahead of every queue, holding the profiling room (an admin trial)
        return "an interactive allocation (salloc/srun): Slurm requeues only batch jobs"
    if getattr(j, "deadline", None):
        # the restart after Tprof starts its time limit again: Slurm cancels it (DEADLINE) when what
        # is left before the deadline is shorter (an admin trial lost a job that fitted without lucidd)
        return "has a --deadline: the restart after profiling could make it miss it"
    if j.array_pending:
        return "a job array: its tasks go to their partition together"
    if getattr(j, "array_job_id", 0):
        # seen here only after lucidd-failopen or a restart let the array run: its last task keeps the
        # array's id, and a requeue at Tprof by that id would requeue every task, running ones too
        return f"a task of job array {j.array_job_id}: a requeue could reach the array's other tasks"
    if j.held:
        return "held: it waits for its release in its own partition"
    if j.dependency:
        return f"waits for other jobs ({j.dependency}): it would only hold profiling room"
    if getattr(j, "reservation", ""):
        # its reservation is its window: a profiling run and the restart after it spend that window,
        # and a reservation that ended in between left the job held (RESV_DEL_HOLD) in its partition,
        # where plain Slurm had run it to its end inside the reservation (a review on a test cluster)
        return f"runs in reservation {j.reservation}: its restart after profiling could come after that ends"
    if getattr(j, "waits_for_begin_time", False):
        return "waits for the begin time its owner set (--begin): it would only hold profiling room"
    if getattr(j, "het_job_id", 0):
        # Slurm moves and requeues a heterogeneous job only whole, through its leader, and its
        # components may span nodes and exceed Nprof together
        return "a heterogeneous job: its components go to their partition together"
    if getattr(j, "exclusive", False):
        # it takes whole nodes: profiling room counted by its GPUs would hold every GPU of a node
        return "asks for whole nodes (--exclusive)"
    if j.opted_out_of_profiling:
        return "comment has lucid:noprofile"
    if j.user in p.exempt_users:
        return f"user {j.user} is exempt"
    if j.account in p.exempt_accounts:
        return f"account {j.account} is exempt"
    req = record.requested_partition if record is not None else None
    if req and any(x in p.exempt_partitions for x in req.split(",")):
        return f"partition {req} is exempt"
    if j.nodes > 1:
        return "spans several nodes"
    if getattr(j, "required_nodes", "") or getattr(j, "excluded_nodes", ""):
        # lucidd steers borrowed profiling runs with ExcNodeList and clears it when a job leaves
        # profiling: a user's own node choice would be lost
        return "asks for or excludes particular nodes (--nodelist/--exclude): where it runs is the user's choice"
    return None


def profiling_room_wait(p) -> int:
    """How long a job waits for profiling room (or, admitted, for a node there) before it goes to
    its partition unprofiled: `room_wait_s`, or 2 x the longest Tprof a run may get."""
    longest = max(int(p.tprof_s), int(getattr(p, "long_tprof_s", 0) or 0))
    return int(getattr(p, "room_wait_s", 0) or 2 * longest)


class _Lent:
    lent = True


_LENT = _Lent()


def lent_tprof(p) -> int:
    """Tprof of a lent run (`run_tprof` of a run admitted on GPUs nobody waited for)."""
    return run_tprof(p, _LENT)


def run_tprof(p, record) -> int:
    """Tprof of a run admitted on GPUs nobody waited for: `long_tprof_s` (or `tprof_s`)."""
    if getattr(record, "lent", False) and getattr(p, "long_tprof_s", 0):
        return max(int(p.long_tprof_s), int(p.tprof_s))
    return int(p.tprof_s)


RECLAIM_POINT = 0  # the "Tprof" a warning before a reclaim of lent GPUs is keyed by


def _warned_before_requeue(plan: Plan, j, warning, signalled: dict, now: int, ran: int, at: int,
                           cap: float) -> bool:
    """Whether the requeue of run `j` at its point `at` (its Tprof, or RECLAIM_POINT: now) may go.

    A job that asked for a warning (`warning`: signal, batch shell only, SECONDS; None: it did not)
    gets it from `at - SECONDS` on (plan.signal; the daemon sends it once per run and point), and
    its requeue waits until min(SECONDS, `cap`) after it was sent (`signalled`: (job, restart,
    point) -> when). A warning that could not go out in time (SECONDS shorter than a cycle, a cycle
    that failed, lucidd restarting) is sent late rather than never, and one that cannot be sent at
    all holds the run at most `cap` past its point (a review found requeues without the warning).
    Slurm's requeue itself sends only SIGTERM, then SIGKILL after KillWait."""
    if not warning:
        return True
    sig, batch_only, lead = warning
    wait = min(lead, cap)
    sent = signalled.get((j.job_id, j.restart_count, at))
    if at == RECLAIM_POINT:
        due, late = True, False
    else:
        due, late = ran >= at - lead, ran >= at + wait
    if sent is None and due and not late:
        when = ("before its lent GPUs are reclaimed" if at == RECLAIM_POINT else
                f"{at - ran} s before its requeue at Tprof {at} s" if ran < at else
                f"at its requeue point, Tprof {at} s (no cycle came earlier): the requeue waits for it")
        plan.signal.append((j.job_id, sig, batch_only, at,
                            f"{'B:' if batch_only else ''}{sig} {when}, as its comment asks (lucid:signal=)"))
        return False
    if sent is not None and now - sent < wait:
        return late
    return True


def plan_profiling(p, interval_s: float, now: int, inbox, profiling, records, profiling_gpus: int,
                   plan: Plan | None = None, skip=None, capacity=None, queued: dict | None = None,
                   free: dict | None = None, lendable: tuple[int, int] = (0, 0), busy_nodes=(),
                   away_s: float | None = None, signalled: dict | None = None, node_wait_s=None,
                   over_time_s: int | None = 0, no_gpus_for_s: float | None = None,
                   closed_partitions=frozenset(), slurm_silent_s: float | None = None) -> Plan:
    """One cycle's profiling decisions (plan.requeue, abandon, profile, release), as lucidd makes them.

    Tprof: a job running in profiling for >= Tprof is requeued; one that ran far past it while
    lucidd was away (> Tprof + max(60 s, 3 intervals)) is left to finish there. `away_s`: seconds
    since lucidd's last successful cycle, by a monotonic clock (in the first cycle of a new process,
    since the last one stored, by the wall clock; None: no stored cycle, or a caller that cannot
    tell, as the simulator). Measured so, a run that seems far
    past Tprof while lucidd has been cycling all along (the wall clock stepped forward, or the
    requeue failed at earlier cycles) is requeued, not left. `slurm_silent_s`: of `away_s`, the
    seconds lucidd kept cycling while Slurm did not answer (a slurmctld restart or upgrade): runs
    that passed Tprof meanwhile are requeued if that outage lasted at most the longest Tprof a run
    may get (long_tprof_s, or Tprof), which costs them no more than a long run's requeue does;
    after a longer one they are left to finish there. Inbox: jobs that may be profiled go to
    profiling least-GPUs-first while the GPUs held by profiling jobs (running or admitted, requeued
    ones excluded) stay within the capacity, strictly in that order; the rest wait for the next
    cycle, unless they waited more than `room_wait_s` (default 2 x Tprof; then, and when a skip
    rule applies, they go to their partition unprofiled).

    `queued` (partition -> jobs pending there), when given, switches profiling off for a job whose
    partition has nobody waiting: it would start at once, and profiling could only delay it (the
    daemon does not pass it: off unless configured). `free` (partition -> most free GPUs on one of
    its nodes), given with `queued`, narrows that to a job that also fits on a node of its partition
    now: a job whose partition is full without a queue would wait, and profiling may save it that.

    `lendable` (GPUs, most on one node), with `[profiler] lend_idle_gpus`: the GPUs free on nodes
    whose partitions nobody waits in. A job that fits on one such node is admitted there, outside
    the capacity (plan.lend: the daemon steers it with ExcNodeList; lent jobs admitted and not yet
    started count against those GPUs); any other job within the capacity, which lent runs do not
    use. `busy_nodes`: nodes of partitions someone waits in; with `reclaim_lent` a lent run on one
    of them is requeued (someone now waits for its GPUs). With `keep_lent_while_idle` a lent run is
    requeued only once a job in a partition of its node has waited `long_tprof_s` since submission
    (`node_wait_s`: busy node -> that longest wait; None: every busy node counts): at its Tprof if
    that came before, else then (reclaimed); until then it runs on, past its Tprof, unwarned. A
    lent run's Tprof is `long_tprof_s`; other runs past `tprof_s` go on to it too, oldest first,
    while they hold at most `long_share` of the profiling GPUs.

    `over_time_s`: Slurm's OverTimeLimit (seconds a job may run past its own limit; None:
    UNLIMITED): a run its own limit ends is left to end only if it ends within the grace with it.
    A run whose reason is `Prolog` (PrologFlags=Alloc: Slurm says RUNNING while the node's Prolog
    runs) is not requeued until its Prolog is done.

    `closed_partitions`: partitions that cannot start a job now (not UP, or none of their nodes
    usable: down, drained, reserved, in maintenance). A job whose partitions are all closed is not
    profiled. A run whose partitions are all closed is not requeued at its Tprof:
    the requeue would end a run that plain Slurm had let finish (a drain lets running jobs end) and
    leave the job pending until the nodes came back. It runs on; requeued if a node there comes back
    within another Tprof, else left to finish in profiling."""
    plan = plan if plan is not None else Plan()
    signalled = signalled or {}
    skip = skip or (lambda j, r: profiling_skip_reason(p, j, r))
    capacity = capacity or (lambda queue_len: profiling_capacity(p, profiling_gpus, queue_len))
    tprof = p.tprof_s
    # Tprof: requeue; a job that ran far past it while lucidd was away finishes where it is.
    grace = grace_s(interval_s)
    room_wait = profiling_room_wait(p)
    room_text = (f"room_wait_s {room_wait} s" if getattr(p, "room_wait_s", 0) else
                 "2 x Tprof" if room_wait == 2 * tprof else f"2 x long_tprof_s, {room_wait} s")
    used = lent_pending = 0
    # Long runs: past tprof_s, the oldest runs (not on borrowed GPUs) go on to long_tprof_s while
    # together they hold at most long_share of the profiling GPUs. The choice depends only on start
    # order, so a run kept once is kept at every later cycle (the budget permitting).
    long_s = max(int(getattr(p, "long_tprof_s", 0) or 0), tprof)
    long_budget = int(getattr(p, "long_share", 0.0) * profiling_gpus) if long_s > tprof else 0
    long_used = 0
    for j in sorted(profiling, key=lambda x: (x.start_time or 0, x.job_id)):
        r = records.get(j.job_id)
        if r is None or r.profile in ("requeued", "released"):
            continue  # waiting to leave: holds no GPU
        begin = getattr(j, "waits_for_begin_time", False)
        opted_out = not j.requeue or j.opted_out_of_profiling
        if r.profile == "admitted" and j.pending and r.profile_start is None and (j.held or j.dependency or begin
                                                                                  or opted_out):
            # held (or made to wait for other jobs or a time) by its owner or an admin after its
            # admission: it waits for no GPU, so it would only hold profiling room (as the skip rule says).
            # Asked not to be requeued (requeue=0: the requeue at Tprof would be refused, and the run
            # would stay in profiling to its end, ahead of every queue) or given the opt-out comment: it
            # may not be profiled, and it has not started yet (a review)
            why = ("held by its owner or an admin" if j.held else
                   f"made to wait for other jobs ({j.dependency})" if j.dependency else
                   "given a later begin time by its owner" if begin else
                   "asked not to be requeued (requeue=0)" if not j.requeue else
                   "given the opt-out comment lucid:noprofile")
            then = ("it waits for its release in its own partition" if j.held or j.dependency or begin
                    else "it runs in its own partition")
            plan.release.append((j.job_id, f"not profiled: {why} after its admission to profiling; {then}"))
            continue
        reason = getattr(j, "reason", "") or ""
        if r.profile == "admitted" and j.pending and r.profile_start is None and waits_for_other_than_gpus(reason):
            # at its QOS or account limit, waiting for a reservation or for nodes it may not use: it
            # would hold profiling room for room_wait_s while nobody else is profiled (a review)
            plan.release.append((j.job_id, f"not profiled: pending in profiling for {reason.split(',')[0]}, not "
                                           "for GPUs; it waits in its own partition"))
            continue
        if r.profile == "admitted" and j.pending and r.profile_start is None:
            # Admitted, but no node has had its GPUs free since: past 2 x Tprof from first sight it
            # goes to its partition unprofiled, as an inbox job would (measured: an 8-GPU job sat
            # 17 h in profiling on an 8-node cluster, holding profiling room, while its partition
            # would have started it by its priority).
            waited = now - (r.first_seen or now)
            if waited > room_wait:
                plan.release.append((j.job_id, f"not profiled: waited {waited} s, admitted to profiling but "
                                               f"no node there had its GPUs free (> {room_text})"))
                continue
        if getattr(r, "lent", False):
            # lent: outside the capacity; admitted and not started, it still claims GPUs nobody waits for
            lent_pending += j.gpus if j.pending else 0
        else:
            used += j.gpus  # abandoned jobs still run in profiling and hold their GPUs
        # `is None`, not falsy: a replay's run can start at its trace's time 0 (live, unset is None)
        if r.profile == "abandoned" or j.state != "RUNNING" or j.start_time is None:
            continue
        if (getattr(j, "reason", "") or "") == "Prolog":
            # Slurm says RUNNING while the node's Prolog runs (PrologFlags=Alloc). Requeued then, the job
            # was restarted in its partition without its Prolog, and had no profiling run at all (a
            # review on a test cluster: a 12 s Prolog, Tprof 8 s)
            continue
        ran = now - j.start_time
        warning = getattr(j, "requeue_warning", None)
        if getattr(r, "lent", False) and getattr(p, "reclaim_lent", False) and j.node_names and \
                any(n in busy_nodes for n in j.node_names):
            # lent GPUs are lent while nobody waits for them: someone now does, in a partition of its node
            if _warned_before_requeue(plan, j, warning, signalled, now, ran, RECLAIM_POINT, cap=grace / 2):
                plan.requeue.append((j.job_id, f"ran {ran} s in profiling on lent GPUs: reclaimed, a job now "
                                                f"waits in a partition of {','.join(j.node_names)}"))
            continue
        limit = run_tprof(p, r)
        # only while lending is on: the daemon then reads who waits where (busy_nodes, node_wait_s);
        # with lending switched off (runs lent before still going) nobody would ever seem to wait, and
        # the run would never be requeued: it is at its Tprof, as without the key
        if getattr(r, "lent", False) and getattr(p, "keep_lent_while_idle", False) and j.node_names and \
                getattr(p, "lend_idle_gpus", False):
            waits = [(node_wait_s.get(n, 0) if node_wait_s is not None else limit)
                     for n in j.node_names if n in busy_nodes]
            if not waits or max(waits) < limit:
                # nobody has waited long_tprof_s for its GPUs: past its Tprof it runs on (requeued, it
                # would lose its run, and restart, often at once, in its own partition); before, no warning
                continue
            own = _ends_by(getattr(j, "time_limit_s", None), over_time_s)
            if ran >= limit and own is not None and own <= ran + grace:
                # its own time limit ends it within the grace: requeued, it would run that whole limit
                # again in its partition (as at Tprof below)
                plan.abandon.append((j.job_id, f"ran {ran} s in profiling on lent GPUs, kept past Tprof {limit} s; "
                                                f"its own time limit{' with OverTimeLimit' if over_time_s else ''}, "
                                                f"{own} s, ends it within {grace:g} s: left "
                                                "to end there (a reclaim would only run it again)"))
                continue
            if ran >= limit:  # kept past its Tprof, and someone has now waited that long: reclaimed
                if _warned_before_requeue(plan, j, warning, signalled, now, ran, RECLAIM_POINT, cap=grace / 2):
                    plan.requeue.append((j.job_id, f"ran {ran} s in profiling on lent GPUs, kept past Tprof {limit} s "
                                                    f"while nobody waited that long for them: reclaimed, a job has "
                                                    f"waited {max(waits)} s in a partition of {','.join(j.node_names)}"))
                continue
            # waited for that long before its Tprof: requeued at Tprof, as without the key
        kept = ""
        if limit == tprof and ran >= tprof and long_used + j.gpus <= long_budget:
            # one of the oldest runs past Tprof: kept as a long run, and requeued at long_tprof_s like a
            # lent run (until 25 November 2026 `ran < long_s` here made a long run that reached
            # long_tprof_s fall back to Tprof and count as "far past it": left to finish in profiling,
            # one Venus job for 38 hours on an idle partition's node)
            limit = long_s
            # said in the reason: admitted with "Tprof 600 s", a run requeued later needs its why
            kept = f" (kept past Tprof {tprof} s as one of the oldest runs within long_share)"
            if ran < long_s:  # requeued at this cycle, it holds no GPU past it: room for a younger run
                long_used += j.gpus
        own = _ends_by(getattr(j, "time_limit_s", None), over_time_s)
        ends_by_own_limit = own is not None and own <= limit + grace
        # the warning the job asked for (lucid:signal=): planned from `limit - SECONDS` on, and the
        # requeue waits for it (at most grace / 2 past Tprof when it could only be sent late)
        may_requeue = ends_by_own_limit or _warned_before_requeue(plan, j, warning, signalled, now, ran, limit,
                                                                   cap=grace / 2)
        if ran >= limit and ends_by_own_limit:
            # Slurm ends it at its own limit within the grace (its limit check runs every ~30 s, so
            # the two race): requeued, it would run its whole limit again in its partition and be
            # killed there too (seen on the test cluster: 162 s of GPU time on a 60 s limit)
            plan.abandon.append((j.job_id, f"ran {ran} s in profiling; its own time limit"
                                            f"{' with OverTimeLimit' if over_time_s else ''}, {own} s, ends it "
                                            f"within Tprof {limit} s + {grace:g} s: left to end there (a requeue "
                                            "would only run it again)"))
            continue
        where = partition_names(getattr(r, "target_partition", "") or "")
        if ran >= limit and where and all(x in closed_partitions for x in where):
            if ran >= limit + tprof:
                plan.abandon.append((j.job_id, f"ran {ran} s in profiling; since its Tprof {limit} s "
                                                f"{', '.join(where)} could not start it (the partition, or every node "
                                                "of it, down, drained or reserved, or Slurm no longer has it): left to "
                                                "finish there (a requeue would end this run and leave the job "
                                                "waiting there)"))
            continue
        was_away = away_s is None or away_s > grace
        silent = slurm_silent_s if was_away and away_s is not None and slurm_silent_s else None
        if silent is not None and silent <= long_s:
            was_away = False  # only Slurm was away, and not for long: requeued as at its Tprof
        if ran > limit + grace and was_away:
            why = (f"Slurm did not answer for {silent:.0f} s, longer than {long_s} s" if silent is not None
                   else "lucidd was away")
            plan.abandon.append((j.job_id, f"ran {ran} s in profiling, past Tprof {limit} s + {grace:g} s "
                                            f"({why}): left to finish there"))
        elif not may_requeue:
            continue  # its warning was sent this cycle or moments ago: the requeue follows it
        elif ran > limit + grace and silent is not None:
            plan.requeue.append((j.job_id, f"ran {ran} s >= Tprof {limit} s in profiling without ending: "
                                            f"Slurm did not answer for {silent:.0f} s"))
        elif ran > limit + grace:
            plan.requeue.append((j.job_id, f"ran {ran} s >= Tprof {limit} s in profiling without ending (by "
                                            f"Slurm's clock; lucidd's last cycle was {away_s:.0f} s ago, so the "
                                            "clock stepped, an earlier requeue failed, lucidd held it back "
                                            "after a slurmctld restart, or its partition could not start it)"))
        elif ran >= limit:
            plan.requeue.append((j.job_id, f"ran {ran} s >= Tprof {limit} s in profiling without ending{kept}"))
    # Inbox: least GPUs first into profiling while capacity lasts; the rest go to their partition.
    # A job wider than max_job_share of the (non-burst) capacity is not profiled: admission is strictly
    # least-GPUs-first, so while it holds the capacity nobody else is profiled, and jobs behind it wait
    # for room. Measured on 8 nodes (capacity 8 GPUs): a burst of 8-GPU, 300 s jobs queued for room one
    # by one, then waited 19 h in their partition behind smaller jobs (docs/lucid.md). Off (1.0) by
    # default: on the bundled sample it costs more than it saves.
    cap0 = capacity(0)
    widest = max(1, int(p.max_job_share * cap0))  # a 1-GPU job always may be
    candidates = []
    for j in inbox:
        r = records.get(j.job_id)
        why = skip(j, r)
        if why is None and cap0 and j.gpus > widest:
            why = (f"asks for {j.gpus} GPUs > {p.max_job_share:g} x the profiling capacity ({cap0} GPUs): "
                   "it would hold profiling for every job behind it")
        # a list of partitions (`-p main,research`): Slurm starts it in whichever has room
        targets = partition_names(r.target_partition) if r is not None else ()
        if why is None and targets and all(t in closed_partitions for t in targets):
            # it could not run there after its profiling run: it would run to its end in profiling
            # instead, ahead of every queue, on other partitions' nodes (a review: a drained partition's
            # whole queue did)
            why = (f"{', '.join(targets)} cannot start a job now (the partition, or every node of it, is down, "
                   "drained or reserved): it waits there, as without lucidd")
        if (why is None and queued is not None and r is not None and not sum(queued.get(t, 0) for t in targets)
                and (free is None or max((free.get(t, 0) for t in targets), default=0) >= j.gpus)):
            # Each job of a cycle is judged against the GPUs free at its start, not what the others
            # released with it take: counting those (first-fit per node) was measured worse, Venus
            # x0.8 +4.3 % avg JCT (p99.9 above slurm's) and the sample +3 % (docs/config.md)
            why = (f"nobody waits in {r.target_partition} and one of its nodes had {j.gpus} GPU(s) free at this "
                   f"cycle: it would start at once unless jobs released with it take them; profiling could "
                   f"only delay it")
        if why is not None:
            plan.release.append((j.job_id, f"not profiled: {why}"))
            continue
        waited = now - (r.first_seen if r is not None else now)
        if waited > room_wait:  # profiling would delay it more than it is worth
            plan.release.append((j.job_id, f"not profiled: waited {waited} s for profiling room "
                                           f"(> {room_text})"))
            continue
        candidates.append((j.gpus, j.job_id))  # LeastGPUFirst.pending_key of live_job(j, r)
    candidates.sort()
    cap = capacity(len(candidates))
    lend_free, lend_node = lendable if getattr(p, "lend_idle_gpus", False) else (0, 0)
    lent = lent_pending
    if profiling_gpus <= 0 and not lend_free:
        # no usable GPU in profiling at all (its nodes down, drained, reserved, or not responding):
        # a job would wait room_wait_s for room that cannot come, where its partition may have some.
        # After the grace, counted from when it lost them (`no_gpus_for_s`; not tracked: the job's own
        # wait): nodes that miss a cycle or two (re-registering) send no job of a backlog on
        for _, job_id in candidates:
            r = records.get(job_id)
            gone = no_gpus_for_s if no_gpus_for_s is not None else \
                now - (r.first_seen if r is not None and r.first_seen is not None else now)
            if gone >= grace:
                plan.release.append((job_id, f"not profiled: the profiling partition has had no usable GPU for "
                                              f"{gone:.0f} s (its nodes are down, drained, reserved or not "
                                              "responding)"))
        return plan
    for g, job_id in candidates:
        if g <= lend_node and lent + g <= lend_free:
            # Steered onto free GPUs of partitions nobody waits in, which would otherwise idle, and off
            # the GPUs a waiting job could take; outside the capacity. Measured on the load sweep: with
            # the capacity alone (runs anywhere) short jobs of busy partitions waited days while other
            # partitions idled (docs/lucid.md, "Lending idle GPUs to profiling").
            lent += g
            plan.profile.append((job_id, f"profiling on GPUs nobody waits for: {g} GPU(s), least-GPUs-first, "
                                             f"on a node of a partition with no queue (with it, {lent} of the "
                                             f"{lend_free} idle GPUs there are lent to profiling), "
                                             f"Tprof {lent_tprof(p)} s"))
            plan.lend.append(job_id)
        elif used + g <= cap:
            used += g
            plan.profile.append((job_id, f"profiling: {g} GPU(s), least-GPUs-first, "
                                             f"{used}/{cap} profiling GPUs in use, Tprof {tprof} s"
                                             + (f" (up to {long_s} s if it is among the oldest runs within "
                                                f"long_share then)" if long_budget else "")))
        else:
            break  # strict least-GPUs-first: nothing bigger fits either
    return plan


def _ends_by(time_limit_s: int | None, over_time_s: int | None) -> int | None:
    """When Slurm ends a run by its own time limit, s after its start (None: it does not): the limit
    plus OverTimeLimit. With OverTimeLimit=UNLIMITED a run past its limit was left in profiling
    for good as one "its own limit ends" (a review: `-t 1` ran on there past 1:14)."""
    if time_limit_s is None or over_time_s is None:
        return None
    return time_limit_s + over_time_s


def history_frame(rows) -> pd.DataFrame:
    """The store's history rows as the duration model's jobs table, with each name normalised here,
    once per read of the history, not again at every cycle that estimates new jobs."""
    from models.names import normalise_names

    # column by column: a frame built from one dict per row took as long as the read itself
    names = [r.name for r in rows]
    return pd.DataFrame({"job_id": [str(r.job_id) for r in rows],
                         "submit_time": [int(r.submit_time) for r in rows],
                         "duration": [int(r.duration) for r in rows], "gpu_num": [int(r.gpus) for r in rows],
                         "user": [r.user for r in rows], "vc": [r.partition for r in rows],
                         "name": names, "name_norm": normalise_names(names)},
                        columns=["job_id", "submit_time", "duration", "gpu_num", "user", "vc", "name", "name_norm"])


_EBM_SOURCE = re.compile(r"^ebm:v([0-9]+)")


def explain_live_estimate(cfg, store, record, since: int | None = None) -> dict:
    """Why a live job got its duration estimate, as data (`lucidctl explain job ID`): the terms of
    the EBM version that made it (or the fallback rule), recomputed from the model file and the
    history lucidd keeps. History features count only jobs that ended before the job's submission,
    so the figure is the one lucidd used unless those rows changed since (pruned past
    `history_days`, or read from sacct later); `model_seconds` against the estimate says so.

    `since`: the oldest end time of the history to read (default: `history_days` before the
    estimate was made, as the daemon's own read then was)."""
    out = estimate_explanation()
    source = record.estimate_source or ""
    if record.estimate_s is None:
        return estimate_explanation("none", NOT_ESTIMATED)
    if source == "default":
        out.update(kind="default", reason=f"the constant [ordering] default_estimate_s "
                                          f"({cfg.ordering.default_estimate_s:g} s): no history had been read yet; "
                                          "estimated again at the next cycle")
        return out
    from models.base import ModelError
    from models.update import ModelStore

    submitted = int(record.original_submit or record.first_seen or 0)
    job = pd.DataFrame({"job_id": [str(record.job_id)], "submit_time": [submitted], "gpu_num": [int(record.gpus)],
                        "user": [record.user], "vc": [model_partition(record.target_partition)],
                        "name": [record.name]})
    if since is None:  # the estimate is made when the job first waits in its partition: its release
        since = int(record.released_at or record.first_seen or submitted) - cfg.models.history_days * 86400
    try:
        hist = history_frame(store.history(since))
    except Exception as exc:  # noqa: BLE001 - explain degrades; it never fails the command
        out.update(kind="unavailable", reason=f"the history could not be read ({exc})")
        return out
    m = _EBM_SOURCE.match(source)
    if not m:  # the rule of means (no model then, or the model's own fallback for this job)
        from models.duration import compute_features, fallback_estimates

        from .artifacts import fallback_rule

        feats = compute_features(job, hist, None).iloc[0]
        again = float(fallback_estimates(job, hist, cfg.ordering.default_estimate_s)["estimate"].iloc[0])
        why = "no EBM applied"
        try:  # the current model says why it did not apply (a user with no finished job yet, say)
            loaded = ModelStore(cfg.models.dir).load_current("duration")
            if loaded is not None:
                expl = loaded.model.explain(job, hist)
                if expl.kind == "fallback":
                    why = f"EBM v{loaded.version} does not apply: {expl.reason.split('; ')[0].split(': ', 1)[-1]}"
        except (ModelError, OSError):
            pass
        out.update(kind="fallback", model_seconds=again,
                   reason=f"{why}; estimate = {fallback_rule(feats, source, cfg.ordering.default_estimate_s)}")
        return _compare(out, record)
    version = int(m.group(1))
    try:
        model = ModelStore(cfg.models.dir).load("duration", version).model
    except (ModelError, OSError) as exc:
        out.update(kind="unavailable", model_version=version,
                   reason=f"EBM v{version} made this estimate but cannot be read now ({exc}); "
                          f"[models] dir {cfg.models.dir} keeps the newest versions only")
        return out
    expl = model.explain(job, hist)
    fitted = f"EBM v{version}"
    try:
        # the refit that made it: a later refit that kept it (rejected, skipped) logs the same version
        info = next((json.loads(v.detail or "{}") for v in store.model_versions(50)
                     if v.kind == "duration" and v.version == version and v.decision == "swapped"), None)
        if info and info.get("time") and info.get("train_rows"):
            fitted += (f", fitted {datetime.fromtimestamp(int(info['time'])).strftime('%Y-%m-%d %H:%M')} on the "
                       f"{int(info['train_rows']):,} jobs that had ended then")
    except Exception:  # noqa: BLE001 - when it was fitted is a detail: the terms are the answer
        pass
    out.update(kind=expl.kind, model_version=version, model_seconds=float(expl.prediction),
               intercept=expl.intercept, reason=(f"{fitted}: {expl.reason}" if expl.kind == "ebm" else
                                                 f"{fitted}, not applied: {expl.reason}"),
               terms=[{"term": t.term, "value": t.value, "contribution": t.contribution} for t in expl.terms])
    return _compare(out, record)


def models_summary(cfg, store, refits: int = 10) -> dict:
    """The live duration model as data (`lucidctl models`): the current version, how and on what it
    was fitted, its holdout figures, what it looks at (global term importances), and the last refits."""
    from models.base import ModelError
    from models.update import ModelStore

    out = {"models_dir": str(cfg.models.dir), "min_history_jobs": cfg.models.min_history_jobs,
           "history_jobs": None, "current": None, "problem": None, "refits": []}
    logged = []  # the duration model's refits, newest first, with their details
    try:
        out["history_jobs"] = store.history_count()
        logged = [(v, json.loads(v.detail or "{}")) for v in store.model_versions(50) if v.kind == "duration"]
        out["refits"] = [{"version": v.version, "at": v.at, "decision": v.decision,
                          "reason": str(info.get("reason", ""))} for v, info in logged[:refits]]
    except Exception as exc:  # noqa: BLE001 - the model file is the answer; its log is a detail
        out["problem"] = f"the refit log could not be read ({exc})"
    try:
        loaded = ModelStore(cfg.models.dir).load_current("duration")
    except (ModelError, OSError) as exc:
        out["problem"] = f"no usable duration model in {cfg.models.dir}: {exc}"
        return out
    if loaded is None:
        return out
    # the refit that made it: a later refit that kept it (rejected, skipped) logs the same version
    info = next((info for v, info in logged if v.version == loaded.version and v.decision == "swapped"), {})
    model = loaded.model
    try:
        terms = [{"term": k, "importance": v} for k, v in model.term_importances().items()]
    except Exception as exc:  # noqa: BLE001 - a model without EBM terms
        terms, out["problem"] = [], f"the model's terms cannot be read ({exc})"
    metrics = info.get("metrics") or {}
    out["current"] = {
        "version": loaded.version, "file": str(loaded.path), "fallback": bool(loaded.fallback),
        "fallback_reason": getattr(loaded, "message", "") or None,
        "fitted_at": info.get("time"), "trigger": info.get("trigger"), "train_rows": info.get("train_rows"),
        "holdout": metrics.get("candidate"), "features": list(getattr(model, "features_", []) or []),
        "dropped_features": list(getattr(model, "dropped_features_", []) or []), "terms": terms}
    return out


def _compare(out: dict, record) -> dict:
    """`matches_estimate`: does the figure recomputed now agree (1 %) with the one lucidd used?"""
    used = float(record.estimate_s)
    out["matches_estimate"] = bool(abs(out["model_seconds"] - used) <= 0.01 * max(1.0, used))
    if not out["matches_estimate"]:
        out["reason"] += (f"; recomputed now it gives {out['model_seconds']:,.0f} s, not the {used:,.0f} s lucidd "
                          "used: the history it was made from has changed since (rows pruned past history_days, "
                          "or read from sacct later)")
    return out


class LiveEstimator:
    """Duration estimates for live jobs: the update engine's current EBM when one exists, else the
    fallback rule (mean of finished jobs with the same GPU count, else of all, else a constant)."""

    def __init__(self, models_dir: str, default_s: float, refit_every_s: int, min_jobs: int, history_days: int):
        self.models_dir = models_dir
        self.default_s = float(default_s)
        self.refit_every_s = refit_every_s
        self.min_jobs = min_jobs
        self.history_days = history_days
        self._engine = None
        self._history = None  # DataFrame of finished jobs, refreshed by `refresh_history`
        self._lock = threading.Lock()
        self._engine_lock = threading.Lock()

    def engine(self):
        # made once, under a lock: the cycle thread and the refit thread both ask for it, and two
        # engines would each keep their own refit schedule (a review)
        with self._engine_lock:
            if self._engine is None:
                from models.update import UpdateConfig, UpdateEngine

                self._engine = UpdateEngine(self.models_dir, UpdateConfig(refit_every_s=self.refit_every_s,
                                                                          min_train_jobs=self.min_jobs))
            return self._engine

    def set_history(self, rows):
        frame = history_frame(rows)
        with self._lock:
            self._history = frame

    def estimate(self, jobs: list) -> dict:
        """job_id -> (seconds, source)."""
        if not jobs:
            return {}
        from models.duration import fallback_estimates

        frame = pd.DataFrame({"job_id": [str(j.job_id) for j in jobs],
                              "submit_time": [int(j.attrs.get("submitted", j.submit_time)) for j in jobs],
                              "gpu_num": [j.gpu_num for j in jobs], "user": [j.user for j in jobs],
                              "vc": [model_partition(j.vc) for j in jobs], "name": [j.name for j in jobs]})
        with self._lock:
            hist = self._history
        loaded = None
        try:
            # a store never written reads as no model and creates nothing (a check must not make
            # the folder; the first refit does)
            loaded = self.engine().current("duration")
        except Exception as exc:  # noqa: BLE001 - a broken model store must not stop ordering
            log.warning("duration model unavailable (%s): fallback estimates", exc)
        try:
            if loaded is not None:
                # A fallback (the current file broken, an older version loaded) still beats the
                # rule of means; its source says so.
                tag = f":v{loaded.version}" + ("(fallback)" if loaded.fallback else "")
                out = loaded.model.predict_detailed(frame, hist)
                src = [f"{s}{tag}" if str(s).startswith("ebm") else str(s) for s in out["source"]]
                est = out["estimate"].to_numpy(float)
        except Exception as exc:  # noqa: BLE001 - a model that loads but cannot predict
            log.warning("duration model v%s cannot predict (%s): fallback estimates",
                        getattr(loaded, "version", "?"), exc)
            with contextlib.suppress(Exception):
                # a refit is due within the hour, not at the next scheduled one (up to a week)
                self.engine().note_predict_failure("duration", loaded.version, exc)
            loaded = None
        try:
            if loaded is None:
                out = fallback_estimates(frame, hist, self.default_s)
                src = [str(s) for s in out["source"]]
                est = out["estimate"].to_numpy(float)
        except Exception as exc:  # noqa: BLE001
            log.warning("estimates failed (%s): %d job(s) get the default %g s", exc, len(jobs), self.default_s)
            return {j.job_id: (self.default_s, "default") for j in jobs}
        if hist is None:
            # before the first history read (the first cycle after a start) neither the model's history
            # features nor the rule of means have anything to go on: "default" is estimated again at
            # the next cycle, any other source is kept for good (an admin trial saw two identical jobs
            # 7,000 SiteFactor points apart after a restart)
            src = ["default"] * len(jobs)
        # no usable figure (a rule of means over jobs that all ended at once: 0 s): the default, said as
        # such, not under the rule's name (it was kept for good as the rule's estimate: a review)
        return {j.job_id: (float(e), s) if e == e and e > 0 else (self.default_s, "default")
                for j, e, s in zip(jobs, est, src)}

    def refit(self, now: int) -> str | None:
        with self._lock:
            hist = self._history
        if hist is None or len(hist) < self.min_jobs:
            return None, []
        engine = self.engine()
        # a drift measure that is due runs in maybe_refit too, and refits at once when it flags one:
        # gated on a due refit alone, the daemon never measured drift (a review, 2 December 2026)
        if not engine.due(now, "duration") and not engine.drift_check_due(now):
            return None, []
        results = engine.maybe_refit(hist, now)
        return "; ".join(f"{r.kind} model: {r.decision} ({r.reason})" for r in results) or None, results


def live_packing(config):
    """([packing] as binder.live.LivePackingConfig, the packing model or None), or (None, None)
    when packing is off. A model file that cannot be read is a config error: lucidd does not start
    on a packing rule the admin did not choose."""
    k = getattr(config, "packing", None)
    if k is None or not k.enabled:
        return None, None
    from binder.live import LivePackingConfig

    cfg = LivePackingConfig(gss=k.gss, gpu_memory_mib=float(k.gpu_memory_mib),
                            memory_headroom_mib=float(k.memory_headroom_mib), tiny_below_util=k.tiny_below_util,
                            jumbo_from_util=k.jumbo_from_util, min_util_samples=k.min_util_samples)
    if not k.model:
        return cfg, None
    from lucidd.errors import ConfigError
    from models.packing import PackingModel

    try:
        return cfg, PackingModel.load(k.model)
    except Exception as exc:  # noqa: BLE001 - any unreadable file: say which and why
        raise ConfigError(f"[packing] model: cannot load {k.model!r} ({exc})") from None


class LucidDecider(Decider):
    def __init__(self, config):
        self.cfg = config
        o = config.ordering
        self.policy = LucidPolicy(replace(LucidConfig(), starvation_s=o.starvation_s,
                                          aging_halflife_s=o.aging_halflife_s,
                                          starving_halflife_s=o.starving_halflife_s,
                                          starvation_node_cap=o.starvation_node_cap))
        m = config.models
        self.estimator = LiveEstimator(m.dir, o.default_estimate_s, m.refit_every_s, m.min_history_jobs,
                                       m.history_days)
        self._refit_thread = None
        self.last_background = ""
        self.packing, self.packing_model = live_packing(config)
        self._wanted_at = {}  # partition -> (when, job) a job there last waited for GPUs (GPU packing)
        self._history_fingerprint, self._history_since = None, 0  # what the estimator's history was read at

    # -- profiling ----------------------------------------------------------------------------
    def capacity(self, inp: DecisionInput, queue_len: int) -> int:
        return profiling_capacity(self.cfg.profiler, inp.profiling_gpus, queue_len)

    def _ordered(self, record) -> bool:
        """Whether the job's target partition is one lucidd orders ([slurm] managed_partitions; empty:
        every one)."""
        managed = set(self.cfg.slurm.managed_partitions)
        return record is None or not managed or any(p in managed for p in partition_names(record.target_partition))

    def skip_reason(self, j, record) -> str | None:
        return profiling_skip_reason(self.cfg.profiler, j, record)

    def decide(self, inp: DecisionInput) -> Plan:
        gate = self.cfg.profiler.skip_when_free
        plan = plan_profiling(self.cfg.profiler, self.cfg.daemon.interval_s, inp.now, inp.inbox, inp.profiling,
                              inp.records, inp.profiling_gpus, skip=self.skip_reason,
                              capacity=lambda queue_len: self.capacity(inp, queue_len),
                              queued=inp.queued if gate else None, free=inp.free_gpus if gate else None,
                              lendable=(inp.lendable_gpus, inp.lendable_node_gpus), busy_nodes=inp.busy_nodes,
                              node_wait_s=inp.node_wait_s,
                              away_s=inp.away_s, signalled=inp.signalled, over_time_s=inp.over_time_limit_s,
                              no_gpus_for_s=inp.profiling_gpus_gone_s,
                              closed_partitions=inp.closed_partitions, slurm_silent_s=inp.slurm_silent_s)
        now = inp.now
        # Main queues: Lucid's order as SiteFactor.
        if self.cfg.ordering.enabled:
            released = {jid for jid, _ in plan.release}
            waiting = [live_job(j, inp.records.get(j.job_id)) for j in inp.waiting]
            # (released to a partition lucidd does not order: no SiteFactor, which would never be
            # updated there; a review)
            waiting += [live_job(j, inp.records.get(j.job_id)) for j in inp.inbox + inp.profiling
                        if j.job_id in released and self._ordered(inp.records.get(j.job_id))]
            self._order(waiting, now, plan, inp.node_gpus)
        if self.packing is not None:
            self._pack(inp, plan)
        else:
            # packing switched off with jobs still lowered: they wait for a GPU of their own again
            for j in inp.waiting:
                if j.packable and j.pending and j.shards == 1:
                    plan.shards[j.job_id] = (2, "a GPU of its own: GPU packing is off ([packing] enabled = false)")
        return plan

    def _pack(self, inp: DecisionInput, plan: Plan) -> None:
        """GPU packing: the shard count of each waiting job of shards (binder/live.py). A partition
        counts as waiting for GPUs until `hold` after a job there last did: Slurm gives a pending
        job's reason anew at its next scheduling pass, so a job whose own Resources was the only
        one would otherwise be lowered and raised again at alternate cycles."""
        from binder.live import partitions_wanting_gpus, shard_decision, with_gpu_memory

        hold = grace_s(self.cfg.daemon.interval_s)
        for part, jid in partitions_wanting_gpus(inp.waiting).items():
            self._wanted_at[part] = (inp.now, jid)
        for part in [p for p, (t, _) in self._wanted_at.items() if inp.now - t > hold]:
            del self._wanted_at[part]
        wanting = {p: jid for p, (t, jid) in self._wanted_at.items()}
        for j in inp.waiting:
            if j.packable and j.pending:
                # a job requeued after profiling is judged for the partition it is released to
                r = inp.records.get(j.job_id)
                part = r.target_partition if r is not None and r.target_partition else j.partition
                est, src = plan.estimates.get(j.job_id, (r.estimate_s, r.estimate_source) if r is not None
                                              else (None, None))
                plan.shards[j.job_id] = shard_decision(j, part, inp.gpu_profiles.get(j.job_id), wanting,
                                                       with_gpu_memory(self.packing, part, inp.gpu_memory),
                                                       self.packing_model, estimate_s=est, estimate_source=src)

    def _order(self, jobs, now, plan, node_gpus):
        need = [j for j in jobs if j.estimate is None]
        fresh = self.estimator.estimate(need)
        for j in need:
            est, src = fresh[j.job_id]
            j.estimate = est
            plan.estimates[j.job_id] = (est, src)  # the model's own figure; the cap is applied at use
        ppd = self.cfg.ordering.points_per_doubling
        scored = []
        capped = set()
        for j in jobs:
            # capped at use, not when stored: a user may lower the limit of a pending job later
            bounded = within_limit(j.estimate, j.time_limit)
            if bounded != j.estimate:
                j.estimate = bounded
                capped.add(j.job_id)
            value, starving = site_factor(self.policy, j, now, ppd, partition_node_gpus(node_gpus, j.vc))
            scored.append((value, starving, j))
        scored.sort(key=lambda t: (-t[0], t[2].seq))
        by_part = {}
        for value, starving, j in scored:
            rank, rank_part = next_rank(by_part, j.vc)
            if starving:  # the job's own threshold, worked out only for the jobs it concerns
                hs = self.policy.config.starving_halflife_s
                k = starvation_divisor(self.policy.config, j, partition_node_gpus(node_gpus, j.vc))
                wide = f" (starvation_s / {k}: a job of several nodes)" if k > 1 else ""
                why = ("starvation guard: waited "
                       f"{(now - j.attrs['submitted']) / 3600:.1f} h > "
                       f"{self.policy.config.starvation_s // k / 3600:g} h{wide}"
                       + (f", ordered among starving jobs by submission + {hs / 3600:g} h per doubling of "
                          f"estimate x GPUs" if hs else ", oldest first"))
            else:
                why = self.policy.priority_text(j, now)
            est = (f"estimate {j.estimate:,.0f} s, capped at the job's time limit" if j.job_id in capped
                   else f"estimate {j.estimate:,.0f} s")
            plan.site_factors[j.job_id] = (value, rank, f"rank {rank} in {rank_part}: {why} ({est}); SiteFactor {value}")

    # -- record / replay ----------------------------------------------------------------------------
    def record(self, inp: DecisionInput, plan: Plan) -> dict:
        def jd(j):
            r = inp.records.get(j.job_id)
            return {"job_id": j.job_id, "gpus": j.gpus, "nodes": j.nodes, "node_names": list(j.node_names),
                    "user": j.user, "account": j.account,
                    "name": j.name, "partition": j.partition, "state": j.state, "start_time": j.start_time,
                    "requeue": j.requeue, "comment": j.comment, "array_pending": j.array_pending,
                    "array_job_id": getattr(j, "array_job_id", 0),
                    "restart_count": j.restart_count,
                    "original_submit": None if r is None else r.original_submit,
                    "target_partition": None if r is None else r.target_partition,
                    "first_seen": None if r is None else r.first_seen,
                    "profile_start": None if r is None else r.profile_start,
                    "estimate_s": plan.estimates.get(j.job_id, (None if r is None else r.estimate_s,))[0],
                    "time_limit_s": j.time_limit_s,
                    "profile": None if r is None else r.profile,
                    "lent": bool(r is not None and r.lent),
                    # what plan_profiling withdraws an admitted job for (held, a dependency, a begin
                    # time, a reason other than GPUs): without them a replay kept such a job's room
                    "reason": j.reason, "priority": j.priority, "dependency": j.dependency}
        # Waiting jobs whose SiteFactor is unchanged are left out: a value is a pure function of
        # the job's own data, so the decided ones replay alone (and a 10,000-job queue does not
        # write 3 MB per cycle).
        released = {jid for jid, _ in plan.release}
        decided = [j for j in inp.waiting if j.job_id in plan.site_factors and (
            inp.records.get(j.job_id) is None
            or inp.records[j.job_id].site_factor != plan.site_factors[j.job_id][0])]
        return {"now": inp.now, "away_s": inp.away_s, "slurm_silent_s": inp.slurm_silent_s,
                "profiling_gpus": inp.profiling_gpus,
                "queued": dict(inp.queued),
                "free_gpus": dict(inp.free_gpus),
                "lendable": [inp.lendable_gpus, inp.lendable_node_gpus], "busy_nodes": sorted(inp.busy_nodes),
                "node_wait_s": dict(inp.node_wait_s) if inp.node_wait_s is not None else None,
                "node_gpus": dict(inp.node_gpus), "over_time_limit_s": inp.over_time_limit_s,
                "profiling_gpus_gone_s": inp.profiling_gpus_gone_s,
                "config": {"tprof_s": self.cfg.profiler.tprof_s, "nprof_gpus": self.cfg.profiler.nprof_gpus,
                           "skip_when_free": self.cfg.profiler.skip_when_free,
                           "capacity_gpus": self.cfg.profiler.capacity_gpus,
                           "burst_capacity_gpus": self.cfg.profiler.burst_capacity_gpus,
                           "burst_queue": self.cfg.profiler.burst_queue,
                           "max_job_share": self.cfg.profiler.max_job_share,
                           "lend_idle_gpus": self.cfg.profiler.lend_idle_gpus,
                           "reclaim_lent": self.cfg.profiler.reclaim_lent,
                           "keep_lent_while_idle": self.cfg.profiler.keep_lent_while_idle,
                           "long_tprof_s": self.cfg.profiler.long_tprof_s,
                           "long_share": self.cfg.profiler.long_share,
                           "room_wait_s": self.cfg.profiler.room_wait_s,
                           "starvation_s": self.policy.config.starvation_s,
                           "aging_halflife_s": self.policy.config.aging_halflife_s,
                           "starving_halflife_s": self.policy.config.starving_halflife_s,
                           "starvation_node_cap": self.policy.config.starvation_node_cap,
                           "points_per_doubling": self.cfg.ordering.points_per_doubling},
                "inbox": [jd(j) for j in inp.inbox], "profiling": [jd(j) for j in inp.profiling],
                "waiting": [jd(j) for j in decided],
                "decisions": {"shards": {str(j.job_id): plan.shards[j.job_id][0] for j in inp.waiting
                                         if j.job_id in plan.shards and j.shards != plan.shards[j.job_id][0]},
                              "profile": [a for a, _ in plan.profile], "lend": list(plan.lend),
                              "release": [a for a, _ in plan.release],
                              "requeue": [a for a, _ in plan.requeue],
                              "site_factors": {str(j.job_id): plan.site_factors[j.job_id][0] for j in decided}
                              | {str(k): v[0] for k, v in plan.site_factors.items() if k in released}}}

    def explain_estimate(self, store, record) -> dict:
        return explain_live_estimate(self.cfg, store, record)

    def describe_models(self, store) -> dict:
        return models_summary(self.cfg, store)

    def explain_packing(self, store, record) -> dict:
        """The packing test of binder/live.py on the job's profiling-run figures: what lucidd weighs
        at each cycle the job waits (whether its partition waits for GPUs is said by its actions)."""
        from binder.live import SCORE_NAMES, limit_blocker, packing_test, with_gpu_memory

        if self.packing is None:
            return packing_explanation(False, blocker="GPU packing is off ([packing] enabled = false)")
        profile = store.profiling_gpu_profiles([record.job_id], self.cfg.slurm.profiling_partition,
                                               since={record.job_id: record.first_seen},
                                               now=time.time()).get(record.job_id)
        cfg = self.packing
        if cfg.gpu_memory_mib <= 0:  # the smallest GPU of the partitions' nodes as lucidd last saw them
            nodes = json.loads(store.get_meta(PARTITION_GPU_NODES_KEY) or "{}")
            cfg = with_gpu_memory(cfg, record.target_partition or "", partition_gpu_memory(nodes, store.gpu_nodes()))
        score, how, blocker = packing_test(profile, cfg, self.packing_model)
        if blocker is None:  # the time limit as Slurm last showed it, and the estimate the cycle made
            blocker = limit_blocker(record.estimate_s, record.time_limit_s, cfg, record.estimate_source)
        if blocker is None and record.gpus != 1:
            blocker = f"asks for {record.gpus} GPUs: only 1-GPU jobs that job_submit.lua turned into shards share"
        return packing_explanation(True, may_share=blocker is None, score=score,
                                   **{"class": SCORE_NAMES.get(score)}, how=how, blocker=blocker or "",
                                   gpu_memory_mib=cfg.gpu_memory_mib or None)

    # -- background --------------------------------------------------------------------------------
    def background(self, store, now: int) -> str | None:
        """Refresh the history the estimates use, and refit in a thread when the engine says so."""
        # Read again only when the table changed (sacct reads: every history_interval_s at most) or
        # an hour of the window has slid by: 200,000 rows took ~3 s to read, at every cycle before
        # (bench/bench_history.py).
        since = now - self.cfg.models.history_days * 86400
        fingerprint = store.history_fingerprint()
        if fingerprint != self._history_fingerprint or since - self._history_since >= 3600:
            self.estimator.set_history(store.history(since))
            self._history_fingerprint, self._history_since = fingerprint, since
        if self._refit_thread is not None and self._refit_thread.is_alive():
            return None

        def work():
            try:
                msg, results = self.estimator.refit(now)
                for r in results:
                    d = r.to_dict()
                    store.add_model_version(r.kind, d.get("new_version") or d.get("version") or 0, now,
                                            str(d.get("decision", "")), d)
            except Exception as exc:  # noqa: BLE001 - a failed refit keeps the current model
                msg = f"model refit failed: {exc}; the current model stays"
            if msg:
                self.last_background = msg
                log.info("%s", msg)

        self._refit_thread = threading.Thread(target=work, name="lucidd-refit", daemon=True)
        self._refit_thread.start()
        return None


def replay_recorded(recorded: dict) -> dict:
    """Feed one recorded live cycle to the simulator's objects: the profiler's LGF order and the
    Lucid policy's key. Returns the same shape as the recorded decisions (profile order and
    SiteFactors), so a test can compare them."""
    c = recorded["config"]
    policy = LucidPolicy(replace(LucidConfig(), starvation_s=c["starvation_s"], aging_halflife_s=c["aging_halflife_s"],
                                 starving_halflife_s=c.get("starving_halflife_s", 0),
                                 starvation_node_cap=c.get("starvation_node_cap", 1)))
    node_gpus = recorded.get("node_gpus", {})
    now = recorded["now"]

    def job(d):
        submitted = d["original_submit"]
        j = Job(d["job_id"], d["target_partition"], d["gpus"], submitted, 0, d["job_id"], user=d["user"],
                name=d["name"], time_limit=d.get("time_limit_s"))
        j.attrs["submitted"] = submitted
        j.estimate = within_limit(d["estimate_s"], j.time_limit)
        return j

    factors = {}
    released = set(recorded["decisions"]["release"])
    for d in recorded["waiting"] + [d for d in recorded["inbox"] + recorded["profiling"] if d["job_id"] in released]:
        factors[str(d["job_id"])] = site_factor(policy, job(d), now, c["points_per_doubling"],
                                                partition_node_gpus(node_gpus, d["target_partition"] or d["partition"]))[0]
    profiled = set(recorded["decisions"]["profile"])
    order = sorted((job(d) for d in recorded["inbox"] if d["job_id"] in profiled), key=LeastGPUFirst.pending_key)
    return {"profile": [j.job_id for j in order], "site_factors": factors}
