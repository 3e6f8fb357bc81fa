"""Slurm settings under which lucidd's order cannot work as intended, found at lucidd's start.

lucidd only writes SiteFactor; Slurm's own scheduler starts the jobs. Two settings of slurm.conf
decide whether that order is followed:

* `PriorityType`: only `priority/multifactor` adds SiteFactor to a job's priority. Under
  `priority/basic` (Slurm's default) jobs are prioritised in submission order and lucidd's order
  is ignored.
* `bf_window` (SchedulerParameters, minutes, default 1440) with `sched/backfill`: backfill makes no
  reservation for a job whose earliest start lies further ahead. Lower-priority jobs are then
  started in front of it as long as they fit now, however long they run. A job that starves,
  including one lucidd's starvation guard has moved to the front, can wait for weeks (a Venus
  replay: an 8-GPU job for 11 days behind 1-GPU jobs of 72 h limits; docs/lucid.md). Slurm's
  documentation advises a bf_window at least as long as the highest time limit. That is a trade,
  not a free gain (the reservations hold GPUs idle), so the warning points at the replay that
  weighs it on the site's own jobs.

A pure function of what `scontrol show config` and `scontrol show partition` print; a setting it
cannot read is not checked (no warning on a guess).
"""

from __future__ import annotations

import re

from ..backends.slurm import slurm_minutes_s

DEFAULT_BF_WINDOW_MIN = 1440  # Slurm 22.05's default bf_window
MAX_BF_WINDOW_MIN = 43200  # Slurm's own bound: outside 1..30 days it uses the default (and logs an error)
_NO_LIMIT = ("UNLIMITED", "INFINITE")


def bf_window_s(scheduler_parameters: str) -> int | None:
    """The bf_window Slurm runs with, in seconds: SchedulerParameters' value (its name in any case,
    as Slurm matches it), Slurm's default when it is not set or out of Slurm's range; None when the
    value is not a whole number of minutes."""
    m = re.search(r"(?:^|,)\s*bf_window=([^,]*)", scheduler_parameters or "", re.IGNORECASE)
    if m is None:
        return DEFAULT_BF_WINDOW_MIN * 60
    text = m.group(1).strip()
    if not (text.isascii() and text.isdigit()):
        return None
    minutes = int(text)
    return (minutes if 1 <= minutes <= MAX_BF_WINDOW_MIN else DEFAULT_BF_WINDOW_MIN) * 60


def _duration_text(seconds: int) -> str:
    days, rest = divmod(int(seconds), 86400)
    d = f"{days} day{'s' if days > 1 else ''}"
    return f"{d} {rest / 3600:g} h" if days and rest else d if days else f"{seconds / 3600:g} h"


def priority_type_warning(priority: str, ordering_enabled: bool) -> str | None:
    """The warning for a PriorityType under which Slurm ignores SiteFactor (None: none, or not read).
    Its text starts with "PriorityType=": how a stored warning is found again."""
    if ordering_enabled and priority and priority != "priority/multifactor":
        return (f"PriorityType={priority}: Slurm ignores SiteFactor, so lucidd's order has no effect; set "
                "PriorityType=priority/multifactor (docs/deploy.md, slurm.conf) or [ordering] enabled = false")
    return None


#: The sum of Slurm's other priority weights, in doublings of estimate x GPUs, above which they
#: decide most of the order among jobs lucidd ranks (10: jobs 1,000x apart in estimate x GPUs)
OTHER_WEIGHTS_DOUBLINGS = 10
_WEIGHT_KEYS = ("PriorityWeightAge", "PriorityWeightAssoc", "PriorityWeightFairShare", "PriorityWeightJobSize",
                "PriorityWeightPartition", "PriorityWeightQOS")


def other_priority_weight(config: dict) -> int:
    """The most Slurm's other multifactor factors can add to a job's priority: the sum of the
    PriorityWeight* values (each factor is between 0 and 1 times its weight), PriorityWeightTRES's
    list (`CPU=1000,Mem=2000,GRES/gpu=3000`) included."""
    total = 0
    for key in _WEIGHT_KEYS:
        m = re.match(r"^\s*(\d+)", config.get(key, "") or "")
        total += int(m.group(1)) if m else 0
    for m in re.finditer(r"=\s*(\d+(?:\.\d+)?)", config.get("PriorityWeightTRES", "") or ""):
        total += int(float(m.group(1)))
    return total


