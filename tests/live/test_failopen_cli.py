"""`lucidd-failopen --config FILE`: the guard a systemd timer runs. Slurm is played by fake commands in
`[slurm] bin_dir` (tests/live/fakeslurm.py) that print real captured replies and record their argv;
the real-Slurm tier is tests/slurm/."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lucidd.daemon import failopen_main

from .fakeslurm import FakeSlurm, env_without_slurm

FAILOPEN = Path(sys.executable).with_name("lucidd-failopen")
SNAPSHOT = [["squeue", "--json"], ["sinfo", "--json"], ["scontrol", "-o", "show", "partition"]]


@pytest.fixture
def setup(tmp_path):
    fake = FakeSlurm(tmp_path / "bin")
    state = tmp_path / "state"
    state.mkdir()
    cfg = tmp_path / "lucidd.toml"
    cfg.write_text(f'[slurm]\nbin_dir = "{fake.bin}"\ncommand_timeout_s = 10\n'
                   f'[daemon]\nstate_dir = "{state}"\nfailopen_after_s = 60\n')
    return fake, cfg, state / "heartbeat"


def run(cfg, *extra):
    return subprocess.run([str(FAILOPEN), "--config", str(cfg), *extra], capture_output=True, text=True,
                          timeout=120, env=env_without_slurm(), stdin=subprocess.DEVNULL)


def touch(path, age_s=0.0):
    path.write_text("")
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_fresh_heartbeat_exits_0_and_calls_no_slurm_command(setup):
    fake, cfg, hb = setup
    fake.cluster()
    touch(hb, age_s=5)
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == [] and r.stdout == ""


def test_heartbeat_just_inside_the_bound_is_fresh(setup):
    fake, cfg, hb = setup
    fake.cluster()
    touch(hb, age_s=50)
    assert run(cfg).returncode == 0 and fake.calls() == []
    touch(hb, age_s=-50)  # a little ahead (a small step back while lucidd runs): still fresh
    assert run(cfg).returncode == 0 and fake.calls() == []


INBOX_RELEASE = [
    # squeue_inbox.json: jobs 11-18 pending in the inbox; 15 asked for research (lucid:partition=research),
    # the others named no partition: [slurm] default_partition. Jobs 9 and 10 have ended: left alone.
    ["scontrol", "update", "jobid=11,12,13,14,16,17,18", "partition=main"],
    ["scontrol", "update", "jobid=15", "partition=research"],
    ["scontrol", "update", "partitionname=inbox", "state=UP"],
]


@pytest.mark.parametrize("heartbeat", ["stale", "missing", "ahead"])
def test_stale_or_missing_heartbeat_releases_inbox_jobs_and_opens_the_inbox(setup, heartbeat):
    """"ahead": dated an hour ahead of the clock (it stepped back since lucidd wrote it; a review:
    the negative age was never stale, and the inbox stayed DOWN until the clock caught up)."""
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_inbox.json", partitions="partitions_inbox_down.txt")
    if heartbeat == "stale":
        touch(hb, age_s=3600)
    if heartbeat == "ahead":
        touch(hb, age_s=-3600)
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == SNAPSHOT + INBOX_RELEASE
    assert "fail-open" in r.stderr and "set UP" in r.stderr
    assert {"missing": "no heartbeat file", "stale": "(> 60 s)", "ahead": "ahead of this clock"}[heartbeat] in r.stderr


def test_force_acts_despite_a_fresh_heartbeat(setup):
    fake, cfg, hb = setup
    fake.cluster()
    touch(hb)
    r = run(cfg, "--force")
    assert r.returncode == 0 and fake.calls() == SNAPSHOT + INBOX_RELEASE
    assert "--force" in r.stderr


def test_requeued_profiling_jobs_go_to_their_partition_starting_now(setup):
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_requeued.json", partitions="partitions_inbox_down.txt")
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    # the inbox first (each profiling job is a call of its own: a slow slurmctld must not keep the
    # inbox DOWN until systemd kills the run), then the requeued jobs
    assert fake.calls() == SNAPSHOT + [
        ["scontrol", "update", "partitionname=inbox", "state=UP"],
        ["scontrol", "update", "jobid=14", "partition=main", "starttime=now"],
        ["scontrol", "update", "jobid=15", "partition=research", "starttime=now"],
    ]


def test_excnodelists_lucidd_set_for_lent_runs_are_cleared(setup, tmp_path):
    """squeue_requeued.json with ExcNodeLists as lucidd sets them on lent runs (edited copy): the
    requeued job 14 leaves profiling with its list cleared in the same call; job 16, admitted on lent
    GPUs and not started (restart_cnt 0), goes to its partition with its list cleared: left in
    profiling it would start ahead of every queue and run to its end (an admin trial)."""
    import json

    from .fakeslurm import DATA

    data = json.loads((DATA / "squeue_requeued.json").read_text())
    jobs = {j["job_id"]: j for j in data["jobs"]}
    jobs[14]["excluded_nodes"] = "gpu3,gpu4"
    lent = dict(jobs[14], job_id=16, restart_cnt=0, excluded_nodes="gpu1")
    data["jobs"].append(lent)
    edited = tmp_path / "squeue.json"
    edited.write_text(json.dumps(data))
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_requeued.json", partitions="partitions_inbox_down.txt")
    fake.prints("squeue", edited)
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == SNAPSHOT + [
        ["scontrol", "update", "partitionname=inbox", "state=UP"],
        ["scontrol", "update", "jobid=14", "partition=main", "starttime=now", "excnodelist="],
        ["scontrol", "update", "jobid=15", "partition=research", "starttime=now"],
        ["scontrol", "update", "jobid=16", "partition=main", "excnodelist="],
    ]


def test_open_inbox_and_nothing_held_changes_nothing(setup):
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_running.json", partitions="partitions_inbox_up.txt")
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == SNAPSHOT  # read only: running jobs are never touched, the inbox is already UP


def test_custom_partition_names(tmp_path):
    fake = FakeSlurm(tmp_path / "bin").cluster()
    cfg = tmp_path / "lucidd.toml"
    cfg.write_text(f'[slurm]\nbin_dir = "{fake.bin}"\ndefault_partition = "research"\n'
                   f'[daemon]\nheartbeat_file = "{tmp_path / "hb"}"\n')
    assert run(cfg).returncode == 0
    assert fake.calls()[3] == ["scontrol", "update", "jobid=11,12,13,14,15,16,17,18", "partition=research"]


def test_slurm_unavailable_exits_1_with_one_line(setup):
    fake, cfg, hb = setup
    fake.cluster()
    fake.fails("squeue", "squeue: error: Unable to contact slurm controller (connect failure)")
    fake.fails("scontrol", "slurm_update error: Unable to contact slurm controller (connect failure)")
    r = run(cfg)
    assert r.returncode == 1
    assert r.stderr.splitlines() == ["lucidd-failopen: Slurm unavailable: squeue --json: squeue: error: Unable to "
                                     "contact slurm controller (connect failure)"]
    # without the job list it still tries to open the inbox
    assert fake.calls() == [["squeue", "--json"], ["scontrol", "update", "partitionname=inbox", "state=UP"]]


def test_a_job_list_slurm_reports_an_error_for_still_opens_the_inbox(setup):
    """squeue --json exits 0 with an error entry and no jobs when it cannot read the job list: the
    jobs cannot be released one by one, but an open inbox runs those waiting there."""
    from .fakeslurm import DATA

    fake, cfg, hb = setup
    fake.cluster(partitions="partitions_inbox_down.txt")
    fake.prints("squeue", DATA / "squeue_no_controller.json")
    r = run(cfg)
    assert r.returncode == 1 and "Slurm reported an error in its JSON reply" in r.stderr
    assert "set UP without reading the jobs" in r.stderr
    assert fake.calls() == [["squeue", "--json"], ["scontrol", "update", "partitionname=inbox", "state=UP"]]


def test_one_release_failing_does_not_stop_the_others(setup):
    fake, cfg, hb = setup
    fake.cluster()
    data = Path(__file__).resolve().parent / "data"
    fake.script("scontrol", 'case "$1 $3" in "-o partition") cat ' + str(data / "partitions_inbox_down.txt")
                + ";; \"update partition=main\") echo 'slurm_update error: Invalid job id specified' >&2; exit 1;; "
                "esac\nexit 0")
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == SNAPSHOT + INBOX_RELEASE
    assert "could not release" in r.stderr and "the open inbox runs them" in r.stderr


def test_bad_config_with_a_fresh_heartbeat_says_so_and_calls_nothing(setup):
    fake, cfg, hb = setup
    fake.cluster()
    cfg.write_text(cfg.read_text().replace("failopen_after_s = 60", 'failopen_after_s = "60"'))
    touch(hb, age_s=5)
    r = run(cfg)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "[daemon] failopen_after_s" in r.stderr
    assert fake.calls() == []


@pytest.mark.parametrize("fault", ["daemon_value", "slurm_value", "not_toml"])
def test_a_broken_config_never_keeps_the_inbox_shut(setup, tmp_path, fault):
    """A review: a config lucidd-failopen could not use (a TOML typo, a bad [daemon] or [slurm] value)
    made it exit 2 and open nothing, every 15 s; with lucidd stopped (exit 2 on the same file) and the
    inbox DOWN again (`scontrol reconfigure`, a slurmctld restart), every new job waited there
    PartitionDown for as long as the file stayed broken. It still says so (exit 2), and fails open
    with what it can read: the file's valid keys, defaults, job_submit.lua's partition names."""
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_inbox.json", partitions="partitions_inbox_down.txt")
    text = cfg.read_text()
    env = env_without_slurm()
    if fault == "daemon_value":
        cfg.write_text(text.replace("failopen_after_s = 60", "failopen_after_s = 2"))
        touch(hb, age_s=3600)
    elif fault == "slurm_value":
        cfg.write_text(text.replace("command_timeout_s = 10", 'command_timeout_s = "x"'))
        touch(hb, age_s=3600)
    else:  # nothing readable: the Slurm commands on PATH, the partition names from job_submit.lua
        cfg.write_text(text + "interval_s = = 3\n")
        etc = tmp_path / "etc"
        etc.mkdir()
        (etc / "slurm.conf").write_text("")
        (etc / "job_submit.lua").write_text('local INBOX = "inbox"\nlocal PROFILING = "profiling"\n'
                                            'local DEFAULT = "main"\n')
        env = env_without_slurm(PATH=f"{fake.bin}:{os.environ['PATH']}", SLURM_CONF=str(etc / "slurm.conf"))
    r = subprocess.run([str(FAILOPEN), "--config", str(cfg)], capture_output=True, text=True, timeout=120,
                       env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert "config error" in r.stderr.splitlines()[0], r.stderr
    assert fake.calls() == SNAPSHOT + INBOX_RELEASE, r.stderr


def test_a_config_that_is_not_toml_still_finds_a_live_lucidds_heartbeat(setup):
    """A review: a file that does not parse as a whole read as every default, so a lucidd with a
    state_dir of its own, live, had failopen find no heartbeat and open the inbox behind it at every
    run. Each line that is TOML on its own is read under its section: the heartbeat is found."""
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_inbox.json", partitions="partitions_inbox_down.txt")
    cfg.write_text(cfg.read_text() + "interval_s = = 3\n")
    touch(hb, age_s=5)
    r = run(cfg)
    assert r.returncode == 2 and "config error" in r.stderr and fake.calls() == [], r.stderr
    touch(hb, age_s=3600)  # lucidd away: it fails open, with the file's own bin_dir
    r = run(cfg)
    assert r.returncode == 2 and fake.calls() == SNAPSHOT + INBOX_RELEASE, r.stderr


def test_in_process_entry_point(setup, monkeypatch):
    """failopen_main() itself (what the console script calls), with a fresh and a stale heartbeat."""
    fake, cfg, hb = setup
    fake.cluster()
    monkeypatch.delenv("SLURM_CONF", raising=False)
    touch(hb)
    assert failopen_main(["--config", str(cfg)]) == 0 and fake.calls() == []
    touch(hb, age_s=61)
    assert failopen_main(["--config", str(cfg)]) == 0
    assert fake.calls() == SNAPSHOT + INBOX_RELEASE


def test_an_inbox_slurm_does_not_have_is_a_config_error_not_a_silent_success(setup):
    """`[slurm] inbox_partition` misspelled: it exited 0 and opened nothing, while the real inbox
    stayed DOWN with jobs in it (an admin trial)."""
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_inbox.json", partitions="partitions_inbox_down.txt")
    cfg.write_text(cfg.read_text().replace("[slurm]\n", '[slurm]\ninbox_partition = "inbx"\n', 1))
    r = run(cfg, "--force")
    assert r.returncode == 2 and 'inbox_partition = "inbx": Slurm has no such partition' in r.stderr, r.stderr


def test_keys_it_does_not_need_never_keep_the_inbox_shut(setup):
    """An admin trial (28 November 2026) rolled the package back and kept the newer config: the old
    lucidd-failopen refused the newer keys (exit 2) every 15 s and nothing failed open. It reads
    [daemon] and [slurm]; an unknown key anywhere, or a bad value elsewhere, is said and ignored."""
    fake, cfg, hb = setup
    fake.cluster(squeue="squeue_inbox.json", partitions="partitions_inbox_down.txt")
    cfg.write_text(cfg.read_text() + 'future_key = 1\n[profiler]\nlend_idle_gpus_v9 = true\ntprof_s = "ten"\n'
                   '[ordering]\npoints_per_doubling = -4\n[future_section]\nx = 1\n')
    from lucidd.live.config import load_config
    from lucidd.errors import ConfigError

    with pytest.raises(ConfigError):  # lucidd itself refuses it, with the first fault
        load_config(str(cfg))
    touch(hb, age_s=5)
    r = run(cfg)
    assert r.returncode == 0 and fake.calls() == [], r.stderr  # lucidd looks alive: nothing, and no noise
    assert "ignored" not in r.stderr
    touch(hb, age_s=3600)
    r = run(cfg)
    assert r.returncode == 0, r.stderr
    assert fake.calls() == SNAPSHOT + INBOX_RELEASE
    for key in ("[daemon] future_key", "[profiler] lend_idle_gpus_v9", "[profiler] tprof_s", "[future_section]"):
        assert key in r.stderr, (key, r.stderr)
    # what it needs must still be right: a bad [slurm] value is an error (exit 2), yet it still fails
    # open with the key's default (test_a_broken_config_never_keeps_the_inbox_shut)
    cfg.write_text(cfg.read_text().replace("command_timeout_s = 10", 'command_timeout_s = "x"'))
    r = run(cfg)
    assert r.returncode == 2 and "command_timeout_s" in r.stderr


def test_a_command_timeout_that_outlasts_the_watchdog_is_said(tmp_path):
    """A review: three reads of 8 s made a 24 s cycle with no watchdog ping between them; with
    command_timeout_s = 60 (allowed), a slow slurmctld outlasts WatchdogSec=120s and systemd kills lucidd."""
    from lucidd.daemon import watchdog_warning
    from lucidd.live.config import load_config

    cfg = tmp_path / "lucidd.toml"
    cfg.write_text(f'[slurm]\ncommand_timeout_s = 60\n[daemon]\nstate_dir = "{tmp_path}"\n')
    text = watchdog_warning(load_config(str(cfg)), 120.0)
    assert text is not None and "command_timeout_s = 60" in text and "WatchdogSec" in text
    assert watchdog_warning(load_config(str(cfg)), None) is None  # not under systemd's watchdog
    cfg.write_text(f'[slurm]\ncommand_timeout_s = 30\n[daemon]\nstate_dir = "{tmp_path}"\n')
    assert watchdog_warning(load_config(str(cfg)), 120.0) is None  # the defaults are fine


def test_the_watchdog_hears_of_lucidd_before_each_slurm_command(tmp_path):
    """A review: a cycle's three Slurm reads had no watchdog ping between them, so a slurmctld slow
    to answer (bounded reads, lucidd waiting, not hung) got lucidd killed by WatchdogSec. A ping now
    goes before each command the main thread runs, at most one per 5 s; other threads never ping
    (they must not hide a hung main loop), and a failing hook never fails the command."""
    import threading

    from lucidd.backends.slurm import SlurmRunner
    from lucidd.daemon import _WatchdogBeforeSlurmCalls

    pings, now = [], [0.0]

    class Notifier:
        def watchdog(self, status=""):
            pings.append(status)

    runner = SlurmRunner()
    runner.before_call = _WatchdogBeforeSlurmCalls(Notifier(), every_s=5, clock=lambda: now[0])
    runner.run(["true"])
    now[0] = 2
    runner.run(["true"])  # within 5 s of the last ping: none
    now[0] = 6
    runner.run(["true", "x"])
    assert pings == ["waiting for Slurm: true", "waiting for Slurm: true x"]
    now[0] = 60
    t = threading.Thread(target=runner.run, args=(["true"],))
    t.start()
    t.join()
    assert len(pings) == 2  # the refit thread's commands never ping

    def broken(argv):
        raise RuntimeError("socket gone")

    runner.before_call = broken
    assert runner.run(["echo", "ok"]).strip() == "ok"
