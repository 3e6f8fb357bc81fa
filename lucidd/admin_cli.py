"""`lucidctl [--json] status | queue | explain job ID`: what the live daemon is doing and why.

They read lucidd's database (the `[database] url` of the daemon's config file), never change
anything, and work while lucidd is stopped (they then show its last state). Schemas of the
`--json` objects: docs/cli.md ("Live daemon").
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
import time

from .errors import LucidError

DEFAULT_CONFIG = "/etc/lucidd/lucidd.toml"
FULL_DISK_BYTES = 1 << 20  # under this much free in state_dir, `status` says the disk is full


def _open(args):
    from .live.config import load_config
    from .live.store import Store, StoreError, sqlite_file

    path = getattr(args, "config", None) or os.environ.get("LUCIDD_CONFIG") or DEFAULT_CONFIG
    cfg = load_config(path)
    db_file = sqlite_file(cfg.database.url)
    if db_file is not None:
        _check_sqlite_readable(path, db_file)
    store = Store(cfg.database.url, read_only=True)
    try:
        has_state = store.has_state()
    except StoreError as exc:
        # what an admin asks while the database is down is whether lucidd failed open: the heartbeat
        # on this host says (an admin trial had only the connection error)
        from .live.reconcile import heartbeat_age

        hb = heartbeat_age(cfg.daemon.heartbeat_file)
        beat = ("no heartbeat file on this host" if hb is None else
                f"lucidd's heartbeat here is {hb:.0f} s old ("
                + ("lucidd-failopen has opened the inbox or will: older than" if hb > cfg.daemon.failopen_after_s
                   else "fail-open after") + f" {cfg.daemon.failopen_after_s:g} s)")
        raise LucidError(f"{exc}; {beat}") from None
    except Exception as exc:  # noqa: BLE001 - a driver error outside SQLAlchemy's
        raise LucidError(f"{path}: database has no lucidd state yet ({type(exc).__name__})") from None
    if not has_state:  # raised inside the try it was caught above and lost its URL
        raise LucidError(f"{path}: database {_redact(store.url)} has no lucidd state yet (has lucidd run with this config?)")
    from .live.store import OLDEST_READABLE_SCHEMA, SCHEMA_VERSION

    found = store.schema_version()
    if found is not None and found < OLDEST_READABLE_SCHEMA:
        # a column of the jobs table came with it (jobs.lent with 2, jobs.time_limit_s with 5): every
        # read of the table fails on an older database, which read as "database unavailable" (an admin
        # trial, between `pip install` and the restart)
        raise LucidError(f"{path}: database {_redact(store.url)} has schema {found}, from an older lucidd; this "
                         f"lucidctl reads schema {OLDEST_READABLE_SCHEMA} to {SCHEMA_VERSION}. The lucidd of this "
                         "version upgrades it when it starts (docs/deploy.md, Upgrading); until then use the "
                         "running lucidd's lucidctl")
    if found is not None and found > SCHEMA_VERSION:
        print(f"lucidctl: warning: database schema {found} was written by a newer lucidd than this lucidctl "
              f"(schema {SCHEMA_VERSION}): what it added is not shown", file=sys.stderr)
    return cfg, store


def _check_sqlite_readable(path, db_file):
    """A user who may not read lucidd's SQLite files gets that said, not "no database" or a driver
    error (the state folder is the daemon's, mode 0750)."""
    folder = os.path.dirname(os.path.abspath(db_file))
    how = ("; to let users read it, docs/deploy.md \"Letting users run lucidctl\"" if os.geteuid() != 0 else "")
    if not os.path.exists(db_file):
        if os.path.isdir(folder) and not os.access(folder, os.X_OK):
            raise LucidError(f"{path}: this account may not look in {folder}, where lucidd's database is{how}")
        # read-only commands: do not create the database (and its folder) by looking for it
        raise LucidError(f"{path}: no lucidd database at {db_file} (has lucidd run with this config?)")
    for f in (db_file, db_file + "-wal", db_file + "-shm"):
        if os.path.exists(f) and not os.access(f, os.R_OK):
            raise LucidError(f"{path}: this account may not read {f}{how}")


def _age(t, now):
    return None if t is None else round(now - float(t), 1)


def _free_bytes(path) -> int | None:
    """Bytes free to lucidd on the disk of `path` (None: not readable here). A full state directory
    stopped lucidd's writes (it failed open), and status said only "NOT running" (a review)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def status_data(cfg, store, now=None) -> dict:
    from .live.reconcile import OTHER_SCHEDULER_KEY, heartbeat_age

    now = now or time.time()
    cycles = store.last_cycles(50)
    last = cycles[0] if cycles else None
    ok = [c for c in cycles if c.ok]
    jobs = store.open_jobs()
    phases = {}
    for r in jobs.values():
        phases[r.phase] = phases.get(r.phase, 0) + 1
    hb = heartbeat_age(cfg.daemon.heartbeat_file, now)
    # the running daemon's own values where it recorded them; the file given here may have been edited
    running = _json_meta(store, "running_config") or {}
    differs = _config_differences(cfg, running)
    d_run = running.get("daemon") or {}
    interval = float(d_run.get("interval_s", cfg.daemon.interval_s))
    failopen_after = float(d_run.get("failopen_after_s", cfg.daemon.failopen_after_s))
    def as_running(section, keys):  # the running daemon's values where it recorded them, else this file's
        return {**{k: getattr(getattr(cfg, section), k) for k in keys},
                **{k: v for k, v in (running.get(section) or {}).items() if k in keys}}

    p_run = as_running("profiler", ("tprof_s", "nprof_gpus", "enabled"))
    k_run = as_running("packing", ("enabled", "gss", "gpu_memory_mib", "model", "tiny_below_util",
                                   "jumbo_from_util"))
    last_ok = store.get_meta("last_ok_cycle")
    dry = store.get_meta("dry_run") == "1"
    stopped_at = _float(store.get_meta("stopped_at"))
    # healthy: a recent successful reconcile, never older than what makes lucidd-failopen act, and
    # no orderly stop since
    window = min(max(3 * interval, 30), failopen_after)
    stopped = stopped_at is not None and (last_ok is None or stopped_at >= float(last_ok))
    healthy = last_ok is not None and now - float(last_ok) <= window and not stopped
    errors = [{"at": c.started_at, "error": c.error} for c in cycles if not c.ok][:5]
    started = [r.started_ahead_of for r in store.started_jobs(since=now - 7 * 86400)]
    jumped = [v for v in started if v]
    return {
        "healthy": bool(healthy),
        "dry_run": dry,
        "version": store.get_meta("version"),
        "schema_version": store.schema_version(),
        "started_at": _float(store.get_meta("started_at")),
        "stopped_at": stopped_at if stopped else None,
        "config": cfg.path,
        "daemon_config": store.get_meta("config_path") or None,
        "config_differs": differs,
        "database": _redact(cfg.database.url),
        "last_cycle": None if last is None else {
            "at": last.started_at, "age_s": _age(last.started_at, now), "ok": last.ok, "seconds": round(last.seconds, 4),
            "cpu_seconds": round(last.cpu_seconds, 4), "jobs": last.jobs, "actions": last.actions,
            "slurm_calls": json.loads(last.calls or "{}"), "error": last.error},
        "last_ok_cycle_age_s": _age(last_ok, now),
        "cycle_seconds_p50": round(statistics.median([c.seconds for c in ok]), 4) if ok else None,
        "cycle_seconds_max": round(max(c.seconds for c in ok), 4) if ok else None,
        "heartbeat_age_s": None if hb is None else round(hb, 1),
        "failopen_after_s": failopen_after,
        "jobs_by_phase": phases,
        "profiling": p_run,
        "packing": k_run,
        "recent_errors": errors,
        "last_database_outage": _json_meta(store, "last_database_outage"),
        "state_dir_free_bytes": _free_bytes(cfg.daemon.state_dir),
        "jobs_needing_attention": _needing_attention(jobs),
        # How Slurm's starts compared with lucidd's order over the last 7 days (in --dry-run: what
        # Slurm did on its own against what lucidd would have done).
        "order_agreement": {"started": len(started), "started_in_order": len(started) - len(jumped),
                            "started_ahead_of_higher_ranked": len(jumped),
                            "mean_jobs_overtaken": round(sum(jumped) / len(started), 3) if started else None},
        "models": [{"kind": m.kind, "version": m.version, "at": m.at, "decision": m.decision}
                   for m in store.model_versions(5)],
        "gpu_samplers": _samplers(store, now),
        "records": _records(cfg, store),
        # slurm.conf settings under which Slurm would not follow lucidd's order, as the daemon found
        # them at the last start at which Slurm answered (lucidd.live.slurm_settings); null before
        "slurm_warnings": _json_meta(store, "slurm_warnings"),
        # the last time lucidd found a job another scheduler had moved into profiling (a second
        # lucidd on another database, most likely); null: never
        "other_scheduler": _json_meta(store, OTHER_SCHEDULER_KEY),
    }


def _records(cfg, store) -> dict | None:
    """How much lucidd keeps, and that [daemon] keep_days prunes it (None: the counts could not be read)."""
    from .live.store import StoreError, sqlite_file

    try:
        out = store.record_counts()
    except StoreError:
        return None
    out["keep_days"] = cfg.daemon.keep_days
    db = sqlite_file(store.url)
    try:  # the file and its write-ahead log; PostgreSQL's size is the server's to tell
        out["sqlite_bytes"] = None if db is None else sum(os.path.getsize(f) for f in (db, db + "-wal")
                                                           if os.path.exists(f))
    except OSError:
        out["sqlite_bytes"] = None
    return out


def _config_differences(cfg, running: dict) -> list:
    """`section.key` of every value the file given here has and the running daemon does not (it was
    edited since lucidd started, or is another file): restart lucidd to apply them."""
    from .daemon import running_config

    if not running:
        return []
    mine = running_config(cfg)
    return sorted(f"{sec}.{k}" for sec, vals in mine.items() for k, v in vals.items()
                  if sec in running and k in running[sec] and json.loads(json.dumps(v, default=str)) != running[sec][k])


def _json_meta(store, key):
    raw = store.get_meta(key)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _needing_attention(jobs: dict) -> list:
    """Jobs lucidd can send nowhere they will run (a partition Slurm refuses, or one they may not
    use): they wait until an admin or their owner acts, and only the log said so."""
    return sorted(({"job_id": r.job_id, "user": r.user, "reason": r.profile_reason}
                   for r in jobs.values() if _needs_attention(r)), key=lambda x: x["job_id"])


def _needs_attention(r) -> bool:
    from .live.reconcile import MAY_NEVER_START, REFUSED_MOVE

    why = r.profile_reason or ""
    return REFUSED_MOVE in why or MAY_NEVER_START in why


def _samplers(store, now) -> dict:
    """The NVML samplers seen through what they wrote: a node's last reading of a job. A node whose
    GPUs ran no job for a while looks the same as a node whose sampler stopped."""
    from .live.store import StoreError

    try:
        nodes = store.gpu_sampler_nodes()
    except StoreError:  # a database from before schema 4
        nodes = {}
    try:
        beats = store.gpu_nodes()
    except StoreError:
        beats = {}
    # A heartbeat comes at least every [sampler] flush_s or minute, whether or not a job ran
    silent = sorted(n for n, r in beats.items() if now - r.seen_at > 600)
    sizes = [r.gpu_memory_mib for r in beats.values() if r.gpu_memory_mib]
    return {"nodes": len(nodes), "nodes_last_10_min": sum(1 for t in nodes.values() if now - t <= 600),
            "last_reading_age_s": _age(max(nodes.values()), now) if nodes else None,
            "heartbeat_nodes": len(beats), "silent_nodes": silent,
            "gpu_memory_mib": {"smallest": min(sizes), "largest": max(sizes)} if sizes else None}


def queue_data(cfg, store, users=None) -> dict:
    """`users`: a set of user names to keep (None: everyone). Ranks are counted over all jobs, as
    Slurm orders them, so a user sees where their job really stands."""
    from .backends.base import next_rank
    from .live.reconcile import RANK_PREFIX

    jobs = store.open_jobs()
    # a profiled job waiting in its partition again has a start time: its profiling run's
    waiting = [r for r in jobs.values()
               if r.phase == "released" and not r.started_in_partition(cfg.slurm.profiling_partition)]
    # Ranks as of now: the rank saved with a SiteFactor is that of the cycle that set the value (a
    # value is written only when it changes), and jobs ahead of it have started since. Counted in
    # priority order across partitions: a job of `-p main,research` takes a place in both.
    ranks, by_part = {}, {}
    for r in sorted(waiting, key=lambda r: (-(r.site_factor or 0), r.job_id)):
        if r.site_factor is not None:
            ranks[r.job_id] = next_rank(by_part, r.target_partition)[0]
    waiting.sort(key=lambda r: (r.target_partition, -(r.site_factor or 0), r.job_id))
    pending = []
    for r in waiting:
        b = _brief(r)
        if r.site_factor is not None:
            b["rank"] = ranks[r.job_id]
            b["reason"] = RANK_PREFIX.sub("", b["reason"] or "")
        pending.append(b)
    d = {
        "inbox": [_brief(r) for r in sorted(jobs.values(), key=lambda r: (r.gpus, r.job_id)) if r.phase == "inbox"],
        "profiling": [_brief(r) for r in sorted(jobs.values(), key=lambda r: r.job_id)
                      if r.phase in ("profiling", "requeued")],
        "pending": pending,
        "users": None if users is None else sorted(users),
    }
    if users is not None:
        for key in ("inbox", "profiling", "pending"):
            d[key] = [b for b in d[key] if b["user"] in users]
    return d


def queue_users(args) -> set | None:
    """The users `lucidctl queue --user LIST / --me` asks for (None: all)."""
    users = set(_names(getattr(args, "user", None)) or ())
    if getattr(args, "me", False):
        import pwd

        try:
            users.add(pwd.getpwuid(os.getuid()).pw_name)
        except KeyError:  # a uid with no passwd entry (a container): its login name, if any
            import getpass

            try:
                users.add(getpass.getuser())
            except (KeyError, OSError):
                raise LucidError(f"--me: uid {os.getuid()} has no user name here; use --user NAME") from None
    if getattr(args, "user", None) is not None and not users and not getattr(args, "me", False):
        raise LucidError("--user: no user name given")
    return users or None


def parse_since(text: str, now: float) -> int:
    """`--since`: a duration back from now (90s, 30m, 2h, 7d), a local date or date and time
    (2026-11-28, 2026-11-28T09:30[:00]), or Unix seconds."""
    t = str(text).strip()
    bad = LucidError(f"--since {text!r}: give a duration (90s, 30m, 2h, 7d), a date (2026-11-28 or "
                     "2026-11-28T09:30, local time) or Unix seconds (0: all that is kept)")
    m = re.fullmatch(r"(\d{1,9}(?:\.\d+)?)\s*([smhd])", t)
    if m:
        return max(0, int(now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]))
    if t == "0" or re.fullmatch(r"[1-9]\d{8,10}", t):  # Unix seconds; 20261128 is a date without dashes
        return int(t)
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"):
        try:
            return int(time.mktime(time.strptime(t, fmt)))
        except (ValueError, OverflowError):
            continue
    raise bad


def _names(text) -> list | None:
    names = [x.strip() for x in (text or "").split(",") if x.strip()]
    return names or None


def actions_data(cfg, store, since: int, kinds=None, statuses=None, users=None, limit: int = 200) -> dict:
    """`lucidctl actions`: lucidd's audit log, what it sent to Slurm (or would have, dry-run)."""
    if not 1 <= limit <= 1_000_000:
        raise LucidError(f"--limit {limit}: give 1 to 1,000,000")
    rows = store.action_log(since, kinds, statuses, users, limit + 1)
    return {"since": since, "limit": limit, "truncated": len(rows) > limit, "keep_days": cfg.daemon.keep_days,
            "actions": [{"job_id": a.job_id, "user": u, "kind": a.kind, "status": a.status,
                         "created_at": a.created_at, "applied_at": a.applied_at, "reason": a.reason,
                         "error": a.error, "args": json.loads(a.args or "{}"), "key": a.key}
                        for a, u in rows[:limit]]}


def actions_text(d: dict) -> list:
    since = "all that is kept" if not d["since"] else f"since {_ts(d['since'])}"
    lines = [f"lucidd's actions ({since}), newest first: {len(d['actions'])}"
             + (f" (the newest {d['limit']}; --limit or --since for more)" if d["truncated"] else "")]
    for a in d["actions"]:
        when = _ts(a["applied_at"] or a["created_at"])
        job = "-" if a["job_id"] is None else str(a["job_id"])
        reason = " ".join(str(a["reason"] or "").split())
        lines.append(f"  {when} {job:>9} {a['user'] or '':<10} {a['kind']:<11} {a['status']:<8} "
                     f"{reason[:110] + ('…' if len(reason) > 110 else '')}")
        if a["error"]:  # a failed action's error; an applied one may carry a note (how it was found made)
            mark = "!" if a["status"] == "failed" else "note:"
            lines.append(f"  {'':>19} {'':>9} {mark} {' '.join(str(a['error']).split())[:140]}")
    if not d["actions"]:
        lines.append(f"  none (records are kept [daemon] keep_days = {d['keep_days']} after a job ends)")
    return lines


def queue_text(d: dict) -> list:
    """`lucidctl queue` as text lines, from `queue_data`'s dict."""
    inbox = [r for r in d["inbox"] if not r["needs_attention"]]
    held = [r for r in d["inbox"] if r["needs_attention"]]
    groups = [("waiting for profiling (inbox)", inbox), ("in profiling", d["profiling"]),
              ("pending in lucidd's order", d["pending"])]
    if held:  # not waiting for lucidd: Slurm refuses the partition lucidd would send them to
        groups.insert(1, ("held in the inbox: Slurm refuses their partition (an admin or the owner must act)", held))
    lines = [] if not d.get("users") else [f"jobs of {', '.join(d['users'])} (ranks among all jobs)"]
    for title, rows in groups:
        lines.append(f"{title}: {len(rows)}")
        for r in rows:
            est = "" if r["estimate_s"] is None else f" est {r['estimate_s']:,.0f}s"
            rank = "" if r["rank"] is None else f"#{r['rank']} "
            lines.append(f"  {rank}{r['job_id']:>8} {r['partition']:<12} {r['gpus']:>3} GPU {r['user'] or '?':<10}{est}  "
                         f"{r['reason']}")
            if r["attention_reason"] and r["attention_reason"] != r["reason"]:
                lines.append(f"  {'':>8} ! {r['attention_reason']}")
    return lines


def _brief(r) -> dict:
    # a partition Slurm refuses or one the job may not use: it waits until an admin or its owner acts
    attention = _needs_attention(r)
    return {"job_id": r.job_id, "user": r.user, "name": r.name, "gpus": r.gpus, "partition": r.target_partition,
            "phase": r.phase, "profile": r.profile, "submitted": r.original_submit, "estimate_s": r.estimate_s,
            "estimate_source": r.estimate_source, "site_factor": r.site_factor, "rank": r.queue_rank,
            "reason": r.order_reason if r.phase == "released" else (
                r.profile_reason or ("not admitted to profiling yet: it waits for room there (least GPUs first) "
                                     "or for the next cycle" if r.phase == "inbox" else "")),
            "needs_attention": attention, "attention_reason": r.profile_reason if attention else None}


def _kept_lent_note(cfg, r, now) -> str | None:
    """What `[profiler] keep_lent_while_idle` is doing to a lent run still running past its Tprof:
    no action says it (the reclaim, when it comes, does), so without this line the story would end at
    the run's start while the run goes on for hours."""
    p = cfg.profiler
    if not (getattr(p, "keep_lent_while_idle", False) and r.lent and r.phase == "profiling"
            and r.profile == "admitted" and r.profile_start):
        return None
    # a lent run's Tprof (orchestrator.live.lent_tprof, which this lower layer does not import)
    limit = max(int(p.long_tprof_s), int(p.tprof_s)) if p.long_tprof_s else int(p.tprof_s)
    ran = int(now - r.profile_start)
    if ran < limit:
        return None
    return (f"running on lent GPUs for {ran} s, past its Tprof {limit} s: kept there ([profiler] "
            f"keep_lent_while_idle) while no job in a partition of its node has waited {limit} s since "
            "submission; requeued (reclaimed) at the first cycle after one has, or left to end")


def explain_data(cfg, store, job_id, now=None) -> dict:
    text = str(job_id).strip()
    if re.fullmatch(r"[0-9]+_[0-9]+|[0-9]+\+[0-9]+", text):  # int() reads "4_4" as 44: another job
        raise LucidError(f"job {text} is an array task or a heterogeneous job component: give its own job id "
                         f"(`squeue -j {text} -o %A` or `sacct -j {text} -X -o JobIDRaw` shows it)")
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise LucidError(f"job id must be a number, got {job_id!r}")
    jid = int(text)
    if not 0 < jid < 2 ** 63:  # a job id Slurm can give (and a database integer can hold)
        raise LucidError(f"job {job_id} is not a Slurm job id")
    r = store.job(jid)
    if r is None:
        raise LucidError(f"job {jid} is not in lucidd's database (never seen by lucidd, from before it ran, or "
                         f"ended more than [daemon] keep_days ({cfg.daemon.keep_days}) ago)")
    actions = store.actions_for(jid, since=r.first_seen)
    # a job first seen outside the inbox (lucidd started on a busy cluster, a shadow) was never
    # routed by job_submit.lua: where it was is all lucidd knows, not what its owner asked for
    seen_outside = (r.profile_reason or "").startswith("first seen in partition")
    story = [f"submitted {_ts(r.original_submit)} asking for {r.gpus} GPU(s)"
             + (f" (first seen in partition {r.requested_partition}: what it asked for was not recorded)"
                if seen_outside and r.requested_partition else
                f" in partition {r.requested_partition}" if r.requested_partition else
                f" (no partition: {r.target_partition})")]
    # actions and starts in the order they happened (the latest start is kept on the record, the
    # profiling run's apart: a job cancelled after its requeue listed its requeue before its start)
    events = [(a.applied_at or a.created_at or 0, f"{_ts(a.applied_at or a.created_at)} {a.kind} [{a.status}]: "
               f"{a.reason}" + (f" ({a.error})" if a.error else "")) for a in actions if a.kind != "sitefactor"]
    if r.profile_start:
        # a shadow's (--dry-run) run never happened: it is the one lucidd would have started
        virtual = any(a.kind == "profile" and a.status == "dry-run" for a in actions)
        events.append((r.profile_start, f"{'dry-run: would have started' if virtual else 'started'} its profiling "
                                        f"run {_ts(r.profile_start)}"))
    if r.start_time and r.start_time != r.profile_start:
        events.append((r.start_time, f"started {_ts(r.start_time)} in {r.partition_ran or r.target_partition}"))
    if r.released_at and not any(a.kind == "release" and a.status in ("applied", "dry-run") for a in actions):
        # given back by lucidd-failopen, lucidd's stop or its owner, not by a cycle's action: only
        # --json said so (an admin trial)
        events.append((r.released_at, f"{_ts(r.released_at)} released outside lucidd's cycles: "
                                      f"{r.profile_reason}"))
    story += [text for _, text in sorted(events, key=lambda e: e[0])]
    kept = _kept_lent_note(cfg, r, now or time.time())
    if kept:
        story.append(kept)
    sfs = [a for a in actions if a.kind == "sitefactor" and a.status == "applied"]
    if sfs:
        story.append(f"SiteFactor set {len(sfs)} time(s), last {json.loads(sfs[-1].args).get('value')}: {sfs[-1].reason}")
    # a shadow (--dry-run) lucidd's values, or a write Slurm refused: never in Slurm
    unsent = [a for a in actions if a.kind == "sitefactor" and a.status != "applied"]
    if unsent:
        last = unsent[-1]
        story.append(f"SiteFactor {json.loads(last.args).get('value')} not set in Slurm [{last.status}]"
                     f"{f' ({last.error})' if last.error else ''}: {last.reason}")
    if r.phase == "done":
        story.append(f"ended {_ts(r.end_time)}: {r.final_state}")
    from .live.store import StoreError

    try:
        gpu_runs = [_gpu_run(g, cfg) for g in store.gpu_profiles(jid)]
    except StoreError:  # a database from before schema 4 (lucidd not restarted since the upgrade)
        gpu_runs = []
    return {
        "job_id": jid, "user": r.user, "account": r.account, "name": r.name, "gpus": r.gpus,
        "requested_partition": r.requested_partition, "partition": r.target_partition, "phase": r.phase,
        "submitted": r.original_submit, "first_seen": r.first_seen,
        "profiling": {"outcome": r.profile, "reason": r.profile_reason, "requeued_at": r.requeued_at,
                      "released_at": r.released_at, "restarts_before": r.restarts},
        "order": {"site_factor": r.site_factor, "rank": r.queue_rank, "reason": r.order_reason,
                  "estimate_s": r.estimate_s, "estimate_source": r.estimate_source,
                  "explanation": _estimate_explanation(cfg, store, r)},
        "start_time": r.start_time, "end_time": r.end_time, "final_state": r.final_state,
        "actions": [{"key": a.key, "kind": a.kind, "status": a.status, "reason": a.reason, "error": a.error,
                     "created_at": a.created_at, "applied_at": a.applied_at, "args": json.loads(a.args or "{}")}
                    for a in actions],
        "story": story,
        "gpu_usage": gpu_runs,
        "packing": _packing_explanation(cfg, store, r),
    }


def _estimate_explanation(cfg, store, r) -> dict | None:
    """The decider's explanation of the job's duration estimate (the EBM's terms), or why there is
    none; None when the configured decider gives none. Never fails `explain`."""
    from .live.reconcile import NOT_ESTIMATED, estimate_explanation, load_decider

    if r.estimate_s is None:
        return estimate_explanation("none", NOT_ESTIMATED)
    try:
        return load_decider(cfg.daemon.decider, cfg).explain_estimate(store, r)
    except Exception as exc:  # noqa: BLE001 - a model or library that cannot be read here
        return estimate_explanation("unavailable", f"the estimate cannot be explained here ({exc})")


def _packing_explanation(cfg, store, r) -> dict | None:
    """The decider's packing test of the job (binder/live.py), or None when the configured decider
    does not pack. Never fails `explain`."""
    from .live.reconcile import load_decider, packing_explanation

    try:
        return load_decider(cfg.daemon.decider, cfg).explain_packing(store, r)
    except Exception as exc:  # noqa: BLE001 - a model file or library that cannot be read here
        return packing_explanation(bool(cfg.packing.enabled), blocker=f"cannot be judged here ({exc})")


def models_data(cfg, store) -> dict | None:
    """The decider's models (`lucidctl models`); None when the configured decider has none."""
    from .live.reconcile import load_decider

    return load_decider(cfg.daemon.decider, cfg).describe_models(store)


def _figure(value, fn=None) -> str:
    """A holdout figure to two places; n/a where there is none (a holdout of one constant duration,
    every job at the same time limit, has no rank correlation: stored as null)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{fn(value) if fn else value:.2f}"


def models_text(d: dict | None) -> list:
    """`lucidctl models` as text lines, from `models_data`'s dict."""
    from models.render import render_table

    if d is None:
        return ["the configured decider ([daemon] decider) keeps no models"]
    lines = []
    c = d["current"]
    if c is None and d["problem"]:
        lines.append(f"duration model: none usable in {d['models_dir']}: estimates use the rule of means")
    elif c is None:
        lines.append(f"duration model: none yet in {d['models_dir']} ({d['history_jobs'] if d['history_jobs'] is not None else '?'}"
                     f" finished jobs in lucidd's history; the first fit needs [models] min_history_jobs = "
                     f"{d['min_history_jobs']}): estimates use the rule of means")
    else:
        fitted = (f", fitted {_ts(c['fitted_at'])} on {c['train_rows']:,} finished jobs ({c['trigger']})"
                  if c["fitted_at"] and c["train_rows"] else "")
        lines.append(f"duration model: EBM v{c['version']}{fitted}")
        lines.append(f"  file {c['file']}")
        if c["fallback"]:
            lines.append(f"  ! serving an older version: {c['fallback_reason']}")
        h = c["holdout"] or {}
        if h.get("n"):
            lines.append(f"  on the {h['n']:,} jobs held out at its fit: median |log error| "
                         f"{_figure(h.get('median_abs_log_error'))} (x{_figure(h.get('median_abs_log_error'), math.exp)}), "
                         f"Spearman {_figure(h.get('spearman'))}")
        if c["dropped_features"]:
            lines.append(f"  inputs the history lacks, left out: {', '.join(c['dropped_features'])}")
        if c["terms"]:
            lines.append("  what it looks at (mean |contribution| over its training jobs, log1p seconds):")
            rows = [[t["term"], f"{t['importance']:.3f}"] for t in c["terms"][:12]]
            lines.append(render_table(["term", "importance"], rows, align="lr", indent="    "))
            if len(c["terms"]) > 12:
                lines.append(f"    ({len(c['terms']) - 12} more terms: --json lists all)")
    if d["problem"]:
        lines.append(f"  ! {d['problem']}")
    if d["refits"]:
        lines.append("last refits:")
        for r in d["refits"]:
            lines.append(f"  {_ts(r['at'])} v{r['version']} {r['decision']}: {r['reason']}")
    if c is not None and c["terms"]:
        lines.append("`lucidctl explain job ID` shows how these terms made one job's estimate.")
    return lines


def models_plots(cfg, d: dict | None, folder: str) -> dict:
    """`lucidctl models --plot DIR`: the current duration model's shape functions (what each term
    adds to log1p(seconds) over its inputs' values) as JSON and PNGs in `folder`."""
    from models.update import ModelStore

    if d is None or d["current"] is None:
        raise LucidError("--plot: no duration model to plot" + ("" if d is None else f" in {d['models_dir']}")
                         + " (`lucidctl models` says why)")
    try:
        loaded = ModelStore(cfg.models.dir).load_current("duration")
        shapes = loaded.model.shape_functions()
    except Exception as exc:  # noqa: BLE001 - a file another InterpretML wrote may fail anywhere inside
        raise LucidError(f"--plot: the duration model in {cfg.models.dir} cannot be drawn: "
                         f"{type(exc).__name__}: {exc}") from None
    prefix = f"duration_v{loaded.version}"
    try:
        os.makedirs(folder, exist_ok=True)
        data = os.path.join(folder, f"{prefix}_shapes.json")
        with open(data, "w") as f:
            json.dump(shapes, f, indent=1)
        from models.plots import write_shape_plots

        files = write_shape_plots(shapes, folder, prefix)
    except OSError as exc:
        raise LucidError(f"--plot: cannot write to {folder}: {exc.strerror or exc}") from None
    return {"dir": folder, "version": loaded.version, "data": data, "files": files}


def _gpu_run(g, cfg) -> dict:
    return {"partition": g.partition, "node": g.node, "profiling_run": g.partition == cfg.slurm.profiling_partition,
            "first_t": g.first_t, "last_t": g.last_t, "samples": g.samples, "gpus": g.gpus,
            "gpu_util": g.gpu_util, "gmem_util": g.gmem_util, "gmem_mib": g.gmem_mib}


def _ts(t):
    return "?" if not t else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(t)))


