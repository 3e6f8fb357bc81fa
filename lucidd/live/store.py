"""lucidd's persistent state (SQLAlchemy 2): jobs seen, actions with idempotency keys, decisions
with reasons, reconcile cycles, finished-job history and model versions.

SQLite by default; any SQLAlchemy URL by config (PostgreSQL is tested for real). A restarted
daemon resumes from here without repeating an action: every Slurm change is first written as an
action with a unique key (e.g. `requeue:1234:s1790000000` = requeue job 1234, the one first seen at
that second: a job id Slurm hands out again is another job), and a key
already applied is never applied again.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager

from sqlalchemy import (BigInteger, Boolean, Float, Integer, String, Text, create_engine, delete, event, false,
                        func, insert, select, update)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from ..errors import ConfigError, LucidError

_INSTANCE_LOCK_KEY = 0x6C756364  # "lucd": pg_try_advisory_lock's first key for Store.hold_instance_lock
SCHEMA_VERSION = 5  # 2: jobs.lent; 3: partition, user and account columns TEXT (were VARCHAR(200));
# 4: gpu_profiles (a new table: create_all adds it to an older database); 5: jobs.time_limit_s.
# gpu_nodes (28 November 2026) is no new version: only samplers write it, readers take its absence
# for "no sampler has said", and a lucidd of schema 5 never reads it, so a rollback needs no restore.
# gpu_nodes.flushed_at, sampling_since and clock_offset_s are no new version either, for the same
# reasons: all three nullable, added by _upgrade (or create_all), written by a sampler only where the
# table has them (Store.save_gpu_node), and a rolled-back lucidd reads the table's other columns.
OLDEST_READABLE_SCHEMA = 5  # the jobs table's columns since: an older one fails every read of it

# Columns that were VARCHAR(200) before schema 3: Slurm takes a `-p` list of up to 1,024 characters,
# and on PostgreSQL one longer than 200 failed every cycle's write.
_WIDENED = {"jobs": ("requested_partition", "target_partition", "user", "account", "partition_ran"),
            "history": ("user", "partition")}


class StoreError(LucidError):
    """The database cannot be reached or used: the daemon stops acting until it is back."""


class SchemaTooNew(ConfigError):
    """The database was written by a newer lucidd: this one must not use it (lucidd exits 2)."""


class StoreURLError(StoreError, ConfigError):
    """The database URL itself is unusable (unknown dialect, missing driver, malformed): a config
    error (lucidd exits 2, which systemd does not restart), not a database that is down."""


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    """A job lucidd has seen, with what Slurm forgets (original submit time, requested partition)."""

    __tablename__ = "jobs"
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    first_seen: Mapped[int] = mapped_column(BigInteger)
    original_submit: Mapped[int] = mapped_column(BigInteger)
    requested_partition: Mapped[str | None] = mapped_column(Text, nullable=True)
    target_partition: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text, default="")
    user: Mapped[str] = mapped_column(Text, default="")
    account: Mapped[str] = mapped_column(Text, default="")
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    # lucidd's view of the job's life: inbox | profiling | requeued | released | done
    phase: Mapped[str] = mapped_column(String(20), default="inbox")
    # profiling: pending | admitted | skipped | finished | requeued | released | abandoned
    profile: Mapped[str] = mapped_column(String(20), default="pending")
    profile_reason: Mapped[str] = mapped_column(Text, default="")
    profile_start: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    requeued_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    released_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    estimate_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    estimate_source: Mapped[str] = mapped_column(String(100), default="")
    site_factor: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # last value applied
    order_reason: Mapped[str] = mapped_column(Text, default="")
    queue_rank: Mapped[int | None] = mapped_column(Integer, nullable=True)
    start_time: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end_time: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    final_state: Mapped[str] = mapped_column(String(40), default="")
    partition_ran: Mapped[str] = mapped_column(Text, default="")
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    # when Slurm started it: how many jobs of its partition that lucidd ranked ahead of it were still
    # waiting (0: Slurm followed lucidd's order for this job; backfill and other factors can jump)
    started_ahead_of: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # admitted to profiling on GPUs nobody waited for ([profiler] lend_idle_gpus): its Tprof is
    # long_tprof_s, and lucidd set its ExcNodeList (cleared when it leaves profiling)
    # (a server default too: code that does not know the column can still add rows)
    lent: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # the job's time limit as Slurm last showed it (None: none, or not seen since schema 5): the packing
    # test's time-limit rule, which `explain` repeats
    time_limit_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    def started_in_partition(self, profiling: str) -> bool:
        """Whether it has started outside the profiling partition (start_time is its latest start,
        so a profiled job waiting in its partition again has one: its profiling run's)."""
        return self.start_time is not None and self.partition_ran not in ("", profiling)


class ActionRow(Base):
    __tablename__ = "actions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)
    job_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True, index=True)
    kind: Mapped[str] = mapped_column(String(40))
    args: Mapped[str] = mapped_column(Text, default="{}")
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[int] = mapped_column(BigInteger)
    applied_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    status: Mapped[str] = mapped_column(String(20), default="planned")  # planned|applied|failed|dry-run|skipped
    error: Mapped[str] = mapped_column(Text, default="")


class CycleRow(Base):
    __tablename__ = "cycles"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[float] = mapped_column(Float)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    cpu_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    ok: Mapped[bool] = mapped_column(Boolean, default=True)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    error: Mapped[str] = mapped_column(Text, default="")
    jobs: Mapped[int] = mapped_column(Integer, default=0)
    actions: Mapped[int] = mapped_column(Integer, default=0)
    calls: Mapped[str] = mapped_column(Text, default="{}")
    recorded: Mapped[str | None] = mapped_column(Text, nullable=True)  # decider input + output, for replay


class HistoryRow(Base):
    """Finished jobs (from sacct, corrected with lucidd's own records): what the models learn from."""

    __tablename__ = "history"
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(Text, default="")
    user: Mapped[str] = mapped_column(Text, default="")
    partition: Mapped[str] = mapped_column(Text, default="")
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    submit_time: Mapped[int] = mapped_column(BigInteger)
    start_time: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    end_time: Mapped[int] = mapped_column(BigInteger, index=True)
    duration: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(40), default="")


# A run's first NVML reading may come before lucidd first saw its job (lucidd restarted while the
# job ran in profiling; node clocks a little ahead): this long before still counts as the job's own
PROFILE_BEFORE_SEEN_S = 300


