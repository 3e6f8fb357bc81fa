"""lucidd's state (lucidd/live/store.py) on a temporary SQLite file, and on PostgreSQL when
LUCIDD_TEST_PG_URL is set (the test cluster's: `scripts/testcluster.sh env`).

Every PostgreSQL test runs in a schema of its own, dropped afterwards. With CI=true the
PostgreSQL variant must run: an unset LUCIDD_TEST_PG_URL fails instead of skipping.
"""

import os
import uuid

import pytest

from lucidd.live.store import (SCHEMA_VERSION, CycleRow, JobRow, Store, StoreError, redact)

IN_CI = os.environ.get("CI", "").lower() == "true"


def _pg_url(request) -> str:
    """LUCIDD_TEST_PG_URL, or the test cluster's PostgreSQL (started by the session fixture)."""
    url = os.environ.get("LUCIDD_TEST_PG_URL", "")
    if url:
        return url
    try:
        return request.getfixturevalue("slurm_cluster").get("LUCIDD_TEST_PG_URL", "")
    except pytest.skip.Exception as exc:
        if IN_CI:
            pytest.fail(f"CI=true but the test cluster's PostgreSQL is not available ({exc}): "
                        "the PostgreSQL store tests must run")
        raise


def _pg_store(request):
    from sqlalchemy import create_engine, text

    PG_URL = _pg_url(request)
    if not PG_URL:
        pytest.fail("the test cluster gave no LUCIDD_TEST_PG_URL")
    schema = f"lucidd_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL, future=True)
    with admin.begin() as c:  # no skip on failure: with the URL set, an unreachable server is an error
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in PG_URL else "?"
    store = Store(f"{PG_URL}{sep}options=-csearch_path%3D{schema}")
    return store, (admin, schema)


def _pg_cleanup(store, handle):
    from sqlalchemy import text

    admin, schema = handle
    store.engine.dispose()
    with admin.begin() as c:
        c.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
        yield s.create()
        s.engine.dispose()
    else:
        s, handle = _pg_store(request)
        try:
            yield s.create()
        finally:
            _pg_cleanup(s, handle)


def job(job_id, **kw):
    base = dict(job_id=job_id, first_seen=1000, original_submit=990, requested_partition=None,
                target_partition="main", name=f"j{job_id}", user="alice", account="acct", gpus=1)
    base.update(kw)
    return JobRow(**base)


# ----- create / meta ----------------------------------------------------------------------------

def test_create_is_idempotent_and_records_the_schema_version(store):
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    store.create()
    store.create()
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    store.ping()