def _pct(v):
    return "?" if v is None else f"{v:.0f} %"


def _float(v):
    return None if v is None else float(v)


def _redact(url):
    from .live.store import redact

    return redact(url)


def cmd_live(args) -> int:
    from .live.store import StoreError, sqlite_file

    cfg, store = _open(args)
    try:
        return _cmd_live(args, cfg, store)
    except StoreError:
        # lucidd started while this read its stopped database as immutable (see
        # store._sqlite_read_only_connect): once lucidd's log is there, a second read goes through it
        reader = store.sqlite_reader
        if reader is None or not reader.immutable_reads or not os.path.exists(sqlite_file(store.url) + "-wal"):
            raise
        return _cmd_live(args, *_open(args))


def _cmd_live(args, cfg, store) -> int:
    if args.command == "status":
        d = status_data(cfg, store)
        if args.json:
            print(json.dumps(d, indent=2, default=str))
            return 0
        lc = d["last_cycle"] or {}
        if d["healthy"]:
            state = "healthy"
        elif d["stopped_at"] is not None:
            state = (f"STOPPED {_age(d['stopped_at'], time.time()):.0f} s ago ("
                     + ("a shadow: it changed nothing in Slurm" if d["dry_run"] else
                        "orderly stop: it gave its jobs back and opened the inbox; Slurm schedules alone") + ")")
        elif d["heartbeat_age_s"] is None or d["heartbeat_age_s"] > d["failopen_after_s"]:
            state = ("NOT running (no successful reconcile recently; lucidd-failopen opens the inbox once the "
                     "heartbeat is older than failopen_after_s)")
        else:
            state = "NOT healthy (no recent successful reconcile)"
        print(f"lucidd {d['version'] or '?'} (database schema {d['schema_version'] or '?'}): {state}"
              f"{' [dry-run]' if d['dry_run'] else ''}")
        free = d["state_dir_free_bytes"]
        if free is not None and free < FULL_DISK_BYTES:
            print(f"  the disk of [daemon] state_dir is full ({free:,} bytes free): lucidd cannot write its database "
                  "or heartbeat there, and fails open until there is room")
        print(f"  config {d['config']}, database {d['database']}")
        runs = "ran" if d["stopped_at"] is not None else "runs"
        if d["daemon_config"] and d["daemon_config"] != d["config"]:
            print(f"  the daemon {runs} with {d['daemon_config']}")
        if d["config_differs"]:
            print(f"  the daemon {runs} with other values than this file for {', '.join(d['config_differs'][:8])}"
                  f"{' ...' if len(d['config_differs']) > 8 else ''}"
                  + (": restart lucidd to apply the file's (figures below are the daemon's)" if runs == "runs" else ""))
        if lc:
            print(f"  last reconcile {lc['age_s']} s ago: {'ok' if lc['ok'] else 'FAILED ' + lc['error']}, "
                  f"{lc['seconds'] * 1000:.0f} ms wall, {lc['cpu_seconds'] * 1000:.0f} ms CPU, {lc['jobs']} jobs, "
                  f"{lc['actions']} actions, Slurm calls {lc['slurm_calls']}")
            print(f"  reconcile latency p50 {d['cycle_seconds_p50']} s, max {d['cycle_seconds_max']} s (last 50)")
        if d["heartbeat_age_s"] is not None:
            print(f"  heartbeat {d['heartbeat_age_s']} s old (fail-open after {d['failopen_after_s']:g} s)")
        else:
            print(f"  no heartbeat file here ({'a dry run writes none' if d['dry_run'] else 'lucidd not run on this host'}"
                  f"; fail-open after {d['failopen_after_s']:g} s)")
        print(f"  jobs by phase: {d['jobs_by_phase'] or 'none'}")
        k = d["packing"]
        rule = (f"the rule on SM utilisation: Tiny below {k['tiny_below_util']:g} %, Jumbo from "
                f"{k['jumbo_from_util']:g} %")
        gpus = (f"GPUs of {k['gpu_memory_mib']:,} MiB" if k["gpu_memory_mib"] else
                "each partition's smallest GPU as its samplers report it")
        print("  GPU packing: " + (f"on (GSS {k['gss']}, {gpus}, "
                                     f"{'model ' + k['model'] + ', at least ' + rule if k['model'] else rule}; "
                                     "`explain` shows each job's shard changes)" if k["enabled"] else "off"))
        oa = d["order_agreement"]
        if oa["started"]:
            print(f"  last 7 days: Slurm started {oa['started']} ordered job(s), {oa['started_in_order']} in lucidd's "
                  f"order, {oa['started_ahead_of_higher_ranked']} ahead of a job lucidd ranked higher "
                  f"(backfill, other priority factors{', or no lucidd: dry-run' if d['dry_run'] else ''})")
        gs = d["gpu_samplers"]
        if gs["nodes"]:
            print(f"  NVML samplers: {gs['nodes_last_10_min']} of {gs['nodes']} node(s) reported a job in the last "
                  f"10 min (last reading {gs['last_reading_age_s']} s ago)")
        if gs["heartbeat_nodes"]:
            silent = gs["silent_nodes"]
            mem = gs["gpu_memory_mib"]
            print(f"  NVML samplers' heartbeats: {gs['heartbeat_nodes'] - len(silent)} of {gs['heartbeat_nodes']} "
                  f"node(s) within 10 min" + (f"; silent: {', '.join(silent[:10])}"
                                               f"{f' and {len(silent) - 10} more' if len(silent) > 10 else ''}"
                                               if silent else "")
                  + (f"; GPUs of {mem['smallest']:,.0f} to {mem['largest']:,.0f} MiB" if mem else ""))
        rec = d["records"]
        if rec:
            size = "" if rec["sqlite_bytes"] is None else f", {rec['sqlite_bytes'] / 2**20:,.1f} MiB on disk"
            oldest = ("" if rec["oldest_ended_job_end"] is None else
                      f"; the oldest ended {_ts(rec['oldest_ended_job_end'])}")
            print(f"  records: {rec['jobs']:,} job(s) ({rec['ended_jobs']:,} ended), {rec['actions']:,} action(s), "
                  f"{rec['cycles']:,} cycle(s){size}; kept {rec['keep_days']} days after a job ends{oldest}")
        for w in d["slurm_warnings"] or ():
            print(f"  slurm.conf (as lucidd found it when it started): {w}")
        other = d["other_scheduler"]
        if other:
            print(f"  ANOTHER SCHEDULER moves jobs into profiling: at {_ts(other.get('at'))}, {other.get('jobs_last_hour')} "
                  f"job(s) in the hour before (the last: job {other.get('last_job')}) that this lucidd did not admit; "
                  "is a second lucidd running with another database? (docs/deploy.md, \"One lucidd per cluster\")")
        for e in d["recent_errors"]:
            print(f"  error at {_ts(e['at'])}: {e['error']}")
        out = d["last_database_outage"]
        if out:
            print(f"  last database outage: {_ts(out.get('from'))} for {out.get('seconds')} s (lucidd failed open "
                  f"meanwhile): {out.get('error', '')}")
        stuck = d["jobs_needing_attention"]
        if stuck:
            print(f"  {len(stuck)} job(s) need an admin or their owner (`lucidctl explain job ID`):")
            for x in stuck[:10]:
                print(f"    job {x['job_id']} ({x['user'] or '?'}): {x['reason']}")
            if len(stuck) > 10:
                print(f"    ... and {len(stuck) - 10} more (--json lists all)")
        return 0
    if args.command == "actions":
        d = actions_data(cfg, store, parse_since(args.since, time.time()), _names(args.kind), _names(args.status),
                         _names(args.user), args.limit)
        print(json.dumps(d, indent=2, default=str) if args.json else "\n".join(actions_text(d)))
        return 0
    listing = {"models": (models_data, models_text), "queue": (queue_data, queue_text)}.get(args.command)
    if listing is not None:
        data, text = listing
        d = queue_data(cfg, store, queue_users(args)) if args.command == "queue" else data(cfg, store)
        plots = models_plots(cfg, d, args.plot) if args.command == "models" and args.plot else None
        if plots is not None and args.json:
            d["plots"] = plots
        print(json.dumps(d, indent=2, default=str) if args.json else "\n".join(text(d)))
        if plots is not None and not args.json:
            print(f"shape functions of duration model v{plots['version']}: {plots['files'][0]} (overview), "
                  f"{len(plots['files']) - 1} term plots and {plots['data']} in {plots['dir']}")
        return 0
    d = explain_data(cfg, store, args.id)
    if args.json:
        print(json.dumps(d, indent=2, default=str))
        return 0
    print(f"job {d['job_id']} ({d['name']!r}, user {d['user']}, {d['gpus']} GPU(s), partition {d['partition']}): "
          f"{d['phase']}")
    for line in d["story"]:
        print(f"  - {line}")
    o = d["order"]
    if o["site_factor"] is not None:
        print(f"  order: {o['reason']}")
        print(f"  estimate: {o['estimate_s']:,.0f} s from {o['estimate_source'] or '?'}")
        e = o["explanation"]
        if e is not None:
            from .explain_cli import contribution_lines

            print(f"    {e['reason']}")
            for line in contribution_lines(e.get("intercept"), e.get("terms") or [], indent="    "):
                print(line)
    k = d["packing"]
    if k is not None and k["enabled"]:
        print("  GPU packing: " + (f"may share a GPU while its partition waits for GPUs ({k['how']})" if k["may_share"]
                                   else f"a GPU of its own: {k['blocker']}")
              + (f" [GPUs of {k['gpu_memory_mib']:,.0f} MiB assumed]" if k.get("gpu_memory_mib") else ""))
    for g in d["gpu_usage"]:
        memory = "?" if g["gmem_mib"] is None else f"{g['gmem_mib']:,.0f} MiB"
        print(f"  GPUs ({'profiling run' if g['profiling_run'] else 'run'} in {g['partition'] or '?'} on {g['node']}, "
              f"NVML {g['gpus'] or '-'}, {g['samples']} readings {_ts(g['first_t'])} .. {_ts(g['last_t'])}): "
              f"kernels running {_pct(g['gpu_util'])} of the time, memory read/write {_pct(g['gmem_util'])}, memory {memory}")
    return 0
