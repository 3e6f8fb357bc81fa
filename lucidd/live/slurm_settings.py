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


def slurm_settings_warnings(config: dict, max_times: dict, ordered: set, ordering_enabled: bool) -> list[str]:
    """Warnings, one line each, for the settings above.

    config: {name: value} of `scontrol show config` ({} when unknown: nothing checked);
    max_times: {partition: MaxTime text}; ordered: the partitions whose jobs lucidd orders (the
    bf_window check is about them: the profiling partition's MaxTime is INFINITE by design)."""
    out = []
    if not config:
        return out
    priority = config.get("PriorityType", "")
    if ordering_enabled and priority and priority != "priority/multifactor":
        out.append(f"PriorityType={priority}: Slurm ignores SiteFactor, so lucidd's order has no effect; set "
                   "PriorityType=priority/multifactor (docs/deploy.md, slurm.conf) or [ordering] enabled = false")
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
    return out
