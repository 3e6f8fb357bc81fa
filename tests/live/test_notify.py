"""systemd's notify protocol (lucidd/live/notify.py) against a real unix datagram socket."""

import os
import socket
import uuid

import pytest

from lucidd.live.notify import Notifier


@pytest.fixture
def listener(tmp_path):
    path = str(tmp_path / "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(5)
    yield path, s
    s.close()


def recv(s):
    data = s.recv(65536)
    return data


def fields(data: bytes) -> dict:
    return dict(line.split("=", 1) for line in data.decode().split("\n"))


def test_ready_watchdog_status_stopping_arrive_as_systemd_expects(listener, monkeypatch):
    path, s = listener
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    n = Notifier()
    assert n.enabled and n.address == path
    assert n.ready() is True
    assert recv(s) == b"READY=1"
    assert n.ready("first reconcile done")
    assert recv(s) == b"READY=1\nSTATUS=first reconcile done"
    assert n.watchdog()
    assert recv(s) == b"WATCHDOG=1"
    assert n.watchdog("ok: 3 jobs, 1 actions, 12 ms")
    assert fields(recv(s)) == {"WATCHDOG": "1", "STATUS": "ok: 3 jobs, 1 actions, 12 ms"}
    assert n.notify(STATUS="just a status")
    assert recv(s) == b"STATUS=just a status"
    assert n.stopping("lucidd stopped")
    assert recv(s) == b"STOPPING=1\nSTATUS=lucidd stopped"
    assert n.stopping()
    assert recv(s) == b"STOPPING=1"
    assert (n.sent, n.errors) == (7, 0)


def test_one_datagram_per_call_and_utf8_status(listener, monkeypatch):
    path, s = listener
    n = Notifier(env={"NOTIFY_SOCKET": path})
    n.watchdog("waiting for Slurm: ünï ✓")
    n.watchdog("second")
    assert recv(s).decode() == "WATCHDOG=1\nSTATUS=waiting for Slurm: ünï ✓"
    assert recv(s) == b"WATCHDOG=1\nSTATUS=second"


def test_abstract_namespace_address():
    name = f"lucidd-test-{uuid.uuid4().hex}"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + name)
    s.settimeout(5)
    try:
        n = Notifier(env={"NOTIFY_SOCKET": "@" + name})
        assert n.address == "\0" + name
        assert n.ready("up")
        assert recv(s) == b"READY=1\nSTATUS=up"
        assert n.watchdog()
        assert recv(s) == b"WATCHDOG=1"
    finally:
        s.close()


@pytest.mark.parametrize("env", [{}, {"NOTIFY_SOCKET": ""}])
def test_no_notify_socket_is_a_no_op(env, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = Notifier(env=env)
    assert not n.enabled and n.address is None
    assert n.ready("x") is False and n.watchdog() is False and n.stopping() is False
    assert (n.sent, n.errors) == (0, 0)


def test_default_env_is_os_environ_and_unset_means_disabled(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not Notifier().enabled


def test_nobody_listening_is_never_fatal(tmp_path):
    n = Notifier(env={"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert n.enabled
    assert n.watchdog("x") is False
    assert n.ready() is False
    assert (n.sent, n.errors) == (0, 2)


def test_socket_removed_after_start(listener):
    path, s = listener
    n = Notifier(env={"NOTIFY_SOCKET": path})
    assert n.ready()
    os.unlink(path)
    assert n.watchdog() is False and n.errors == 1


@pytest.mark.parametrize("env,expected", [
    ({"WATCHDOG_USEC": "120000000"}, 120.0),
    ({"WATCHDOG_USEC": "500000"}, 0.5),
    ({"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": str(os.getpid())}, 120.0),
    ({"WATCHDOG_USEC": "120000000", "WATCHDOG_PID": "1"}, None),  # meant for another process
    ({"WATCHDOG_USEC": ""}, None),
    ({"WATCHDOG_USEC": "abc"}, None),
    ({"WATCHDOG_USEC": "-5"}, None),
    ({"WATCHDOG_USEC": "1.5"}, None),
    ({}, None),
])
def test_watchdog_usec(env, expected):
    assert Notifier(env=env).watchdog_s == expected


def test_watchdog_pid_of_this_process_with_socket(listener):
    path, s = listener
    n = Notifier(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())})
    assert n.watchdog_s == 30.0 and n.watchdog()
    assert recv(s) == b"WATCHDOG=1"
