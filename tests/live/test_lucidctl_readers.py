"""docs/deploy.md, "Letting users run lucidctl", with SQLite: a user in the group that owns
lucidd's state folder (the unit's `Group=`, folder 0750, files 0640 under `UMask=0027`) runs
`lucidctl status`, `queue` and `explain job ID` on the database while lucidd writes it and while
lucidd is stopped, and changes nothing; a user outside the group is told why and where to look.

Acting as another user needs root (CI runs as root). The other user is a forked child of this
test that drops to `nobody` and calls lucidctl's `main` in-process (tests/live/as_user.py), so
each command runs once as root first, which imports everything it needs."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from lucidd.cli import main as lucidctl
from lucidd.live.store import JobRow, Store, StoreError

from .as_user import as_nobody

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")

READERS_GID = 54321  # no /etc/group entry is needed: Unix permissions compare numbers
COMMANDS = (["status"], ["queue"], ["explain", "job", "5"], ["models"])


def _as_user(argv, groups):
    """lucidctl `argv` as uid/gid nobody with supplementary `groups`: (rc, stdout, stderr)."""
    return as_nobody(lambda: lucidctl(argv), groups)


def _listing(folder):
    return {n: (os.stat(os.path.join(folder, n)).st_mtime_ns, os.stat(os.path.join(folder, n)).st_size)
            for n in sorted(os.listdir(folder))}


@pytest.fixture
def site():
    """A state folder as the systemd unit leaves it with `Group=` the readers' group: lucidd's
    database (one job) and heartbeat, folder 0750 and files 0640, group READERS_GID."""
    base = tempfile.mkdtemp(prefix="lucidd-readers-", dir="/tmp")
    os.chmod(base, 0o755)  # like /var/lib
    state = os.path.join(base, "state")
    os.mkdir(state, 0o750)
    os.chown(state, 0, READERS_GID)
    db = os.path.join(state, "lucidd.db")
    url = f"sqlite:///{db}"
    writer = Store(url).create()
    writer.save_jobs([JobRow(job_id=5, first_seen=1000, original_submit=990, requested_partition=None,
                             target_partition="main", name="train", user="alice", account="acct", gpus=1)],
                     new_ids={5})
    writer.set_meta("lucidd_version", "test")
    writer.engine.dispose()  # lucidd stopped: its last close removed the log files
    with open(os.path.join(state, "heartbeat"), "w"):
        pass
    for name in os.listdir(state):
        os.chown(os.path.join(state, name), 0, READERS_GID)
        os.chmod(os.path.join(state, name), 0o640)
    cfg = os.path.join(base, "lucidctl.toml")
    with open(cfg, "w") as f:
        f.write(f'[daemon]\nstate_dir = "{state}"\n\n[database]\nurl = "{url}"\n')
    os.chmod(cfg, 0o644)
    yield cfg, state, url
    shutil.rmtree(base)


def _warm_up(cfg, capsys, monkeypatch):
    """Each command once as root, then its connections closed: a connection this process kept
    would keep the log files there, and "lucidd stopped" would not be."""
    opened = []
    real_init = Store.__init__

    def recording_init(self, *a, **kw):
        real_init(self, *a, **kw)
        opened.append(self)

    with monkeypatch.context() as m:
        m.setattr(Store, "__init__", recording_init)
        for command in COMMANDS:
            assert lucidctl(["--json", *command, "--config", cfg]) == 0, command
    for store in opened:
        store.engine.dispose()
    capsys.readouterr()


@pytest.mark.parametrize("lucidd_running", [True, False], ids=["lucidd-running", "lucidd-stopped"])
def test_a_user_in_the_state_group_reads_everything_and_writes_nothing(site, capsys, monkeypatch, lucidd_running):
    cfg, state, url = site
    writer = None
    if lucidd_running:  # lucidd keeps a connection open: the log files are there
        writer = Store(url)
        writer.get_meta("lucidd_version")
        assert os.path.exists(os.path.join(state, "lucidd.db-wal"))
        # as lucidd (uid slurm, gid the readers' group) makes them; root's SQLite gives them the
        # database file's owner and mode itself
        assert os.stat(os.path.join(state, "lucidd.db-shm")).st_gid == READERS_GID
    try:
        _warm_up(cfg, capsys, monkeypatch)
        assert os.path.exists(os.path.join(state, "lucidd.db-wal")) == lucidd_running
        before = _listing(state)
        for command in COMMANDS:
            rc, out, err = _as_user(["--json", *command, "--config", cfg], [READERS_GID])
            assert rc == 0, (command, out, err)
            d = json.loads(out)
            if command[0] == "explain":
                assert d["job_id"] == 5 and d["user"] == "alice", d
        assert _listing(state) == before  # nothing made, nothing written
        if writer is not None:  # and lucidd writes on while users read
            writer.set_meta("lucidd_version", "test2")
            rc, out, err = _as_user(["--json", "status", "--config", cfg], [READERS_GID])
            assert rc == 0, err
    finally:
        if writer is not None:
            writer.engine.dispose()


def test_a_user_outside_the_group_is_told_why(site, capsys, monkeypatch):
    cfg, state, _ = site
    _warm_up(cfg, capsys, monkeypatch)
    rc, out, err = _as_user(["status", "--config", cfg], [])
    assert rc == 2 and out == "", (out, err)
    assert f"may not look in {state}" in err and "Letting users run lucidctl" in err, err


def test_a_database_file_the_user_may_not_read_is_named(site, capsys, monkeypatch):
    cfg, state, _ = site
    _warm_up(cfg, capsys, monkeypatch)
    os.chmod(os.path.join(state, "lucidd.db"), 0o600)
    rc, out, err = _as_user(["status", "--config", cfg], [READERS_GID])
    assert rc == 2 and "may not read" in err and "lucidd.db" in err, err


def test_lucidctl_opens_the_database_read_only_even_as_root(site):
    _, state, url = site
    for running in (False, True):
        writer = Store(url) if running else None
        if writer is not None:
            writer.get_meta("lucidd_version")
        reader = Store(url, read_only=True)
        assert reader.get_meta("lucidd_version") == "test"
        with pytest.raises(StoreError, match="readonly"):
            reader.set_meta("lucidd_version", "changed")
        reader.engine.dispose()
        if writer is not None:
            writer.engine.dispose()
    assert sorted(os.listdir(state)) == ["heartbeat", "lucidd.db"]  # the reader left no log files