class GpuProfileRow(Base):
    """What one run of a job did with its GPUs on one node, as the NVML sampler there measured it
    (profiler/nvml_sampler.py). The sampler writes; lucidd and lucidctl read."""

    __tablename__ = "gpu_profiles"
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    partition: Mapped[str] = mapped_column(String(200), primary_key=True)  # where the run was started
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    first_t: Mapped[int] = mapped_column(BigInteger)
    last_t: Mapped[int] = mapped_column(BigInteger, index=True)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    util_samples: Mapped[int] = mapped_column(Integer, default=0)
    gpu_util: Mapped[float | None] = mapped_column(Float, nullable=True)  # mean SM utilisation, %
    gmem_util: Mapped[float | None] = mapped_column(Float, nullable=True)  # mean memory read/write, %
    gmem_mib: Mapped[float | None] = mapped_column(Float, nullable=True)  # most memory on one GPU
    gpus: Mapped[str] = mapped_column(Text, default="")  # NVML indices, "0,1"


def _combine_gpu_profile(row: GpuProfileRow, old: GpuProfileRow) -> None:
    """`row`, a sampler's new figures for a run, made to keep what the run's stored `old` row knew."""
    row.first_t, row.last_t = min(row.first_t, old.first_t), max(row.last_t, old.last_t)
    row.gmem_mib = None if row.gmem_mib is None or old.gmem_mib is None else max(row.gmem_mib, old.gmem_mib)
    if (old.util_samples or 0) > row.util_samples:
        row.util_samples, row.gpu_util, row.gmem_util = old.util_samples, old.gpu_util, old.gmem_util
    row.samples = max(row.samples, old.samples or 0)
    row.gpus = ",".join(sorted({g for g in (row.gpus + "," + (old.gpus or "")).split(",") if g}, key=int))


def profile_incompleteness(rows, beats: dict) -> str:
    """"" when the rows of a run (its GpuProfileRows, one per node) hold every reading of it, else why
    not, from each node's heartbeat (`beats`: node -> GpuNodeRow), on that node's own clock:

    * the node's sampler has flushed, with nothing left unwritten, a reading taken after the run's
      last one (flushed_at > last_t). Else the last flush_s of readings, or all those after a sampler
      died or while the database was away, are missing: a review found 60 s of startup (1.5 GiB)
      taken for a run that went on to hold 20 GiB, and the job let share a GPU;
    * that sampler process was reading before the run's first reading (sampling_since < first_t):
      a sampler restarted during the run (or after it) may have lost what its predecessor had not
      written, and one started while the run was on missed its start.

    Judged again at every cycle, as the rest of the packing test: a job is given a GPU of its own
    while its profile is incomplete, and may be lowered to share once the next heartbeat (at most
    max(flush_s, 60 s) later) shows the flush. It is never held back for it."""
    for r in sorted(rows, key=lambda r: r.node):
        b = beats.get(r.node)
        if b is None or b.flushed_at is None or b.sampling_since is None:
            return (f"profile incomplete: the sampler on {r.node} has not said what it has written (none, or "
                    "one older than this lucidd)")
        if b.flushed_at <= r.last_t:
            return (f"profile incomplete: the sampler on {r.node} has not written since the run ended (its last "
                    f"whole write covers readings to {b.flushed_at}, the run's last reading is {r.last_t}, "
                    "node clock)")
        if b.sampling_since >= r.first_t:
            return (f"profile incomplete: the sampler on {r.node} (re)started at {b.sampling_since}, not before "
                    f"the run's first reading ({r.first_t}, node clock): readings may be missing")
    return ""


class GpuNodeRow(Base):
    """One GPU node as its NVML sampler last said, every `[sampler] flush_s` or at least every minute:
    its sampler's heartbeat, and its GPUs' memory (GPU packing takes the smallest of a partition's
    when `[packing] gpu_memory_mib` is 0). The sampler writes; lucidd and lucidctl read."""

    __tablename__ = "gpu_nodes"
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    seen_at: Mapped[int] = mapped_column(BigInteger)
    gpus: Mapped[int] = mapped_column(Integer, default=0)  # GPUs NVML lists
    gpu_memory_mib: Mapped[float | None] = mapped_column(Float, nullable=True)  # its smallest GPU's; None: unread
    gpu_name: Mapped[str] = mapped_column(Text, default="")
    driver: Mapped[str] = mapped_column(Text, default="")
    # What says whether a profile is whole, on the node's own clock (compared only with its own
    # rows' first_t / last_t, so immune to skew with the controller). flushed_at: the reading time of
    # the sampler's last flush that left nothing unwritten (every reading up to it is in gpu_profiles);
    # sampling_since: this sampler process's first reading (readings before it, by an earlier process
    # that may have died with figures unwritten, or by none, may be missing). None: an older sampler.
    flushed_at: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    sampling_since: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # the node's clock less the database server's at the heartbeat (s): lucidd's id-reuse filter puts
    # the controller's first_seen on the node's clock with it, and a node's heartbeat is pruned by
    # another node's sampler only through both's offsets. None: unknown (an older sampler, a dialect
    # without a clock query)
    clock_offset_s: Mapped[float | None] = mapped_column(Float, nullable=True)


_GPU_NODE_LATER = ("flushed_at", "sampling_since", "clock_offset_s")  # columns a gpu_nodes table may lack


class MetaRow(Base):
    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text, default="")


class ModelVersionRow(Base):
    __tablename__ = "model_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(40))
    version: Mapped[int] = mapped_column(Integer)
    at: Mapped[int] = mapped_column(BigInteger)
    decision: Mapped[str] = mapped_column(String(40), default="")
    detail: Mapped[str] = mapped_column(Text, default="{}")