def slurm_settings_warnings(config: dict, max_times: dict, ordered: set, ordering_enabled: bool,
                            interval_s: float | None = None, points_per_doubling: int | None = None) -> list[str]:
    """Warnings, one line each, for the settings above.

    config: {name: value} of `scontrol show config` ({} when unknown: nothing checked);
    max_times: {partition: MaxTime text}; ordered: the partitions whose jobs lucidd orders (the
    bf_window check is about them: the profiling partition's MaxTime is INFINITE by design);
    interval_s: lucidd's cycle ([daemon] interval_s; None: MinJobAge not checked);
    points_per_doubling: [ordering]'s (None: the other priority weights not checked)."""
    out = []
    if not config:
        return out
    priority = priority_type_warning(config.get("PriorityType", ""), ordering_enabled)
    if priority:
        out.append(priority)
    # Slurm's other factors add to SiteFactor: weights far above lucidd's points per doubling hand the
    # order to age, fair-share or QOS (PriorityWeightAge=100000000 drowned it on a test cluster, with
    # nothing said: a review). Starving jobs (2e9) stay first whatever the weights below 1e9.
    weight = other_priority_weight(config) if ordering_enabled and points_per_doubling else 0
    if weight > OTHER_WEIGHTS_DOUBLINGS * points_per_doubling if weight else False:
        out.append(f"PriorityWeight* add up to {weight:,} points, {weight / points_per_doubling:,.0f} doublings of "
                   f"estimate x GPUs at [ordering] points_per_doubling = {points_per_doubling:,}: Slurm's age, "
                   "fair-share, QOS and other factors, not lucidd, decide the order of most jobs (starving jobs "
                   "still come first). If Lucid's order should dominate, keep their sum below about "
                   f"{points_per_doubling:,} or raise points_per_doubling (docs/deploy.md, slurm.conf)")
    # with ordering off lucidd orders nothing and has no starvation guard: the window is Slurm's affair
    if ordering_enabled and config.get("SchedulerType", "") == "sched/backfill":
        window = bf_window_s(config.get("SchedulerParameters", ""))
        if window is not None:
            longer = []
            for name in sorted(ordered):
                text = (max_times.get(name) or "").strip()
                limit = None if text.upper() in _NO_LIMIT else slurm_minutes_s(text)
                if text.upper() in _NO_LIMIT or (limit is not None and limit > window):
                    longer.append(f"{name} ({'MaxTime UNLIMITED' if limit is None else 'MaxTime ' + text})")
            if longer:
                out.append(f"bf_window is {_duration_text(window)}, shorter than the time limits jobs may ask for in "
                           f"{', '.join(longer)}: backfill plans no start for a job that cannot start within "
                           "bf_window, so lower-priority jobs that fit now keep starting ahead of it, even ahead of "
                           "a job lucidd's starvation guard put first. Slurm advises SchedulerParameters=bf_window "
                           "at least the highest MaxTime (and a MaxTime where there is none); a longer window also "
                           "holds GPUs idle for its reservations: replay both on your jobs first, `lucidctl "
                           "simulate --bf-window MINUTES` (docs/deploy.md, slurm.conf)")
    # what a profiling run's restart needs of slurm.conf (a review on a test cluster, 2 December 2026)
    append = config.get("JobFileAppend", "").strip()
    if append and append != "1":
        out.append(f"JobFileAppend={append}: a profiled job's restart in its partition truncates its output file, "
                   "so the profiling run's output is lost; set JobFileAppend=1 (docs/deploy.md, slurm.conf)")
    # a job that ends is kept in slurmctld's memory (squeue) MinJobAge seconds: one gone before
    # lucidd's cycles saw it end is closed as GONE, without its end (MinJobAge=2: 7 of 7 short jobs,
    # their profiling runs included; a review on a test cluster, 3 December 2026)
    age = re.match(r"^\s*(\d+)", config.get("MinJobAge", ""))
    if interval_s and age and int(age.group(1)) < 3 * interval_s:
        out.append(f"MinJobAge={age.group(1)} s, under 3 x lucidd's interval_s ({interval_s:g} s): a job that ends "
                   "leaves squeue before lucidd sees how, and is recorded as GONE until lucidd's next read of "
                   "accounting (sacct) gives its end, and for good without slurmdbd; set MinJobAge to "
                   f"{int(3 * interval_s)} s or more (Slurm's default is 300)")
    prolog = config.get("Prolog", "").strip()
    flags = config.get("PrologFlags", "").lower()
    if prolog and prolog != "(null)" and "alloc" not in flags and "contain" not in flags:
        out.append(f"Prolog={prolog} without PrologFlags=Alloc: Slurm says a job is RUNNING while its Prolog runs, "
                   "so lucidd cannot wait for it; a profiling run requeued during its Prolog was restarted in its "
                   "partition without the Prolog. Set PrologFlags=Alloc (lucidd then requeues no run in its "
                   "Prolog), or keep the Prolog well under Tprof (docs/deploy.md, slurm.conf)")
    return out


PARTITION_PRIO = "preempt/partition_prio"
PREEMPT_WARNING_PREFIX = "PreemptType=preempt/partition_prio:"  # how the stored warning is found again


