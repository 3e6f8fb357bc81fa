"""Slurm's own scheduler as a baseline: multifactor priority by age with `sched/backfill`.

What most Slurm sites run today, and what lucidd replaces (docs/simulator.md, "The slurm
baseline"). Modelled on Slurm 22.05's semantics:

* Priority is age: earliest submit first, ties by submission order (`seq`), i.e. FIFO inside a
  partition (a VC). The priority is pluggable (`priority=`): Lucid as lucidd runs it
  (orchestrator/slurm_mode.py) uses the same engine with lucidd's SiteFactor, higher first.
* The main scheduler starts jobs in priority order until the first one that does not fit.
* Backfill then walks the queue in priority order (at most `bf_max_job_test` jobs, counted from
  that first blocked job). A job that cannot start now gets a reservation at its earliest start,
  computed from the *time limits* of running jobs and the reservations of the higher-priority jobs
  already examined (never from true durations, which Slurm does not know). A later job starts now
  only if it fits for its whole time limit without touching any of those reservations. A
  reservation starting more than `bf_window_s` from now is not made (not protected).
* Backfill runs at every event (Slurm with a small `bf_interval`). No preemption. Placement is the
  simulator's consolidated placement (`lucidd.cluster.place_consolidated`), applied to the GPUs a
  node keeps free over the whole window the job would hold them.

A job's time limit is its own when the trace has one (the `time_limit` column, as `lucidctl
import-sacct` writes it from a site's sacct; planned as the duration it ran when the job ran
past it). The public traces carry none, so a user's limit is modelled from the job's duration by
a `LimitRule` (default: round up to the next of 1, 2, 4, 8, 12, 24, 48, 72, 168 h; longer jobs
to a whole number of 168 h). Every rule gives limit >= duration, so no job is killed at its
limit (`LimitRule.limit` asserts it); that is generous to Slurm: a win over it is real.

The policy is pure: it reads the view (time as data, pending and running jobs, free GPUs) and
returns `Start` decisions; it never reads a clock and never calls Slurm.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from ..cluster import place_consolidated
from ..errors import ConfigError
from .base import Policy, SchedulingView, Start

DEFAULT_LIMIT_STEPS_H = (1, 2, 4, 8, 12, 24, 48, 72, 168)
DEFAULT_LIMIT_RULE_TEXT = ",".join(str(h) for h in DEFAULT_LIMIT_STEPS_H)

_RULE_HELP = ("expected 'exact' (limit = duration), 'xF' with F >= 1 (limit = F x duration, e.g. x2), "
              "or increasing hours like " + DEFAULT_LIMIT_RULE_TEXT)


@dataclass(frozen=True)
class LimitRule:
    """How a job's Slurm time limit is modelled from its duration (seconds in, seconds out).

    kind 'steps': the smallest step >= duration; past the last step, the next whole multiple of
    it. kind 'exact': the duration. kind 'factor': ceil(factor x duration). Always >= 1 s.
    """

    kind: str = "steps"
    steps_s: tuple = tuple(h * 3600 for h in DEFAULT_LIMIT_STEPS_H)
    factor: float = 1.0
    text: str = DEFAULT_LIMIT_RULE_TEXT

    def limit(self, duration) -> int:
        d = max(int(math.ceil(duration)), 0)
        if self.kind == "steps":
            steps = self.steps_s
            i = bisect.bisect_left(steps, d)
            lim = steps[i] if i < len(steps) else -(-d // steps[-1]) * steps[-1]
        elif self.kind == "factor":
            lim = int(math.ceil(self.factor * d - 1e-9))
        else:
            lim = d
        lim = max(lim, 1)
        # No job outlives its limit, so the replay never has to model Slurm killing one.
        assert lim >= d, f"limit rule {self.text!r} gives {lim} s for a {d} s job"
        return lim

    @property
    def min_limit(self) -> int:
        """The smallest limit the rule can give (any job's limit is at least this)."""
        return self.steps_s[0] if self.kind == "steps" else 1

    def describe(self) -> str:
        return self.text


MAX_LIMIT_FACTOR = 1000.0  # x1e308 overflowed the limit's int (a fuzzing session)
MAX_LIMIT_STEP_H = 10 * 365 * 24  # ten years, in hours


def parse_limit_rule(text) -> LimitRule:
    """`exact`, `xF` (F >= 1) or comma-separated increasing hours; ConfigError naming the flag."""
    if isinstance(text, LimitRule):
        return text
    if text is None:
        return LimitRule()
    s = str(text).strip().lower().replace(" ", "")
    shown = str(text) if s else repr(text)
    if s == "exact":
        return LimitRule(kind="exact", steps_s=(), text="exact")
    if s.startswith("x"):
        try:
            f = float(s[1:])
        except ValueError:
            f = float("nan")
        if not math.isfinite(f) or f < 1 or f > MAX_LIMIT_FACTOR:
            raise ConfigError(f"--limit-rule {shown}: a factor must be a number from 1 to {MAX_LIMIT_FACTOR:g} (a "
                              f"limit below the duration would kill jobs); {_RULE_HELP}")
        return LimitRule(kind="factor", steps_s=(), factor=f, text=f"x{f:g}")
    try:
        hours = [float(p) for p in s.split(",")]
    except ValueError:
        raise ConfigError(f"--limit-rule {shown}: {_RULE_HELP}") from None
    if not hours or not all(math.isfinite(h) and 0 < h <= MAX_LIMIT_STEP_H for h in hours):
        raise ConfigError(f"--limit-rule {shown}: steps must be positive hours, at most {MAX_LIMIT_STEP_H:g}; "
                          f"{_RULE_HELP}")
    steps = tuple(int(round(h * 3600)) for h in hours)
    if any(b <= a for a, b in zip(steps, steps[1:])) or steps[0] < 1:
        raise ConfigError(f"--limit-rule {shown}: steps must be strictly increasing whole seconds; {_RULE_HELP}")
    return LimitRule(kind="steps", steps_s=steps, text=",".join(f"{h:g}" for h in hours))


@dataclass(frozen=True)
class SlurmConfig:
    """The slurm.conf knobs the baseline models (SchedulerParameters names, seconds not minutes)."""

    bf_max_job_test: int = 500  # backfill examines at most this many jobs per pass (Slurm default)
    bf_window_s: int = 86400  # reservations starting later than this are not made (Slurm: bf_window=1440 min)
    limit_rule: LimitRule = field(default_factory=LimitRule)
    # the smallest time limit a job of the trace brings itself (its time_limit column); None: no
    # job brings one. Backfill stops looking once a 1-GPU job of the smallest limit cannot start.
    min_time_limit_s: int | None = None

    @property
    def min_limit(self) -> int:
        """The smallest limit any job can have: the rule's, or a job's own when smaller."""
        rule = self.limit_rule.min_limit
        return rule if self.min_time_limit_s is None else max(1, min(rule, int(self.min_time_limit_s)))

    def __post_init__(self):
        if self.bf_max_job_test < 1:
            raise ConfigError(f"bf_max_job_test must be at least 1, got {self.bf_max_job_test}")
        if self.bf_window_s < 0:
            raise ConfigError(f"bf_window_s must not be negative, got {self.bf_window_s}")


def _steps(now: int, releases) -> tuple[list, dict]:
    """A profile's step times (now, then each distinct release time) and each release time's step."""
    ends = sorted({t for t, _ in releases})
    return [now, *ends], {t: i for i, t in enumerate(ends, 1)}


def _new_step(times: list, t: int) -> tuple[int, bool]:
    """(the step that starts at `t`, whether it is new): `t` is inserted into `times` if missing."""
    i = bisect.bisect_left(times, t)
    if i < len(times) and times[i] == t:
        return i, False
    times.insert(i, t)
    return i, True


class _Profile:
    """Future free GPUs per node as a step function of time, from time limits.

    `cols[node][i]` is the node's free GPU count from `times[i]` until `times[i + 1]`; the last
    step lasts forever and step 0 starts now. Running jobs give their GPUs back at start + limit;
    reservations take GPUs over [start, start + limit). Plain lists: a profile holds a few dozen
    steps on a few nodes, where Python beats numpy's per-call cost.
    """

    __slots__ = ("times", "cols", "gpn")

    def __init__(self, now: int, free_now, releases, gpn: int):
        """`releases`: (time > now, ((node, n_gpus), ...)) of every running job."""
        self.gpn = gpn
        self.times, row = _steps(now, releases)
        delta = [[f] + [0] * (len(self.times) - 1) for f in free_now]
        for t, layout in releases:
            r = row[t]
            for node, n in layout:
                delta[node][r] += n
        self.cols = [list(accumulate(d)) for d in delta]

    def _split(self, t: int) -> int:
        """Make `t` a step boundary; return its step."""
        i, new = _new_step(self.times, t)
        if not new:
            return i
        for col in self.cols:
            col.insert(i, col[i - 1])
        return i

    def take(self, start: int, end: int, layout) -> None:
        i = self._split(start)
        j = self._split(end)
        cols = self.cols
        for node, n in layout:
            col = cols[node]
            for r in range(i, j):
                col[r] -= n

    def _window_min(self, i: int, end_time: int) -> list:
        j = bisect.bisect_left(self.times, end_time)
        return [min(col[i:j]) for col in self.cols]

    def place_now(self, gpu_num: int, limit: int):
        """Layout for a job starting now and holding its GPUs for `limit` seconds, or None."""
        return place_consolidated(self._window_min(0, self.times[0] + limit), gpu_num, self.gpn)

    def earliest(self, gpu_num: int, limit: int, horizon: int):
        """(start, layout) of the earliest start <= horizon that fits for `limit` seconds, or None."""
        times, gpn = self.times, self.gpn
        k = len(times)
        if gpu_num <= gpn:
            # per node, the first run of steps with >= gpu_num free lasting `limit`; then the
            # consolidated (best-fit) choice among the nodes that can start at the earliest one
            best = None
            for col in self.cols:
                run = -1
                for r in range(k):
                    if col[r] >= gpu_num:
                        if run < 0:
                            t0 = times[r]
                            if t0 > horizon or (best is not None and t0 >= best):
                                break
                            run = r
                        if r + 1 == k or times[r + 1] - times[run] >= limit:
                            best = times[run]
                            break
                    else:
                        run = -1
            if best is None:
                return None
            return best, place_consolidated(self._window_min(times.index(best), best + limit), gpu_num, gpn)
        # place_consolidated's condition: `whole` nodes fully free all window long, and one more
        # with >= rem. ok_until[n][i]: the first step from i on where node n has too few free.
        whole, rem = divmod(gpu_num, gpn)

        def ok_until(at_least):
            out = []
            for col in self.cols:
                nxt = [k] * (k + 1)
                for r in range(k - 1, -1, -1):
                    nxt[r] = r if col[r] < at_least else nxt[r + 1]
                out.append(nxt)
            return out

        full = ok_until(gpn)
        part = ok_until(rem) if rem else None
        for i in range(k):
            t0 = times[i]
            if t0 > horizon:
                break
            j = bisect.bisect_left(times, t0 + limit)
            if sum(nxt[i] >= j for nxt in full) >= whole and (part is None or sum(nxt[i] >= j for nxt in part) > whole):
                return t0, place_consolidated(self._window_min(i, t0 + limit), gpu_num, gpn)
        return None


# From this many node-steps on, the numpy profile (_ArrayProfile) is the faster one: a review timed
# a 10,000-GPU cluster (312 nodes a partition, hundreds of limit ends) at 220 s for 10,000 jobs
# with the lists, where FIFO took 1.5 s. Below it the lists win (numpy's cost per call).
ARRAY_PROFILE_FROM = 2048


class _ArrayProfile:
    """_Profile's step function as a numpy array (nodes x steps), for large partitions. The same
    answers as _Profile, step for step (tests/core/test_slurm_baseline.py compares the two)."""

    __slots__ = ("times", "cols", "gpn")

    def __init__(self, now: int, free_now, releases, gpn: int):
        self.gpn = gpn
        self.times, row = _steps(now, releases)
        delta = np.zeros((len(free_now), len(self.times)), dtype=np.int64)
        delta[:, 0] = free_now
        for t, layout in releases:
            r = row[t]
            for node, n in layout:
                delta[node, r] += n
        self.cols = np.cumsum(delta, axis=1)

    def _split(self, t: int) -> int:
        i, new = _new_step(self.times, t)
        if not new:
            return i
        self.cols = np.insert(self.cols, i, self.cols[:, i - 1], axis=1)
        return i

    def take(self, start: int, end: int, layout) -> None:
        i = self._split(start)
        j = self._split(end)
        for node, n in layout:
            self.cols[node, i:j] -= n

    def _window_min(self, i: int, end_time: int) -> list:
        j = bisect.bisect_left(self.times, end_time)
        if j <= i:  # an empty window: min() of nothing raised in _Profile, never reached
            raise ValueError("empty window")
        return self.cols[:, i:j].min(axis=1).tolist()

    def place_now(self, gpu_num: int, limit: int):
        return place_consolidated(self._window_min(0, self.times[0] + limit), gpu_num, self.gpn)

    def _first_short(self, at_least: int) -> np.ndarray:
        """[n, r]: the first step from r on where node n has fewer than `at_least` free (k: none)."""
        k = len(self.times)
        idx = np.where(self.cols < at_least, np.arange(k), k)
        return np.minimum.accumulate(idx[:, ::-1], axis=1)[:, ::-1]

    def earliest(self, gpu_num: int, limit: int, horizon: int):
        times, gpn = self.times, self.gpn
        t = np.asarray(times, dtype=np.int64)
        ends = np.searchsorted(t, t + limit, side="left")  # the window [t_r, t_r + limit) is steps r..ends[r]-1
        within = t <= horizon
        if gpu_num <= gpn:
            # a start at step r on node n: free there (at r itself, even for a zero limit) and through
            # the window, or to the last step, which lasts forever
            nxt = self._first_short(gpu_num)
            fits = (nxt > np.arange(len(times))) & (nxt >= ends)
            starts = np.flatnonzero(fits.any(axis=0) & within)
            if not starts.size:
                return None
            r = int(starts[0])
            return times[r], place_consolidated(self._window_min(r, times[r] + limit), gpu_num, gpn)
        whole, rem = divmod(gpu_num, gpn)
        ok = (self._first_short(gpn) >= ends).sum(axis=0) >= whole
        if rem:
            ok &= (self._first_short(rem) >= ends).sum(axis=0) > whole
        starts = np.flatnonzero(ok & within)
        if not starts.size:
            return None
        r = int(starts[0])
        return times[r], place_consolidated(self._window_min(r, times[r] + limit), gpu_num, gpn)


class _Frontier:
    """(gpu_num, limit) pairs known to fail on a profile that only shrinks: any job at least as
    large in both fails too (consolidated placement needs more of every count as a job grows, and
    a longer window only lowers the GPUs a node keeps free throughout)."""

    __slots__ = ("gpn", "cut", "multi")

    def __init__(self, gpn: int):
        self.gpn = gpn
        self.cut = [math.inf] * (gpn + 1)  # cut[g]: smallest failed limit among single-node sizes <= g
        self.multi = []  # failed multi-node (gpu_num, limit)

    def covers(self, g: int, lim: int) -> bool:
        if g <= self.gpn:
            return lim >= self.cut[g]
        return lim >= self.cut[self.gpn] or any(g >= fg and lim >= fl for fg, fl in self.multi)

    def add(self, g: int, lim: int) -> None:
        if g <= self.gpn:
            cut = self.cut
            for x in range(g, self.gpn + 1):
                if lim < cut[x]:
                    cut[x] = lim
        else:
            self.multi.append((g, lim))


def age_priority(job):
    """Slurm's multifactor priority with only the age factor: earliest submit first, ties by
    submission order (a job id in Slurm, `seq` here)."""
    return (job.submit_time, job.seq)


class SlurmBackfill(Policy):
    """Slurm 22.05 default scheduling: multifactor priority by age + sched/backfill (see module doc).

    `priority`: the queue order, a static sort key per job, ascending = scheduled first (default
    `age_priority`). The main scheduler and backfill are the same whatever the order: Lucid on
    Slurm passes lucidd's SiteFactor here (orchestrator/slurm_mode.py)."""

    name = "slurm"

    def __init__(self, config: SlurmConfig | None = None, priority=None):
        self.config = config or SlurmConfig()
        self.pending_key = priority or age_priority
        self._limits = {}  # job -> its modelled time limit (a pure function of its duration)
        self._releases = {}  # job -> (start_time, limit end, layout) while it runs
        self.overrun_ok = False  # True where jobs may run past their limits (GPU packing slows them)

    def limit(self, job) -> int:
        """The job's own time limit when it has one (a trace's time_limit column; a job that ran past
        it, Slurm's OverTimeLimit or kill grace, is planned with the duration it ran, so none
        outlives its limit here), else the modelled one."""
        lim = self._limits.get(job)
        if lim is None:
            own = job.time_limit
            lim = self._limits[job] = (max(own, int(math.ceil(job.duration))) if own
                                       else self.config.limit_rule.limit(job.duration))
        return lim

    def _release(self, job):
        """(limit end, ((node, n_gpus), ...)) of a running job; kept while it runs, as a running
        job's start and GPUs do not change (no preemption)."""
        rel = self._releases.get(job)
        if rel is None or rel[0] != job.start_time:
            rel = self._releases[job] = (job.start_time, job.start_time + self.limit(job),
                                         [(node, len(gpus)) for node, gpus in job.alloc])
        return rel[1:]

    @classmethod
    def from_options(cls, options: dict | None) -> "SlurmBackfill":
        """Build from an experiment's options (`limit_rule`: text or LimitRule; bf_* knobs)."""
        options = options or {}
        kw = {k: options[k] for k in ("bf_max_job_test", "bf_window_s", "min_time_limit_s")
              if options.get(k) is not None}
        return cls(SlurmConfig(limit_rule=parse_limit_rule(options.get("limit_rule")), **kw))

    def describe(self) -> str:
        c = self.config
        return (f"slurm (age priority + backfill, limits {c.limit_rule.describe()}, "
                f"bf_max_job_test={c.bf_max_job_test}, bf_window_s={c.bf_window_s})")

    def schedule(self, view: SchedulingView) -> list:
        cluster = view.cluster
        now = view.now
        limits, limit_of = self._limits, self.limit
        out = []
        started = []  # (limit end, layout) of jobs started in this pass
        it = iter(view.pending)
        # Main scheduler: priority order until the first job that does not fit.
        blocked = None
        for job in it:
            layout = cluster.place(job.gpu_num)
            if layout is None:
                blocked = job
                break
            cluster.take(layout)
            out.append(Start(job, layout, reason="priority order"))
            started.append((now + limit_of(job), layout))
        free = cluster.free
        if blocked is None or not any(free):
            return out

        # Backfill. Reservations are planned lazily, always a prefix of the examined jobs in
        # priority order: a later job is checked against the reservations planned so far (a
        # superset of the free GPUs it would see with all of them), and only while it still fits
        # are the next deferred reservations planned. So a pass over a full cluster costs a walk
        # over the queue, and a job that fails early stops the planning; every start is decided
        # with all earlier reservations in place.
        gpn = cluster.gpus_per_node
        horizon = now + self.config.bf_window_s
        min_limit = self.config.min_limit
        deferred = deque([(blocked, limit_of(blocked))])
        cannot_start = _Frontier(gpn)  # could not start now
        start_cut = cannot_start.cut  # its single-node part, read inline on the hot path
        no_slot = _Frontier(gpn)  # no start within bf_window (no reservation)
        profile = None
        max_free, total_free, full_nodes = max(free), sum(free), free.count(gpn)
        budget = self.config.bf_max_job_test - 1  # the blocked job was the first examined
        for job in it:
            if budget <= 0:
                break
            budget -= 1
            g = job.gpu_num
            lim = limits.get(job) or limit_of(job)
            if g <= gpn:
                if g > max_free or lim >= start_cut[g]:
                    deferred.append((job, lim))
                    continue
            elif g > total_free or g // gpn > full_nodes or cannot_start.covers(g, lim):
                deferred.append((job, lim))
                continue
            if profile is None:
                releases = [self._release(j) for j in view.running]
                releases += started
                if self.overrun_ok:
                    # a job slowed by sharing a GPU (GPU packing) may run past its limit: Slurm would
                    # end it there; the replay lets it finish and plans its GPUs free a second later
                    releases = [(max(t, now + 1), lay) for t, lay in releases]
                assert all(t > now for t, _ in releases), "a running job outlived its time limit"
                steps = len({t for t, _ in releases}) + 1
                profile = (_ArrayProfile if len(free) * steps >= ARRAY_PROFILE_FROM else _Profile)(
                    now, free, releases, gpn)
            layout = profile.place_now(g, lim)
            while layout is not None and deferred:
                d_job, d_lim = deferred.popleft()
                dg = d_job.gpu_num
                if no_slot.covers(dg, d_lim):
                    continue
                slot = profile.earliest(dg, d_lim, horizon)
                if slot is None:
                    no_slot.add(dg, d_lim)
                else:
                    profile.take(slot[0], slot[0] + d_lim, slot[1])
                    if slot[0] < now + lim:  # it may take what this job needs
                        layout = profile.place_now(g, lim)
            if layout is None:
                cannot_start.add(g, lim)
                deferred.append((job, lim))
                if g == 1 and lim <= min_limit:
                    break  # nothing at all can start now
                continue
            profile.take(now, now + lim, layout)
            cluster.take(layout)
            out.append(Start(job, layout, reason="backfill: ends by its limit before every reservation"))
            max_free, total_free, full_nodes = max(free), sum(free), free.count(gpn)
            if total_free == 0:
                break
        return out