def test_a_database_of_schema_1_gains_the_lent_column(store):
    """An older lucidd's database (no jobs.lent) is upgraded in place by create(); its rows read
    lent = False and the new column is written like any other."""
    store.save_jobs([job(1, phase="profiling", profile="admitted")])
    with store.engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN lent")
        c.exec_driver_sql("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store.create()
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert store.job(1).lent is False and store.job(1).profile == "admitted"
    store.save_jobs([job(2, lent=True)])
    assert store.job(2).lent is True


def test_a_database_of_schema_4_gains_the_time_limit_column(store):
    """Schema 5 keeps each job's time limit (the packing test's time-limit rule, repeated by explain):
    added, empty, to an older database's rows."""
    store.save_jobs([job(1, estimate_s=500.0)])
    with store.engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN time_limit_s")
        c.exec_driver_sql("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    store.create()
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    assert store.job(1).time_limit_s is None and store.job(1).estimate_s == 500.0
    store.save_jobs([job(2, time_limit_s=7200)])
    assert store.job(2).time_limit_s == 7200


def test_a_database_a_newer_lucidd_wrote_is_refused_and_its_mark_kept(store):
    """An admin trial (28 November 2026) rolled lucidd back: the older code lowered the schema mark
    and failed every cycle as a "database outage". A newer schema is now refused, unchanged."""
    from lucidd.live.store import SchemaTooNew

    store.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(SchemaTooNew, match=f"schema {SCHEMA_VERSION + 1}, written by a newer lucidd"):
        store.create()
    assert store.schema_version() == SCHEMA_VERSION + 1


def test_code_that_does_not_know_the_lent_column_can_still_add_jobs(store):
    """A row written without `lent` (an older lucidd after a rollback) gets the database's default."""
    from lucidd.live.store import JobRow

    store.save_jobs([job(1)])
    if store.engine.dialect.name == "postgresql":  # as schema 2-4 made it: create() adds the default
        with store.engine.begin() as c:
            c.exec_driver_sql("ALTER TABLE jobs ALTER COLUMN lent DROP DEFAULT")
        store.create()
    q = store.engine.dialect.identifier_preparer.quote
    cols = [q(c.name) for c in JobRow.__table__.columns if c.name not in ("job_id", "lent")]
    with store.engine.begin() as c:  # the columns an older lucidd knows, copied from job 1 as job 77
        c.exec_driver_sql(f"INSERT INTO jobs (job_id, {', '.join(cols)}) SELECT 77, {', '.join(cols)} FROM jobs "
                          "WHERE job_id = 1")
    assert store.job(77).lent is False


def test_a_partition_list_longer_than_200_characters_is_kept(store):
    """Slurm takes a `-p` list of up to 1,024 characters; on PostgreSQL a VARCHAR(200) column made
    every cycle's write fail (and lucidd fail open every cycle) for one such job."""
    parts = ",".join(f"partition{i:03d}" for i in range(80))  # 1,039 characters
    store.save_jobs([job(7, requested_partition=parts, target_partition=parts, partition_ran=parts,
                         user="u" * 300, account="a" * 300)])
    row = store.job(7)
    assert (row.requested_partition, row.target_partition, row.partition_ran) == (parts, parts, parts)
    store.add_history([{"job_id": 7, "name": "n", "user": "u" * 300, "partition": parts, "gpus": 1,
                        "submit_time": 1, "start_time": 2, "end_time": 3, "duration": 1, "state": "COMPLETED"}])
    assert store.history(0)[0].partition == parts


def test_a_database_of_schema_2_has_its_varchar_columns_widened(store):
    """A database an older lucidd made (VARCHAR(200) partition, user and account columns) is
    altered in place by create(); SQLite, which enforces no length, is left as it is."""
    store.save_jobs([job(1, requested_partition="main", target_partition="main")])
    pg = store.engine.dialect.name == "postgresql"
    if pg:
        with store.engine.begin() as c:
            for col in ("requested_partition", "target_partition", "partition_ran", '"user"', "account"):
                c.exec_driver_sql(f"ALTER TABLE jobs ALTER COLUMN {col} TYPE VARCHAR(200)")
            for col in ('"user"', "partition"):
                c.exec_driver_sql(f"ALTER TABLE history ALTER COLUMN {col} TYPE VARCHAR(200)")
            c.exec_driver_sql("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        with pytest.raises(StoreError, match="too long"):
            store.save_jobs([job(2, target_partition="p" * 201)])
    store.create()
    assert store.get_meta("schema_version") == str(SCHEMA_VERSION)
    store.save_jobs([job(2, target_partition="p" * 1024, user="u" * 300)])
    assert store.job(2).target_partition == "p" * 1024 and store.job(1).target_partition == "main"


def test_a_read_only_store_reads_and_cannot_write(store):
    """lucidctl's view (Store(read_only=True)): on SQLite the file opened read-only, on PostgreSQL
    read-only transactions, whatever the login may do."""
    store.set_meta("lucidd_version", "test")
    reader = Store(store.url, read_only=True)
    try:
        assert reader.get_meta("lucidd_version") == "test" and reader.has_state()
        with pytest.raises(StoreError, match="read-only|readonly"):
            reader.set_meta("lucidd_version", "changed")
    finally:
        reader.engine.dispose()
    assert store.get_meta("lucidd_version") == "test"


def test_sqlite_creates_its_directory(tmp_path):
    path = tmp_path / "a" / "b" / "lucidd.db"
    Store(f"sqlite:///{path}").create()
    assert path.exists()


def test_meta(store):
    assert store.get_meta("nope") is None and store.get_meta("nope", "d") == "d"
    store.set_meta("started_at", 12.5)
    assert store.get_meta("started_at") == "12.5"
    store.set_meta("started_at", "13")
    assert store.get_meta("started_at") == "13"


# ----- jobs -------------------------------------------------------------------------------------

def test_save_and_load_jobs(store):
    store.save_jobs([job(1), job(2, gpus=4, phase="profiling", profile="admitted"), job(3, phase="done")])
    all_jobs = store.jobs()
    assert set(all_jobs) == {1, 2, 3}
    r = all_jobs[2]
    assert (r.gpus, r.phase, r.profile, r.target_partition, r.original_submit) == (4, "profiling", "admitted", "main",
                                                                                    990)
    assert set(store.open_jobs()) == {1, 2}
    assert store.job(3).phase == "done" and store.job(99) is None
    assert set(store.jobs([1, 3, 42])) == {1, 3} and store.jobs([]) == {}


def test_defaults_of_a_new_job_row(store):
    store.save_jobs([job(7)])
    r = store.job(7)
    assert (r.phase, r.profile, r.restarts, r.site_factor, r.estimate_s, r.requeued_at) == (
        "inbox", "pending", 0, None, None, None)


def test_save_merges_an_existing_job(store):
    store.save_jobs([job(1)])
    r = store.job(1)
    r.phase, r.site_factor, r.estimate_s, r.estimate_source = "released", 999_000_123, 1234.5, "fallback:gpu"
    store.save_jobs([r])
    got = store.job(1)
    assert (got.phase, got.site_factor, got.estimate_s, got.estimate_source) == ("released", 999_000_123, 1234.5,
                                                                                 "fallback:gpu")
    assert len(store.jobs()) == 1


def test_names_with_quotes_newlines_and_non_ascii_are_kept_exactly(store):
    name = 'odd ;$(touch x) `id` \'q\' "dq" ünï ✓\nsecond line\t'
    store.save_jobs([job(5, name=name, user="ü", requested_partition="main,research")])
    r = store.job(5)
    assert r.name == name and r.user == "ü" and r.requested_partition == "main,research"


def test_big_job_ids_and_many_ids(store):
    big = 2 ** 40
    ids = list(range(1, 2001)) + [big]
    store.save_jobs([job(i) for i in ids])
    got = store.jobs(ids)  # more than one IN chunk of 900
    assert len(got) == len(ids) and big in got


# ----- actions: written first, applied once -----------------------------------------------------

def test_record_action_and_applied_keys(store):
    store.record_action("profile:1", 1, "profile", {"partition": "profiling"}, "room", 100, "planned")
    assert store.applied_keys(["profile:1"]) == set()
    store.record_action("profile:1", 1, "profile", {"partition": "profiling"}, "room", 101, "applied")
    assert store.applied_keys(["profile:1", "requeue:1"]) == {"profile:1"}
    acts = store.actions_for(1)
    assert len(acts) == 1  # the same key never makes a second row
    a = acts[0]
    assert (a.status, a.created_at, a.applied_at, a.kind, a.job_id) == ("applied", 100, 101, "profile", 1)
    assert '"partition": "profiling"' in a.args


def test_failed_and_dry_run_actions_are_not_applied(store):
    store.record_action("requeue:2", 2, "requeue", {}, "Tprof", 100, "planned")
    store.record_action("requeue:2", 2, "requeue", {}, "Tprof", 100, "failed", "slurm: Invalid job id specified")
    store.record_action("sitefactor:3:5", 3, "sitefactor", {"value": 5}, "rank 1", 100, "dry-run")
    assert store.applied_keys(["requeue:2", "sitefactor:3:5"]) == set()
    (a,) = store.actions_for(2)
    assert (a.status, a.error, a.applied_at) == ("failed", "slurm: Invalid job id specified", None)
    # a later success clears the error
    store.record_action("requeue:2", 2, "requeue", {}, "Tprof", 130, "applied")
    (a,) = store.actions_for(2)
    assert (a.status, a.error, a.applied_at) == ("applied", "", 130)


def test_applied_keys_survive_a_restart(tmp_path):
    url = f"sqlite:///{tmp_path / 'lucidd.db'}"
    Store(url).create().record_action("requeue:9", 9, "requeue", {}, "Tprof", 1, "applied")
    again = Store(url).create()
    assert again.applied_keys(["requeue:9"]) == {"requeue:9"}


def test_applied_keys_in_chunks(store):
    for i in range(950):
        store.record_action(f"sitefactor:{i}:7", i, "sitefactor", {"value": 7}, "", 1, "applied")
    keys = [f"sitefactor:{i}:7" for i in range(1000)]
    assert store.applied_keys(keys) == set(keys[:950])
    assert store.applied_keys([]) == set()


def test_recent_actions_newest_first(store):
    for i in range(5):
        store.record_action(f"k{i}", None, "close_inbox", {}, "", i, "applied")
    assert [a.key for a in store.recent_actions(3)] == ["k4", "k3", "k2"]


# ----- cycles: only the last N keep their recorded payload --------------------------------------

def cycle(i, recorded=True):
    return CycleRow(started_at=1000.0 + i, seconds=0.01, ok=True, jobs=i, actions=0, calls="{}",
                    recorded=f'{{"cycle": {i}}}' if recorded else None)


@pytest.mark.parametrize("keep", [0, 1, 3])
def test_add_cycle_keeps_only_the_last_n_recorded(store, keep):
    ids = [store.add_cycle(cycle(i), keep) for i in range(8)]
    assert ids == sorted(ids) and len(set(ids)) == 8
    rec = store.recorded_cycles()
    assert [c.jobs for c in rec] == list(range(7, 7 - keep, -1))
    assert [c.recorded for c in rec] == [f'{{"cycle": {i}}}' for i in range(7, 7 - keep, -1)]
    assert len(store.last_cycles(100)) == 8  # the cycle rows stay, only the payload goes
    assert [c.jobs for c in store.last_cycles(2)] == [7, 6]


def test_add_cycle_counts_recorded_cycles_not_rows(store):
    """The cutoff is by cycle id: N is 'the last N cycles' ([daemon] record_cycles), cycles without a
    payload (failed ones) included."""
    store.add_cycle(cycle(0), 2)
    store.add_cycle(cycle(1, recorded=False), 2)
    store.add_cycle(cycle(2), 2)
    assert [c.jobs for c in store.recorded_cycles()] == [2]


def test_prune_ended_forgets_old_ended_jobs_their_actions_and_old_cycles_only(store):
    """[daemon] keep_days: ended jobs (phase done) that ended before the cutoff go, with their
    actions; open jobs stay however old, and so do their actions; cycles go by start time."""
    store.save_jobs([job(1, phase="done", end_time=1000), job(2, phase="done", end_time=5000),
                     job(3, phase="done", end_time=None, first_seen=900),  # closed unseen: by first_seen
                     job(4, phase="released", first_seen=100)], new_ids={1, 2, 3, 4})
    for jid in (1, 2, 3, 4):
        store.record_action(f"profile:{jid}", jid, "profile", {}, "room", 500, "applied")
    store.record_action("inbox:close:1", None, "inbox", {}, "start", 500, "applied")
    store.record_action("inbox:close:2", None, "inbox", {}, "start", 4000, "applied")
    for t in (100.0, 200.0, 3000.0):
        store.add_cycle(CycleRow(started_at=t, jobs=0), 100)
    assert store.record_counts() == {"jobs": 4, "ended_jobs": 3, "oldest_ended_job_end": 900, "actions": 6,
                                     "cycles": 3}
    assert store.prune_ended(2000, 2500) == (2, 2)
    assert store.record_counts() == {"jobs": 2, "ended_jobs": 1, "oldest_ended_job_end": 5000, "actions": 3,
                                     "cycles": 1}
    assert sorted(store.jobs()) == [2, 4]
    assert store.applied_keys(["profile:1", "profile:2", "profile:3", "profile:4", "inbox:close:1",
                               "inbox:close:2"]) == {"profile:2", "profile:4", "inbox:close:2"}
    assert [c.started_at for c in store.last_cycles()] == [3000.0]
    assert store.prune_ended(2000, 2500) == (0, 0)  # nothing left to forget


def test_prune_ended_deletes_at_most_limit_rows_oldest_cycles_first(store):
    store.save_jobs([job(i, phase="done", end_time=100 + i) for i in range(1, 6)], new_ids=set(range(1, 6)))
    for t in range(5):
        store.add_cycle(CycleRow(started_at=float(t), jobs=t), 100)
    assert store.prune_ended(10_000, 10_000, limit=3) == (3, 3)
    assert len(store.jobs()) == 2 and [c.jobs for c in store.last_cycles()] == [4, 3]
    assert store.prune_ended(10_000, 10_000, limit=3) == (2, 2)


# ----- history ----------------------------------------------------------------------------------

def hist(job_id, end, **kw):
    row = dict(job_id=job_id, name=f"h{job_id}", user="bob", partition="main", gpus=2, submit_time=end - 500,
               start_time=end - 400, end_time=end, duration=400, state="COMPLETED")
    row.update(kw)
    return row


def test_history_add_query_prune(store):
    store.add_history([hist(1, 1000), hist(2, 2000), hist(3, 3000)])
    assert store.history_count() == 3
    assert sorted(r.job_id for r in store.history(2000)) == [2, 3]
    store.add_history([hist(2, 2000, duration=123, name='n "q" ✓')])  # same job again: updated, not doubled
    assert store.history_count() == 3
    (r,) = [r for r in store.history(0) if r.job_id == 2]
    assert (r.duration, r.name) == (123, 'n "q" ✓')
    store.prune_history(2000)  # strictly older goes
    assert sorted(r.job_id for r in store.history(0)) == [2, 3]
    store.prune_history(10 ** 10)
    assert store.history_count() == 0


def test_model_versions(store):
    store.add_model_version("duration", 1, 100, "accepted", {"mae": 1.5})
    store.add_model_version("duration", None, 200, "kept", {})
    v = store.model_versions()
    assert [(m.version, m.decision) for m in v] == [(0, "kept"), (1, "accepted")]
    assert '"mae": 1.5' in v[1].detail


def test_gpu_node_heartbeats_are_upserted_and_a_missing_table_reads_empty(store):
    store.engine.dispose()
    from sqlalchemy import text

    with store.engine.begin() as c:  # a database no sampler of 28 November 2026 or later wrote to
        c.execute(text("DROP TABLE IF EXISTS gpu_nodes"))
    assert store.gpu_nodes() == {}
    store.create_gpu_profiles()  # what a sampler does first: both its tables
    store.save_gpu_node("gpu1", 100, 8, 81559.0, "NVIDIA H100 80GB HBM3", "580.159.04")
    store.save_gpu_node("gpu2", 100, 8, None, "", "")  # a GPU's memory unreadable
    store.save_gpu_node("gpu1", 160, 8, 81559.0, "NVIDIA H100 80GB HBM3", "580.159.04")
    got = store.gpu_nodes()
    assert {n: (r.seen_at, r.gpus, r.gpu_memory_mib) for n, r in got.items()} == {
        "gpu1": (160, 8, 81559.0), "gpu2": (100, 8, None)}


# ----- errors and redaction ---------------------------------------------------------------------

def test_unreachable_postgres_is_a_store_error_without_the_password():
    pytest.importorskip("psycopg")
    s = Store("postgresql+psycopg://lucidd:s3cret@127.0.0.1:1/lucidd", connect_timeout_s=1)
    with pytest.raises(StoreError) as e:
        s.create()
    assert "s3cret" not in str(e.value) and "lucidd:***@127.0.0.1:1" in str(e.value)
    with pytest.raises(StoreError):
        s.ping()


def test_bad_url_is_a_store_error():
    with pytest.raises(StoreError):
        Store("nosuchdialect://x/y")


@pytest.mark.parametrize("url,expected", [
    ("postgresql+psycopg://lucidd:s3cret@db/lucidd", "postgresql+psycopg://lucidd:***@db/lucidd"),
    ("postgresql://u:p@ss:w@rd@db:5432/x", "postgresql://u:***@db:5432/x"),
    ("postgresql://lucidd@db/lucidd", "postgresql://lucidd@db/lucidd"),
    ("postgresql://:only@db/x", "postgresql://:***@db/x"),
    ("sqlite:////var/lib/lucidd/lucidd.db", "sqlite:////var/lib/lucidd/lucidd.db"),
    ("", ""),
])
def test_redact_hides_passwords(url, expected):
    assert redact(url) == expected


def test_redact_hides_a_password_in_the_query():
    assert "s3cret" not in redact("postgresql+psycopg://lucidd@db/lucidd?password=s3cret")


def test_a_postgresql_connection_cannot_hang_a_cycle_for_good(request):
    """An admin trial paused PostgreSQL (SIGSTOP): one cycle took 49 s, silently. Every connection
    now has a statement and a lock timeout (set per connection, so the URL's own options, here the
    test's search_path, stay) and TCP keepalives."""
    from sqlalchemy import text

    s, handle = _pg_store(request)
    try:
        s.create()
        with s.engine.connect() as c:
            assert c.execute(text("SHOW statement_timeout")).scalar() == "30s"
            assert c.execute(text("SHOW lock_timeout")).scalar() == "10s"
            assert c.execute(text("SHOW search_path")).scalar().startswith("lucidd_test_")
    finally:
        _pg_cleanup(s, handle)


def test_one_lucidd_per_database_holds_the_instance_lock(store):
    """Two live lucidd on one database acted on the same jobs and overwrote each other's records
    (an admin trial); the second now finds the first's lock."""
    other = Store(store.url)
    try:
        assert store.hold_instance_lock()
        assert not other.hold_instance_lock()
        store.release_instance_lock()
        assert other.hold_instance_lock()
    finally:
        other.release_instance_lock()
        store.release_instance_lock()
        other.engine.dispose()


def test_a_lock_whose_session_ended_is_seen_as_lost_and_taken_again(store):
    """A PostgreSQL restart ends the session that held the advisory lock while the pool reconnects
    unnoticed (a review): instance_lock_alive says so, and the lock can be taken again."""
    from sqlalchemy import text

    assert store.hold_instance_lock() and store.instance_lock_alive()
    if store.url.startswith("postgresql"):
        pid = store._instance_lock.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        store._instance_lock.commit()
        with store.engine.connect() as c:
            c.execute(text(f"SELECT pg_terminate_backend({int(pid)})"))
            c.commit()
        assert not store.instance_lock_alive()
        store.release_instance_lock()
        assert store.hold_instance_lock() and store.instance_lock_alive()
    store.release_instance_lock()


def test_lucidctl_reads_everything_it_shows_through_a_read_only_role(request, tmp_path):
    """docs/deploy.md, "Letting users run lucidctl": a PostgreSQL role with SELECT only is enough
    for `lucidctl status`, `queue` and `explain job ID` (none of them writes)."""
    import subprocess
    import sys
    from pathlib import Path

    from sqlalchemy import text

    store, handle = _pg_store(request)
    admin, schema = handle
    role = f"lucidd_reader_{uuid.uuid4().hex[:8]}"
    try:
        store.create()
        store.save_jobs([job(5, user="alice", name="train")], new_ids={5})
        store.set_meta("lucidd_version", "test")
        store.create_gpu_profiles()
        store.save_gpu_node("gpu1", 100, 8, 24576.0, "FakeGPU", "535.183.01")
        with admin.begin() as c:
            c.execute(text(f"CREATE ROLE {role} LOGIN PASSWORD 'reader'"))
            c.execute(text(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}'))
            c.execute(text(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO {role}'))
        url = store.url.replace("postgresql+psycopg://postgres@", f"postgresql+psycopg://{role}:reader@")
        assert url != store.url, store.url
        cfg = tmp_path / "lucidctl.toml"
        cfg.write_text(f'[daemon]\nstate_dir = "{tmp_path}"\n\n[database]\nurl = "{url}"\n\n'
                       '[packing]\nenabled = true\n')
        lucidctl = Path(sys.executable).parent / "lucidctl"
        for command in (["status"], ["queue"], ["explain", "job", "5"]):
            r = subprocess.run([str(lucidctl), "--json", *command, "--config", str(cfg)], capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 0 and r.stdout.startswith("{"), (command, r.stdout, r.stderr)
        with pytest.raises(StoreError):  # and it can write nothing
            Store(url).set_meta("x", "y")
    finally:
        with admin.begin() as c:
            c.execute(text(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM {role}'))
            c.execute(text(f'REVOKE USAGE ON SCHEMA "{schema}" FROM {role}'))
            c.execute(text(f"DROP ROLE IF EXISTS {role}"))
        _pg_cleanup(store, handle)


def test_lucidctl_reads_again_when_lucidd_starts_during_an_immutable_read(tmp_path, monkeypatch, capsys):
    """lucidd stopped: lucidctl reads the file as immutable. If lucidd starts meanwhile and the
    read fails, the command runs once more, through lucidd's log; a failure with the log there
    from the start is not retried."""
    import lucidd.admin_cli as admin
    from lucidd.cli import main as lucidctl

    db = tmp_path / "state" / "lucidd.db"
    writer = Store(f"sqlite:///{db}").create()
    writer.set_meta("lucidd_version", "test")
    writer.engine.dispose()
    config = tmp_path / "lucidd.toml"
    config.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    real, calls = admin.status_data, []

    def lucidd_starts_during_the_first_read(cfg, store, now=None):
        calls.append(store.sqlite_reader.immutable_reads)
        if len(calls) == 1:
            started = Store(f"sqlite:///{db}")
            started.set_meta("lucidd_version", "test2")  # lucidd's connection: the log is there
            monkeypatch.setattr(admin, "_lucidd", started, raising=False)
            raise StoreError("database sqlite:///... unavailable (session): database disk image is malformed")
        return real(cfg, store, now)

    monkeypatch.setattr(admin, "status_data", lucidd_starts_during_the_first_read)
    assert lucidctl(["--json", "status", "--config", str(config)]) == 0
    assert calls[0] >= 1 and calls[1] == 0 and len(calls) == 2  # the second read went through the log
    capsys.readouterr()
    calls.clear()  # lucidd is running now (its connection is open): a failure is a failure
    assert lucidctl(["status", "--config", str(config)]) == 2 and len(calls) == 1
    assert "malformed" in capsys.readouterr().err
    admin._lucidd.engine.dispose()