def preempted_by_profiling(preempt_type: str | None, partitions: dict, profiling: str) -> list:
    """The partitions whose running jobs Slurm would preempt to start a job in `profiling`, sorted.

    Under `PreemptType=preempt/partition_prio` a job of a higher PriorityTier partition preempts
    jobs of lower tiers on the nodes it needs, by each one's PreemptMode (REQUEUE, CANCEL, SUSPEND;
    not OFF). The profiling partition sits above the others (PriorityTier=2, docs/deploy.md) so that
    its runs start first: on such a site one admitted 1-GPU run found its GPUs taken and Slurm
    requeued an 8-GPU job of `main` to start it (seen on Slurm 22.05; under CANCEL the job is
    gone). A partition counts when it shares a node with `profiling` (or either's nodes are not
    known), has a lower PriorityTier and a PreemptMode other than OFF. Pure: `partitions` is
    {name: backends.base.Partition} as a cycle reads them; a tier or mode not read is not judged
    (no finding on a guess), nor is any other PreemptType (preempt/qos goes by the job's QOS, which
    lucidd's moves do not change)."""
    if (preempt_type or "").strip() != PARTITION_PRIO:
        return []
    prof = partitions.get(profiling)
    if prof is None or prof.priority_tier is None:
        return []
    out = []
    for name, p in partitions.items():
        if name == profiling or p.priority_tier is None or p.priority_tier >= prof.priority_tier:
            continue
        mode = (p.preempt_mode or "").strip().upper()
        if not mode or mode == "OFF":
            continue
        if p.nodes and prof.nodes and not set(p.nodes) & set(prof.nodes):
            continue
        out.append(name)
    return sorted(out)


def preemption_warning(preempted: list, partitions: dict, profiling: str) -> str:
    """The one line that says so, in the log and in `lucidctl status` (slurm_warnings)."""
    prof = partitions[profiling]
    each = ", ".join(f"{n} (PriorityTier {partitions[n].priority_tier}, PreemptMode {partitions[n].preempt_mode})"
                     for n in preempted)
    return (f"{PREEMPT_WARNING_PREFIX} a job started in {profiling} (PriorityTier {prof.priority_tier}) would preempt "
            f"running jobs of {each}: lucidd profiles no job while this holds (new jobs go straight to their "
            f"partitions, jobs admitted to {profiling} and not started go back there). Give those partitions "
            f"PreemptMode=OFF in slurm.conf (docs/deploy.md, slurm.conf)")


# Partition settings Slurm applies at submission, against the partition the job is submitted to
# (the inbox, under job_submit.lua), and that do not hold in the inbox or in profiling: per-node
# limits, a partition QOS, and the defaults a job without --mem or --cpus-per-gpu gets (a review on a
# test cluster, 2 December 2026: four 1-GPU profiling runs ran at once where main's QOS allowed 2
# GPUs; a job kept the inbox's 1 CPU and DefMemPerCPU where main gives DefCpuPerGPU=4 and
# DefMemPerGPU). Access lists (AllowAccounts, DenyQos, ...) are not among them: lucidd sends a job
# they keep out to its partition unprofiled (Partition.refuses), where Slurm keeps it pending.
_AT_SUBMISSION = ("QoS", "MaxCPUsPerNode", "MaxMemPerNode",
                  "MaxMemPerCPU", "DefMemPerNode", "DefMemPerCPU", "JobDefaults")


def partition_limit_warnings(settings: dict, ordered: set, inbox: str) -> list:
    """One warning per partition lucidd orders whose settings of _AT_SUBMISSION differ from the
    inbox's. `settings`: {partition: {setting: text}} of `scontrol show partition` ({}: not checked)."""
    box = settings.get(inbox)
    if not box:
        return []
    out = []
    for name in sorted(ordered):
        mine = settings.get(name)
        if not mine or name == inbox:
            continue
        differ = [f"{k}={mine.get(k, '(not set)')} (the inbox: {box.get(k, 'not set')})"
                  for k in _AT_SUBMISSION if mine.get(k) != box.get(k)]
        if differ:
            out.append(f"partition {name}: {', '.join(differ)}. Slurm applies these at submission, to the "
                       f"inbox ({inbox}): they do not hold for a job there or in profiling, and a job without "
                       f"--mem or --cpus-per-gpu keeps the inbox's defaults in {name} (docs/deploy.md, \"Limits the "
                       f"inbox cannot carry\")")
    return out


def over_time_limit_s(text: str | None) -> int | None:
    """OverTimeLimit as `scontrol show config` prints it ("0 min", "5 min", "UNLIMITED") -> seconds,
    None for UNLIMITED; 0 (Slurm's default) when not said or not read."""
    t = (text or "").strip().upper()
    if t.startswith(("UNLIMITED", "INFINITE")) or t == "65535 MIN":
        return None
    m = re.match(r"^(\d+)", t)
    return int(m.group(1)) * 60 if m else 0