def sqlite_file(url: str) -> str | None:
    """The file of a `sqlite:///PATH` URL; None for an in-memory or non-SQLite database."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        return url[len("sqlite:///"):].split("?", 1)[0]  # ?timeout=30 and the like are options, not the path
    return None


def _sqlite_dir(url: str):
    path = sqlite_file(url)
    if path is not None:
        d = os.path.dirname(path)
        if d:
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as exc:  # a file where the folder should be, no permission, /proc
                raise StoreError(f"database folder {d} cannot be made: {exc.strerror or exc}") from None


def _sqlite_read_only_connect(path: str):
    """A function that opens the SQLite database at `path` for reading only, for lucidctl.

    While lucidd runs it keeps a connection open, so the write-ahead log (`-wal`, `-shm`) is there,
    and `mode=ro` reads through it; SQLite reads a WAL database whose `-shm` it may not write (a
    user in the database's group, docs/deploy.md "Letting users run lucidctl") without the shared
    memory. With no `-wal`, no connection is open (lucidd stopped; its last close checkpointed and
    removed the log): `mode=ro` would then have to create the log files, which fails in a folder
    the user cannot write ("attempt to write a readonly database") and leaves them behind where
    it can (root), so the file is read as `immutable`, which creates nothing. An immutable read
    that lucidd's start overlaps can fail ("database disk image is malformed", once lucidd writes)
    or see rows from before: the engine keeps no connection (NullPool), so each read chooses
    again, `connect.immutable_reads` counts the immutable ones, and lucidctl reruns a command that
    failed on one once lucidd's log is there (admin_cli.cmd_live)."""
    import sqlite3
    from urllib.parse import quote

    def connect():
        wal = os.path.exists(path + "-wal")
        if not wal:
            connect.immutable_reads += 1
        return sqlite3.connect(f"file:{quote(os.path.abspath(path))}?{'mode=ro' if wal else 'immutable=1'}",
                               uri=True, timeout=30, check_same_thread=False)

    connect.immutable_reads = 0
    return connect


class Store:
    def __init__(self, url: str, connect_timeout_s: float = 5.0, create_dir: bool = True, read_only: bool = False):
        """`create_dir`: make a SQLite file's folder (False for a check, which writes nothing).
        `read_only`: lucidctl's view, which can change nothing (SQLite: the file opened read-only, see
        _sqlite_read_only_connect; PostgreSQL: every transaction read-only)."""
        self.url = url
        self.sqlite_reader = None  # read-only SQLite: the connect function (its immutable_reads)
        # (job id, its rows' node, first_t, last_t, samples) of profiles once found whole: a sampler
        # restarted since (an upgrade) cannot vouch for them any more, but its heartbeat already had
        # (a review: every profiled job still waiting lost its packing at a clean sampler restart)
        self._whole_profiles: set = set()
        kw = {"pool_pre_ping": True, "future": True}
        if url.startswith("sqlite"):
            if read_only and sqlite_file(url) is not None:
                from sqlalchemy.pool import NullPool

                kw["creator"] = self.sqlite_reader = _sqlite_read_only_connect(sqlite_file(url))
                kw["poolclass"] = NullPool
            elif create_dir:
                _sqlite_dir(url)
            kw["connect_args"] = {"timeout": 30}
        elif url.startswith("postgresql"):
            # A server that stops answering must not hang a cycle for good: TCP keepalives and a
            # user timeout end a connection to a host that went away (the statement timeouts are
            # set per connection below, so that the URL's own `options` stay as given).
            kw["connect_args"] = {"connect_timeout": int(max(1, connect_timeout_s)), "keepalives": 1,
                                  "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
                                  "tcp_user_timeout": 30000}
        try:
            self.engine = create_engine(url, **kw)
        except (SQLAlchemyError, ImportError, ValueError) as exc:
            raise StoreURLError(f"[database] url: {redact(url)}: {exc}") from None
        if url.startswith("sqlite"):
            @event.listens_for(self.engine, "connect")
            def _wal(dbapi_conn, _rec):  # readers (lucidctl) never block the daemon's writes
                cur = dbapi_conn.cursor()
                if not read_only:  # the database is WAL already: a reader has nothing to set
                    cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA busy_timeout=30000")
                cur.close()
        if url.startswith("postgresql"):
            # a cycle's statements take milliseconds; a timeout the URL sets itself is the admin's
            sets = [f"SET {name} = {ms}" for name, ms in (("statement_timeout", 30000), ("lock_timeout", 10000))
                    if name not in url]
            if read_only:
                sets.append("SET default_transaction_read_only = on")

            @event.listens_for(self.engine, "connect")
            def _timeouts(dbapi_conn, _rec):
                if not sets:
                    return
                autocommit = dbapi_conn.autocommit
                dbapi_conn.autocommit = True
                cur = dbapi_conn.cursor()
                for sql in sets:
                    cur.execute(sql)
                cur.close()
                dbapi_conn.autocommit = autocommit
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def schema_version(self) -> int | None:
        """The schema version the database records (None: no lucidd state, or unreadable)."""
        try:
            v = self.get_meta("schema_version")
        except StoreError:
            return None
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None

    def refuse_newer_schema(self) -> int | None:
        """The recorded schema version (None: no lucidd state yet); SchemaTooNew when a newer lucidd
        wrote the database: this code would write rows it cannot make right (an admin trial rolled
        back and every cycle failed as a "database outage"), and create() used to lower the mark."""
        found = self.schema_version() if self.has_state() else None
        if found is not None and found > SCHEMA_VERSION:
            raise SchemaTooNew(f"database {redact(self.url)} has schema {found}, written by a newer lucidd; this "
                               f"lucidd knows schema {SCHEMA_VERSION}: run the newer version, or restore the "
                               "database backup taken before the upgrade (docs/deploy.md, Upgrading)")
        return found

    def create(self):
        self.refuse_newer_schema()
        with self._guard("create tables"):
            Base.metadata.create_all(self.engine)
            self._upgrade()
            with self.session() as s:
                row = s.get(MetaRow, "schema_version")
                if row is None:
                    s.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
                elif row.value != str(SCHEMA_VERSION):
                    row.value = str(SCHEMA_VERSION)
        return self

    def _upgrade(self):
        """Columns added since schema 1, added to a database an older lucidd created (create_all
        makes missing tables only): `lent` with its server default, then any other the model has
        (schema 5's time_limit_s among them). Each is nullable or has a default, so old rows stay
        valid. The VARCHAR(200) columns of schema 2 and before become TEXT where the database
        enforces a length."""
        from sqlalchemy import inspect

        insp = inspect(self.engine)
        have = {c["name"] for c in insp.get_columns("jobs")}
        dialect = self.engine.dialect.name
        with self.engine.begin() as c:
            if "lent" not in have:
                c.exec_driver_sql("ALTER TABLE jobs ADD COLUMN lent BOOLEAN DEFAULT FALSE")
            elif dialect == "postgresql" and not next(col for col in insp.get_columns("jobs")
                                                      if col["name"] == "lent").get("default"):
                # schema 2-4 made it NOT NULL without a server default (SQLite cannot add one in place)
                c.exec_driver_sql("ALTER TABLE jobs ALTER COLUMN lent SET DEFAULT FALSE")
            # any other column the model has and the table lacks (schema 1's first cut had no
            # jobs.started_ahead_of, and every read of the jobs table failed after the "upgrade"): added
            # nullable, with the model's scalar default where it has one
            have_now = {t: {col["name"] for col in inspect(c).get_columns(t)} for t in insp.get_table_names()}
            prep = self.engine.dialect.identifier_preparer
            for table in Base.metadata.sorted_tables:
                if table.name not in have_now:
                    continue  # made whole by create_all
                for col in table.columns:
                    if col.name in have_now[table.name] or col.primary_key:
                        continue
                    default = ""
                    # MySQL takes no plain DEFAULT on TEXT (error 1101): the model writes the value there
                    no_default = dialect == "mysql" and isinstance(col.type, Text)
                    if col.default is not None and getattr(col.default, "is_scalar", False) and not no_default:
                        v = col.default.arg
                        default = (f" DEFAULT {'TRUE' if v else 'FALSE'}" if isinstance(v, bool) else
                                   f" DEFAULT {v}" if isinstance(v, (int, float)) else
                                   " DEFAULT '" + str(v).replace("'", "''") + "'")
                    c.exec_driver_sql(f"ALTER TABLE {prep.quote(table.name)} ADD COLUMN {prep.quote(col.name)} "
                                      f"{col.type.compile(dialect=self.engine.dialect)}{default}")
            if dialect in ("postgresql", "mysql", "mariadb"):  # SQLite does not enforce a length
                for table, cols in _WIDENED.items():
                    for col in insp.get_columns(table):
                        if col["name"] in cols and getattr(col["type"], "length", None):
                            name = self.engine.dialect.identifier_preparer.quote(col["name"])
                            if dialect == "postgresql":
                                c.exec_driver_sql(f"ALTER TABLE {table} ALTER COLUMN {name} TYPE TEXT")
                            else:
                                c.exec_driver_sql(f"ALTER TABLE {table} MODIFY {name} TEXT"
                                                  f"{'' if col['nullable'] else ' NOT NULL'}")

    @contextmanager
    def _guard(self, what):
        try:
            yield
        except SQLAlchemyError as exc:
            msg = " ".join(str(exc.orig if getattr(exc, "orig", None) is not None else exc).split())[:300]
            raise StoreError(f"database {redact(self.url)} unavailable ({what}): {msg}") from None

    @contextmanager
    def session(self):
        with self._guard("session"):
            with self._sessions() as s:
                with s.begin():
                    yield s

    def hold_instance_lock(self) -> bool:
        """Take the lock that lets one lucidd (live or shadow) run on this database, for the life of
        the process (released by release_instance_lock or the process's end). False when another
        holds it: two live lucidd on one database acted on the same jobs, overwrote each other's
        records, and one's stop gave the other's inbox away (an admin trial). SQLite: a lock on a
        file beside the database; PostgreSQL: a session advisory lock on a connection kept open
        (a database restart ends it: the daemon checks it each cycle, instance_lock_alive, and takes
        it again). Other databases: not guarded."""
        path = sqlite_file(self.url)
        if path is not None:
            import fcntl

            try:
                f = open(path + ".lock", "a+")
            except OSError as exc:
                raise StoreError(f"lock file {path}.lock cannot be opened: {exc.strerror or exc}") from None
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                return False
            self._instance_lock, self._lock_kind = f, "file"
            return True
        if self.url.startswith("postgresql"):
            with self._guard("lock"):
                conn = self.engine.connect()
                try:
                    # per schema: lucidd setups that share a database in schemas of their own are apart
                    got = bool(conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({_INSTANCE_LOCK_KEY}, "
                                                    "hashtext(current_schema()))").scalar())
                    conn.commit()  # the lock is the session's: no transaction is left open with it
                except Exception:
                    conn.invalidate()
                    conn.close()
                    raise
            if not got:
                conn.close()
                return False
            self._instance_lock, self._lock_kind = conn, "session"
            return True
        return True

    def file_replaced(self) -> str | None:
        """SQLite: why the file at the database's path is no longer the one lucidd writes to (deleted,
        or replaced by another), else None; the first call notes the file. A deleted file went on
        taking lucidd's writes unseen, `lucidctl status` said there was no database, and everything
        lucidd knew was gone at its next start (a review). Other databases: None."""
        path = sqlite_file(self.url)
        if path is None:
            return None
        try:
            st = os.stat(path)
            ident = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            ident = None
        except OSError:  # not readable now (a full or failing disk): the database's own errors say it
            return None
        known = getattr(self, "_file_ident", None)
        if known is None:
            self._file_ident = ident
            return None
        if ident is None:
            return f"the database file {path} was deleted while lucidd ran"
        if ident != known:
            return f"the database file {path} was replaced while lucidd ran"
        return None

    def instance_lock_alive(self) -> bool:
        """Whether the lock hold_instance_lock took is still held: a PostgreSQL restart (or a cut
        connection) ends the session and its lock, while lucidd's pool reconnects unnoticed (a
        review). True where nothing was ever guarded."""
        kind = getattr(self, "_lock_kind", None)
        lock = getattr(self, "_instance_lock", None)
        if kind is None:
            return True
        if lock is None:
            return False
        if kind == "session":
            try:
                lock.exec_driver_sql("SELECT 1")
                lock.commit()
            except Exception:  # noqa: BLE001 - any failure: the session, and the lock, may be gone
                return False
        return True

    def release_instance_lock(self):
        lock, self._instance_lock = getattr(self, "_instance_lock", None), None
        if lock is None:
            return
        try:
            if hasattr(lock, "invalidate"):
                # unlocked first: the server ends an invalidated connection's session (and its lock) a
                # moment after the client closes it, and a lucidd started at once found the lock still
                # held (seen in CI on a loaded machine)
                try:
                    lock.exec_driver_sql(f"SELECT pg_advisory_unlock({_INSTANCE_LOCK_KEY}, hashtext(current_schema()))")
                    lock.commit()
                except Exception:  # noqa: BLE001 - a session already gone has released its lock too
                    pass
                # closed, a pooled connection would go back to the pool with its session, and the lock
                lock.invalidate()
            lock.close()  # a file's lock goes with it
        except Exception:  # noqa: BLE001 - a connection already gone has released its lock too
            pass

    def has_state(self) -> bool:
        """Whether lucidd has made its tables here. False for a database it never used (and, for
        SQLite, without creating the file by looking); StoreError when it cannot be reached."""
        from sqlalchemy import inspect

        path = sqlite_file(self.url)
        if path is not None and not os.path.exists(path):
            return False
        with self._guard("inspect"):
            if not inspect(self.engine).has_table(MetaRow.__tablename__):
                return False
        return self.get_meta("schema_version") is not None

    def ping(self):
        with self._guard("ping"):
            with self.engine.connect() as c:
                c.exec_driver_sql("SELECT 1")

    # -- meta ---------------------------------------------------------------------------------
    def get_meta(self, key, default=None):
        with self.session() as s:
            row = s.get(MetaRow, key)
            return default if row is None else row.value

    def set_meta(self, key, value):
        with self.session() as s:
            row = s.get(MetaRow, key)
            if row is None:
                s.add(MetaRow(key=key, value=str(value)))
            else:
                row.value = str(value)

    # -- jobs ---------------------------------------------------------------------------------
    def jobs(self, ids=None) -> dict:
        with self.session() as s:
            q = select(JobRow)
            if ids is not None:
                ids = list(ids)
                if not ids:
                    return {}
                rows = []
                for k in range(0, len(ids), 900):  # keep IN lists inside every backend's limits
                    rows.extend(s.scalars(q.where(JobRow.job_id.in_(ids[k:k + 900]))))
                return {r.job_id: r for r in rows}
            return {r.job_id: r for r in s.scalars(q)}

    def open_jobs(self) -> dict:
        with self.session() as s:
            return {r.job_id: r for r in s.scalars(select(JobRow).where(JobRow.phase != "done"))}

    def started_jobs(self, since: int) -> list:
        with self.session() as s:
            return list(s.scalars(select(JobRow).where(JobRow.start_time >= int(since),
                                                       JobRow.started_ahead_of.is_not(None))))

    def job(self, job_id) -> JobRow | None:
        with self.session() as s:
            return s.get(JobRow, int(job_id))

    def save_jobs(self, rows, new_ids=None):
        """Insert or update job rows: bulk INSERT the new ones, bulk UPDATE by primary key the rest
        (an ORM merge per row cost ~2 ms: 10 s per cycle for a 10,000-job queue). Which rows are new
        is asked of the database, not trusted from the caller (`new_ids` is accepted for callers
        that know, and only narrows nothing)."""
        cols = [c.key for c in JobRow.__table__.columns]
        # a row built in Python has None where its column default was never applied
        defaults = {c.key: c.default.arg for c in JobRow.__table__.columns
                    if not c.nullable and c.default is not None and not callable(c.default.arg)}
        rows = {r.job_id: r for r in rows}  # the last copy of a job wins
        fresh, old = [], []
        with self.session() as s:
            ids = list(rows)
            existing = set()
            for k in range(0, len(ids), 900):
                existing.update(s.scalars(select(JobRow.job_id).where(JobRow.job_id.in_(ids[k:k + 900]))))
            for jid, r in rows.items():
                d = {c: getattr(r, c) for c in cols}
                for c, v in defaults.items():
                    if d[c] is None:
                        d[c] = v
                (old if jid in existing else fresh).append(d)
            if fresh:
                s.execute(insert(JobRow), fresh)
            if old:
                s.execute(update(JobRow), old)

    # -- actions ------------------------------------------------------------------------------
    def _keys_where(self, keys, *where) -> set:
        """The keys of `keys` with an action that meets `where` (900 at a time: SQLite's limit on one
        statement's parameters)."""
        keys = list(keys)
        out = set()
        with self.session() as s:
            for k in range(0, len(keys), 900):
                out.update(s.scalars(select(ActionRow.key).where(ActionRow.key.in_(keys[k:k + 900]), *where)))
        return out

    def applied_keys(self, keys) -> set:
        return self._keys_where(keys, ActionRow.status == "applied")

    def planned_since(self, keys, since) -> set:
        """The keys of `keys` with an action left planned (written, never marked sent or failed) at or
        after `since`: within one process an action is marked as soon as its call returns, so such a
        row is a lucidd's that died during the call, whose command may still reach Slurm."""
        return self._keys_where(keys, ActionRow.status == "planned", ActionRow.created_at >= int(since))

    def signals_sent(self, job_ids) -> dict:
        """(job_id, restart count, Tprof) -> when, of the warning signals sent to these jobs (applied,
        or a shadow's dry-run ones: its virtual runs wait for them as a live run would). A signal
        left planned is counted as sent: written before the send and marked after it, it stays
        planned only when the database (or lucidd) failed in between, most likely after the send,
        and sent twice it made a job checkpoint, or requeue itself, twice (a review)."""
        out = {}
        ids = [int(j) for j in job_ids]
        with self.session() as s:
            for k in range(0, len(ids), 900):
                rows = s.execute(select(ActionRow.job_id, ActionRow.args, ActionRow.applied_at, ActionRow.created_at)
                                 .where(ActionRow.kind == "signal", ActionRow.job_id.in_(ids[k:k + 900]),
                                        ActionRow.status.in_(("applied", "dry-run", "planned"))))
                for job_id, args, applied_at, created_at in rows:
                    try:
                        a = json.loads(args or "{}")
                        out[(int(job_id), int(a["restart"]), int(a["tprof"]))] = int(applied_at or created_at)
                    except (ValueError, KeyError, TypeError):
                        continue
        return out

    def record_action(self, key, job_id, kind, args, reason, now, status, error=""):
        with self.session() as s:
            row = s.scalars(select(ActionRow).where(ActionRow.key == key)).first()
            if row is None:
                row = ActionRow(key=key, job_id=job_id, kind=kind, args=json.dumps(args, default=str),
                                reason=reason, created_at=int(now))
                s.add(row)
            row.status = status
            row.error = error
            row.reason = reason
            if status == "applied":
                row.applied_at = int(now)

    def record_actions(self, items, now, status, error=""):
        """Bulk form of record_action for one batch: items = [(key, job_id, kind, args, reason)]."""
        if not items:
            return
        with self.session() as s:
            keys = [it[0] for it in items]
            existing = {}
            for k in range(0, len(keys), 900):
                for row in s.scalars(select(ActionRow).where(ActionRow.key.in_(keys[k:k + 900]))):
                    existing[row.key] = row
            for key, job_id, kind, args, reason in items:
                row = existing.get(key)
                if row is None:
                    row = ActionRow(key=key, job_id=job_id, kind=kind, args=json.dumps(args, default=str),
                                    reason=reason, created_at=int(now))
                    s.add(row)
                    existing[key] = row
                row.status, row.error, row.reason = status, error, reason
                if status == "applied":
                    row.applied_at = int(now)

    def settle_unapplied(self, job_id, kind, now, note) -> int:
        """Mark a job's planned or failed actions of one kind as applied, when Slurm shows they were
        made (lucidd died between the call and its record, or the call reported an error for a change
        it made). Returns how many."""
        with self.session() as s:
            rows = list(s.scalars(select(ActionRow).where(ActionRow.job_id == int(job_id), ActionRow.kind == kind,
                                                          ActionRow.status.in_(("planned", "failed")))))
            for row in rows:
                row.status, row.applied_at, row.error = "applied", int(now), note
            return len(rows)

    def actions_for(self, job_id, since=None) -> list:
        """The actions on a job id, oldest first; with `since` (the job's first_seen) only those made at or
        after it: an earlier job of the same id (Slurm's ids wrapped, or slurmctld lost its state and gave
        them again) is not mixed into this one's story (a review saw another job's requeue in explain)."""
        q = select(ActionRow).where(ActionRow.job_id == int(job_id))
        if since is not None:
            q = q.where(ActionRow.created_at >= int(since))
        with self.session() as s:
            return list(s.scalars(q.order_by(ActionRow.id)))

    def recent_actions(self, limit=50) -> list:
        return [a for a, _user in self.action_log(limit=limit)]

    def action_log(self, since=None, kinds=None, statuses=None, users=None, limit=200) -> list:
        """`lucidctl actions`: [(ActionRow, the job's user or None)], newest first, at most `limit`,
        made at or after `since` (Unix s) and of the given kinds, statuses and users (None: any)."""
        # the job the action was for, not a later one that got its id after Slurm's ids wrapped
        q = select(ActionRow, JobRow.user).outerjoin(
            JobRow, (JobRow.job_id == ActionRow.job_id) & (ActionRow.created_at >= JobRow.first_seen))
        if since is not None:
            q = q.where(ActionRow.created_at >= int(since))
        if kinds:
            q = q.where(ActionRow.kind.in_(list(kinds)))
        if statuses:
            q = q.where(ActionRow.status.in_(list(statuses)))
        if users:
            q = q.where(JobRow.user.in_(list(users)))
        with self.session() as s:
            return [(a, u) for a, u in s.execute(q.order_by(ActionRow.id.desc()).limit(int(limit)))]

    def record_counts(self) -> dict:
        """What lucidd keeps (`lucidctl status`' `records`): rows of jobs (and of those, ended ones),
        actions and cycles, and when the oldest ended job kept ended (None: none)."""
        with self.session() as s:
            ended = s.execute(select(func.count(), func.min(func.coalesce(JobRow.end_time, JobRow.first_seen)))
                              .where(JobRow.phase == "done")).one()
            return {"jobs": int(s.scalar(select(func.count()).select_from(JobRow)) or 0),
                    "ended_jobs": int(ended[0] or 0), "oldest_ended_job_end": ended[1],
                    "actions": int(s.scalar(select(func.count()).select_from(ActionRow)) or 0),
                    "cycles": int(s.scalar(select(func.count()).select_from(CycleRow)) or 0)}

    def prune_ended(self, jobs_before: int, cycles_before: int, limit: int = 20000) -> tuple[int, int]:
        """Forget what is old: at most `limit` records of jobs lucidd closed (phase done) that ended
        before `jobs_before`, with their actions (and actions of no job made before then), and at most
        `limit` reconcile cycles that started before `cycles_before`. Returns (jobs, cycles) deleted:
        `limit` means there may be more (a first prune on a database kept for years), and the
        caller comes back sooner. Open jobs and their actions are never touched."""
        jobs = cycles = 0
        with self.session() as s:
            ended = func.coalesce(JobRow.end_time, JobRow.first_seen)
            ids = list(s.scalars(select(JobRow.job_id).where(JobRow.phase == "done", ended < int(jobs_before))
                                 .limit(int(limit))))
            for k in range(0, len(ids), 900):
                chunk = ids[k:k + 900]
                s.execute(delete(ActionRow).where(ActionRow.job_id.in_(chunk)))
                jobs += s.execute(delete(JobRow).where(JobRow.job_id.in_(chunk), JobRow.phase == "done")).rowcount
            s.execute(delete(ActionRow).where(ActionRow.job_id.is_(None), ActionRow.created_at < int(jobs_before)))
            # oldest first, by the primary key: the subquery stops at `limit` rows
            old = select(CycleRow.id).where(CycleRow.started_at < float(cycles_before)).order_by(CycleRow.id)
            cycles = s.execute(delete(CycleRow).where(CycleRow.id.in_(old.limit(int(limit))))).rowcount
        return jobs, cycles

    # -- cycles -------------------------------------------------------------------------------
    def add_cycle(self, row: CycleRow, keep_recorded: int):
        with self.session() as s:
            s.add(row)
            s.flush()
            if keep_recorded >= 0:
                cutoff = row.id - keep_recorded
                s.execute(CycleRow.__table__.update().where(CycleRow.id <= cutoff, CycleRow.recorded.is_not(None))
                          .values(recorded=None))
            return row.id

    def last_cycles(self, n=20) -> list:
        with self.session() as s:
            return list(s.scalars(select(CycleRow).order_by(CycleRow.id.desc()).limit(n)))

    def recorded_cycles(self, n=1000) -> list:
        with self.session() as s:
            return list(s.scalars(select(CycleRow).where(CycleRow.recorded.is_not(None))
                                  .order_by(CycleRow.id.desc()).limit(n)))

    # -- history ------------------------------------------------------------------------------
    def add_history(self, rows):
        """Insert or replace finished jobs by job id (the last row of a job wins). In batches: one
        ORM merge per row (a SELECT each) took 0.4 ms a row, minutes for the first read of a large
        cluster's two months of sacct (bench/bench_history.py)."""
        latest = {int(r["job_id"]): r for r in rows}
        items = list(latest.values())
        with self.session() as s:
            for k in range(0, len(items), 900):  # keep IN lists inside every backend's limits
                chunk = items[k:k + 900]
                s.execute(delete(HistoryRow).where(HistoryRow.job_id.in_([int(r["job_id"]) for r in chunk])))
                s.execute(insert(HistoryRow), chunk)

    def history(self, since: int) -> list:
        """Finished jobs that ended at `since` or later, as read-only rows with the columns as
        attributes (plain rows, not ORM objects: a third of the time for 200,000 of them)."""
        with self.session() as s:
            return list(s.execute(select(HistoryRow.__table__).where(HistoryRow.end_time >= int(since))))

    def history_fingerprint(self) -> tuple:
        """(rows, newest end, total duration) of the history table: one cheap aggregate that changes
        whenever add_history or prune_history changes what history() returns, so a reader can keep
        its copy until then."""
        with self.session() as s:
            n, newest, total = s.execute(select(func.count(), func.max(HistoryRow.end_time),
                                                func.sum(HistoryRow.duration)).select_from(HistoryRow)).one()
            return int(n or 0), int(newest or 0), int(total or 0)

    def history_count(self) -> int:
        with self.session() as s:
            return int(s.scalar(select(func.count()).select_from(HistoryRow)) or 0)

    def prune_history(self, before: int):
        with self.session() as s:
            s.execute(delete(HistoryRow).where(HistoryRow.end_time < int(before)))

    # -- GPU profiles (written by the NVML samplers on the GPU nodes) ------------------------------
    def create_gpu_profiles(self):
        """The samplers' two tables, made if missing. Not `create()`: lucidd on the controller owns
        the schema (its upgrades and version); a sampler on each GPU node must not run them."""
        with self._guard("create gpu_profiles"):
            GpuProfileRow.__table__.create(self.engine, checkfirst=True)
            GpuNodeRow.__table__.create(self.engine, checkfirst=True)
        return self

    def _gpu_node_columns(self, refresh: bool = False) -> set:
        """The columns gpu_nodes has: one a sampler made before 2026-12 lacks _GPU_NODE_LATER until
        lucidd upgrades it (a sampler does not alter lucidd's schema). Read again while any is missing."""
        from sqlalchemy import inspect

        have = getattr(self, "_gpu_node_cols", None)
        if have is None or refresh or not have.issuperset(_GPU_NODE_LATER):
            have = {c["name"] for c in inspect(self.engine).get_columns(GpuNodeRow.__tablename__)}
            self._gpu_node_cols = have
        return have

    def save_gpu_node(self, node: str, seen_at: int, gpus: int, gpu_memory_mib, gpu_name: str = "", driver: str = "",
                      flushed_at: int | None = None, sampling_since: int | None = None,
                      clock_offset_s: float | None = None, coverage: bool = True) -> bool:
        """Upsert a sampler's heartbeat and its node's GPUs. Returns False when the table lacks the
        columns of flushed_at etc. (written without them: lucidd then trusts no profile of the node).
        `coverage=False` (`lucidd-sampler --once`, a process beside the service): flushed_at and
        sampling_since are left as the service wrote them (its own would make every run before it
        look incomplete, and a reading it never took look written)."""
        t = GpuNodeRow.__table__
        vals = dict(seen_at=int(seen_at), gpus=int(gpus),
                    gpu_memory_mib=None if gpu_memory_mib is None else float(gpu_memory_mib),
                    gpu_name=gpu_name or "", driver=driver or "",
                    flushed_at=None if flushed_at is None else int(flushed_at),
                    sampling_since=None if sampling_since is None else int(sampling_since),
                    clock_offset_s=None if clock_offset_s is None else float(clock_offset_s))
        with self._guard("read gpu_nodes"):
            have = self._gpu_node_columns()
        vals = {k: v for k, v in vals.items() if k in have and (coverage or k not in ("flushed_at", "sampling_since"))}
        try:
            with self.session() as s:
                done = s.execute(update(t).where(t.c.node == node[:200]).values(**vals)).rowcount
                if not done:
                    s.execute(insert(t).values(node=node[:200], **vals))
        except StoreError:
            # the columns are read again at the next try: a backup restored from before they were
            # added (docs/deploy.md, going back) failed every heartbeat until a restart (a review)
            self._gpu_node_cols = None
            raise
        return have.issuperset(_GPU_NODE_LATER)

    def gpu_nodes(self) -> dict:
        """node -> GpuNodeRow, as the samplers last said; empty on a database no sampler of 28 November
        2026 or later has written to (the table is missing until one does, or lucidd upgrades it).
        A table without the later columns gives them as None."""
        from sqlalchemy import inspect

        with self._guard("read gpu_nodes"):
            if not inspect(self.engine).has_table(GpuNodeRow.__tablename__):
                return {}
            have = self._gpu_node_columns()
        t = GpuNodeRow.__table__
        cols = [c for c in t.columns if c.name in have]
        try:
            with self.session() as s:
                rows = [GpuNodeRow(**dict(r._mapping)) for r in s.execute(select(*cols))]
        except StoreError:
            self._gpu_node_cols = None  # (read again at the next try: a restored backup lacks some)
            raise
        return {r.node: r for r in rows}

    def db_time(self) -> float | None:
        """The database server's clock (epoch seconds), None where this dialect has no query for it:
        the one clock the samplers and lucidd all reach (GpuNodeRow.clock_offset_s)."""
        q = {"sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
             "postgresql": "SELECT EXTRACT(EPOCH FROM clock_timestamp())",
             "mysql": "SELECT UNIX_TIMESTAMP(NOW(6))", "mariadb": "SELECT UNIX_TIMESTAMP(NOW(6))"}.get(
                 self.engine.dialect.name)
        if q is None:
            return None
        with self._guard("read the database's clock"):
            with self.engine.connect() as c:
                v = c.exec_driver_sql(q).scalar()
        return None if v is None else float(v)

    def save_gpu_profiles(self, profiles):
        """Upsert the sampler's per-run figures (profiler.nvml_sampler.JobGpuProfile), combined with
        the run's row when it has one: the sampler forgets a run it has not seen for a while (a CPU
        phase, a gap between two scripts of one job) and starts it afresh when it comes back, so a
        plain overwrite lost the memory peak packing relies on (a review: 20,480 MiB replaced by
        2,048 MiB, and the job let share a 24 GiB GPU). The peak is the larger of the two (unknown if
        either is), the utilisation figures those of the longer record, the GPUs both's. Written again
        with the same or newer figures, a row stays as a plain upsert leaves it."""
        with self.session() as s:
            for p in profiles:
                row = GpuProfileRow(
                    job_id=int(p.job_id), partition=p.partition[:200], node=p.node[:200], first_t=int(p.first_t),
                    last_t=int(p.last_t), samples=int(p.samples), util_samples=int(p.util_samples),
                    gpu_util=p.gpu_util, gmem_util=p.gmem_util, gmem_mib=getattr(p, "gmem_mib", p.gmem_max_mib),
                    gpus=",".join(str(i) for i in sorted(p.gpus)))
                old = s.get(GpuProfileRow, (row.job_id, row.partition, row.node))
                if old is not None:
                    _combine_gpu_profile(row, old)
                s.merge(row)

    def gpu_profiles(self, job_id) -> list:
        with self.session() as s:
            return list(s.scalars(select(GpuProfileRow).where(GpuProfileRow.job_id == int(job_id))
                                  .order_by(GpuProfileRow.first_t, GpuProfileRow.node)))

    def profiling_gpu_profiles(self, job_ids, partition: str, since: dict | None = None,
                               now: float | None = None, runs: dict | None = None) -> dict:
        """job_id -> the NVML figures of its run in `partition` (the profiling partition): the row
        with the most utilisation readings when it ran on several nodes or restarted there, with the
        most memory any of its rows held (and its rows of no partition on the same nodes).

        `since`: job_id -> when lucidd first saw that job (its record's first_seen). A job id Slurm
        handed out again (slurmctld lost its state, or ids wrapped) keeps the rows of the earlier job
        of that id; rows that ended before it, or began well before it (an earlier job's row the new
        job's readings were added to, on the same node), are not its own and are left out. `since` is
        the controller's clock, the rows the node's: with `now` (the controller's clock now) and the
        node's heartbeat's clock_offset_s, it is put on the node's clock first (a node 5 minutes
        behind lost every profile); without either it is compared as it is.

        Each profile returned has `incomplete`: "" when every reading of the run is in its rows, else
        why not (profile_incompleteness); binder.live.share_score lets no such job share. A profile
        found whole is remembered in this Store, while its rows and `runs` (job_id -> Slurm's restart
        count) are unchanged: a job run again in profiling whose readings were all lost (a database
        away, then a sampler restart) leaves its rows as they were, but not its restart count."""
        ids = [int(j) for j in job_ids]
        out, rows = {}, {}
        if not ids:
            return out
        since = since or {}
        # the heartbeats first: a flush that a heartbeat read here reports is in the rows read after it
        beats = self.gpu_nodes()
        shift = {}  # node -> seconds its clock is ahead of the controller's
        if since and now is not None and any(b.clock_offset_s is not None for b in beats.values()):
            db_now = self.db_time()
            if db_now is not None:
                ours = float(now) - db_now
                shift = {n: b.clock_offset_s - ours for n, b in beats.items() if b.clock_offset_s is not None}
        with self.session() as s:
            for k in range(0, len(ids), 500):
                for row in s.scalars(select(GpuProfileRow).where(GpuProfileRow.job_id.in_(ids[k:k + 500]),
                                                                 GpuProfileRow.partition.in_((partition, "")))):
                    seen = since.get(row.job_id)
                    if seen:
                        seen = seen + shift.get(row.node, 0.0)
                    if seen and (row.last_t < seen or row.first_t < seen - PROFILE_BEFORE_SEEN_S):
                        continue
                    rows.setdefault(row.job_id, []).append(row)
                s.expunge_all()  # detached: what is set below is never written back
        for job_id, found in rows.items():
            named = [r for r in found if r.partition == partition]
            if not named:
                continue
            # a row of no partition on a node of the run: the job's processes seen before any that
            # names the partition (a helper with a cleared environment); its memory counts too
            nodes = {r.node for r in named}
            unnamed = [r for r in found if r.partition == "" and r.node in nodes]
            best = max(named, key=lambda r: r.util_samples or 0)  # the first of the most, in row order
            # the memory of every row: a run restarted on another node held as much there (a review
            # found a 20,480 MiB row passed over for a longer one of 3,000 MiB); unknown in one, unknown
            mems = [r.gmem_mib for r in named + unnamed]
            best.gmem_mib = None if any(m is None for m in mems) else max(mems)
            whole = (job_id, (runs or {}).get(job_id),
                     tuple(sorted((r.node, r.first_t, r.last_t, r.samples) for r in named + unnamed)))
            best.incomplete = "" if whole in self._whole_profiles else profile_incompleteness(named + unnamed, beats)
            if not best.incomplete:
                if len(self._whole_profiles) > 100_000:
                    self._whole_profiles.clear()  # (bounded: judged again from the heartbeats)
                self._whole_profiles.add(whole)
            out[job_id] = best
        return out

    def gpu_sampler_nodes(self) -> dict:
        """node -> the last reading any of its runs has (the samplers' health, for `lucidctl status`)."""
        with self.session() as s:
            return {n: int(t) for n, t in s.execute(select(GpuProfileRow.node, func.max(GpuProfileRow.last_t))
                                                    .group_by(GpuProfileRow.node))}

    def prune_gpu_profiles(self, before: int, node: str | None = None, keep_s: float | None = None) -> None:
        """Rows of runs, and heartbeats of nodes, not seen since `before` (a node taken out of the
        cluster; one whose sampler has been stopped that long has its GPU memory unknown again).

        `node`: the sampler's own node, whose clock `before` is on. Every sampler prunes, each with its
        own clock, so each compares only like with like (a node a day ahead wiped every node's rows):
        its own rows by `before`; another node's rows by that node's last heartbeat less `keep_s`
        (both on that node's clock); another node's heartbeat only where both heartbeats give their
        clock's offset to the database's (else it stays: `lucidctl status` names it silent).
        Without `node`: every row and heartbeat by `before` (one clock for all: tests, tools)."""
        t = GpuProfileRow
        with self.session() as s:
            if node is None:
                s.execute(delete(t).where(t.last_t < int(before)))
                s.execute(delete(GpuNodeRow).where(GpuNodeRow.seen_at < int(before)))
                return
            s.execute(delete(t).where(t.node == node, t.last_t < int(before)))
        beats = self.gpu_nodes()
        me = beats.get(node)
        with self.session() as s:
            # rows of a node that has written no heartbeat (a sampler from before heartbeats, a node
            # gone before its upgrade): by this sampler's clock, as before, or never (a review)
            s.execute(delete(t).where(t.node.not_in(list(beats) or [""]), t.last_t < int(before)))
            for other, b in beats.items():
                if other == node:
                    continue
                if keep_s is not None:
                    s.execute(delete(t).where(t.node == other, t.last_t < int(b.seen_at - keep_s)))
                if me is not None and me.clock_offset_s is not None and b.clock_offset_s is not None:
                    gone = b.seen_at - b.clock_offset_s < int(before) - me.clock_offset_s
                else:  # an offset unknown (an older sampler): by this clock, with keep_s more to spare
                    gone = b.seen_at < int(before) - (keep_s or 0)
                if gone:
                    s.execute(delete(GpuNodeRow).where(GpuNodeRow.node == other))
                    s.execute(delete(t).where(t.node == other))

    def add_model_version(self, kind, version, at, decision, detail):
        with self.session() as s:
            s.add(ModelVersionRow(kind=kind, version=int(version or 0), at=int(at), decision=decision,
                                  detail=json.dumps(detail, default=str)))

    def model_versions(self, limit=20) -> list:
        with self.session() as s:
            return list(s.scalars(select(ModelVersionRow).order_by(ModelVersionRow.id.desc()).limit(limit)))

    def forget_shadow_decisions(self) -> int:
        """Drop what a shadow (`--dry-run`) lucidd recorded and never applied: every job record not
        yet done and every dry-run action. A live lucidd starting on this database then adopts
        those jobs as Slurm shows them. Returns the number of job records dropped."""
        with self.session() as s:
            n = s.execute(delete(JobRow).where(JobRow.phase != "done")).rowcount
            s.execute(delete(ActionRow).where(ActionRow.status == "dry-run"))
            return int(n or 0)


class ReadOnlyStore:
    """lucidd's database as a check run sees it (`lucidd --once --dry-run`): reads go to the
    database, writes are dropped. A check must leave nothing a live lucidd would act on: a
    check's "admitted to profiling" recorded in the live database once kept jobs in the DOWN
    inbox, the live daemon believing they were on their way."""

    WRITES = frozenset({"create", "set_meta", "save_jobs", "record_action", "record_actions", "add_cycle",
                        "add_history", "prune_history", "create_gpu_profiles", "save_gpu_profiles",
                        "save_gpu_node", "prune_gpu_profiles", "add_model_version", "forget_shadow_decisions",
                        "settle_unapplied", "prune_ended"})

    def __init__(self, store: Store):
        self._store = store

    def prune_ended(self, *_args, **_kw) -> tuple[int, int]:
        return 0, 0

    def __getattr__(self, name):  # (only for names the class does not define)
        if name in self.WRITES:
            return _dropped
        return getattr(self._store, name)


def _dropped(*_args, **_kw):
    return None


def redact(url: str) -> str:
    """A database URL without its password, for messages and logs."""
    url = re.sub(r"(?i)([?&](?:password|passwd|pwd)=)[^&]*", r"\1***", url)
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        if ":" in creds:
            creds = creds.split(":", 1)[0] + ":***"
        return f"{scheme}://{creds}@{host}"
    return url
