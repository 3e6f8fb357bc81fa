"""Upgrading and rolling back lucidd over one database (an admin trial, 28 November 2026: four older
versions to HEAD with jobs in flight, on SQLite and PostgreSQL). The upgrades kept every job; what
failed was around them: a rolled-back lucidd on a newer database, a refused start that had already
changed the schema, and lucidctl on an older one."""

from __future__ import annotations

import re

import pytest

from lucidd.errors import LucidError
from lucidd.live.store import SCHEMA_VERSION, SchemaTooNew, Store

from .memslurm import Clock, MemSlurm
from .test_trial_faults import _daemon


def test_a_lucidd_refuses_a_database_a_newer_lucidd_wrote(tmp_path):
    clock = Clock()
    slurm = MemSlurm(clock)
    _daemon(tmp_path, slurm, clock).start()  # creates the database
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    store.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(SchemaTooNew, match="written by a newer lucidd.*restore the database backup"):
        _daemon(tmp_path, slurm, clock).start()
    assert store.schema_version() == SCHEMA_VERSION + 1  # not lowered


def test_a_refused_start_changes_nothing_in_the_database(tmp_path):
    """The instance lock is taken before the tables are created or upgraded: a second lucidd that is
    refused has not altered the schema under the running one."""
    clock = Clock()
    slurm = MemSlurm(clock)
    first = _daemon(tmp_path, slurm, clock)
    first.start()
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    store.set_meta("schema_version", "3")  # as if the running one were older
    with pytest.raises(LucidError, match="another lucidd"):
        _daemon(tmp_path, slurm, clock).start()
    assert store.schema_version() == 3


@pytest.mark.parametrize("schema,dropped", [(1, ("lent", "time_limit_s")), (4, ("time_limit_s",))])
def test_lucidctl_says_an_older_database_waits_for_the_new_lucidd(tmp_path, schema, dropped):
    from types import SimpleNamespace

    from lucidd.admin_cli import _open

    clock = Clock()
    _daemon(tmp_path, MemSlurm(clock), clock).start()
    store = Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")
    with store.engine.begin() as c:
        for col in dropped:
            c.exec_driver_sql(f"ALTER TABLE jobs DROP COLUMN {col}")
    store.set_meta("schema_version", str(schema))
    cfg_path = tmp_path / "lucidd.toml"
    cfg_path.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n')
    with pytest.raises(LucidError, match=f"has schema {schema}, from an older lucidd.*reads schema 5 to"):
        _open(SimpleNamespace(config=str(cfg_path)))


def test_a_job_submit_lua_older_than_the_shipped_one_is_said_at_start(tmp_path, caplog):
    """An admin trial left the old job_submit.lua in place after an upgrade: a user then moved a job
    into profiling, which starts ahead of every queue (the new one refuses that)."""
    from pathlib import Path

    from lucidd.daemon import check_job_submit_lua

    shipped = (Path(__file__).resolve().parents[2] / "lucidd/data/slurm/job_submit.lua").read_text()
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    assert check_job_submit_lua(str(conf)) is None  # none beside slurm.conf: not ours to judge
    (tmp_path / "job_submit.lua").write_text(shipped)
    assert check_job_submit_lua(str(conf)) is None  # the current one
    old = "\n".join(line for line in shipped.splitlines() if "LUCIDD_LUA_VERSION" not in line)
    (tmp_path / "job_submit.lua").write_text(old)
    text = check_job_submit_lua(str(conf))
    assert text and "version 1 or older" in text and "copy it again" in text and "LUCIDD_USERS" in text
    assert text in caplog.text
    # a downgrade that left the newer one in place
    newer = re.sub(r"LUCIDD_LUA_VERSION\s*=\s*([0-9]+)", lambda m: f"LUCIDD_LUA_VERSION = {int(m.group(1)) + 1}", shipped)
    (tmp_path / "job_submit.lua").write_text(newer)
    text = check_job_submit_lua(str(conf))
    assert text and "newer than the version" in text and "after a downgrade" in text


def test_a_job_submit_lua_naming_other_partitions_than_lucidd_is_said_at_start(tmp_path):
    """Its INBOX, PROFILING and DEFAULT must be lucidd's [slurm] names: a DEFAULT left at "main" on a
    site whose default_partition is another sends the jobs that name none to main while lucidd is away."""
    from pathlib import Path

    from lucidd.daemon import check_job_submit_lua
    from lucidd.live.config import config_from_dict

    shipped = (Path(__file__).resolve().parents[2] / "lucidd/data/slurm/job_submit.lua").read_text()
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    (tmp_path / "job_submit.lua").write_text(shipped)
    same = config_from_dict({"daemon": {"state_dir": str(tmp_path)}}).slurm
    assert check_job_submit_lua(str(conf), same) is None
    other = config_from_dict({"daemon": {"state_dir": str(tmp_path)}, "slurm": {"default_partition": "gpu"}}).slurm
    text = check_job_submit_lua(str(conf), other)
    assert text and 'DEFAULT = "main" but [slurm] default_partition is "gpu"' in text


def _database_with_a_job(tmp_path):
    clock = Clock()
    slurm = MemSlurm(clock)
    live = _daemon(tmp_path, slurm, clock)
    live.start()
    slurm.submit(5, partition="main", gpus=1)
    clock.t += 10
    assert live.run_once()
    live.store.release_instance_lock()
    return clock, slurm, Store(f"sqlite:///{tmp_path / 'state' / 'lucidd.db'}")


def test_the_upgrade_check_reads_a_schema_1_database_as_a_first_start(tmp_path, caplog):
    """docs/deploy.md, Upgrading, step 1 (a review): `--once --dry-run` read a schema-1 database
    with this version's columns and said "database unavailable"."""
    import logging

    clock, slurm, store = _database_with_a_job(tmp_path)
    with store.engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN lent")
    store.set_meta("schema_version", "1")
    check = _daemon(tmp_path, slurm, clock, check=True)
    with caplog.at_level(logging.INFO):
        check.start()
        clock.t += 10
        assert check.run_once()
    assert "database unavailable" not in caplog.text and "has schema 1, which this lucidd upgrades" in caplog.text
    assert store.schema_version() == 1  # a check writes nothing


def test_the_check_refuses_a_database_a_newer_lucidd_wrote(tmp_path):
    clock, slurm, store = _database_with_a_job(tmp_path)
    store.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    with pytest.raises(SchemaTooNew, match="newer lucidd"):
        _daemon(tmp_path, slurm, clock, check=True).start()


@pytest.mark.parametrize("schema", [2, 3, 4])
def test_the_upgrade_check_reads_a_schema_2_to_4_database_as_a_first_start(tmp_path, caplog, schema):
    """docs/deploy.md, Upgrading, step 1 from a lucidd of 25-28 November 2026 (schema 2-4, no
    jobs.time_limit_s): `--once --dry-run` read the database with schema 5's columns and said
    "database unavailable ... no such column: jobs.time_limit_s" (seen on a real test cluster with
    the schema-4 lucidd's own database)."""
    import logging

    clock, slurm, store = _database_with_a_job(tmp_path)
    with store.engine.begin() as c:
        c.exec_driver_sql("ALTER TABLE jobs DROP COLUMN time_limit_s")
    store.set_meta("schema_version", str(schema))
    check = _daemon(tmp_path, slurm, clock, check=True)
    with caplog.at_level(logging.INFO):
        check.start()
        clock.t += 10
        assert check.run_once()
    assert "database unavailable" not in caplog.text
    assert f"has schema {schema}, which this lucidd upgrades" in caplog.text
    assert store.schema_version() == schema  # a check writes nothing
