"""The slurm.conf settings under which Slurm would not follow lucidd's order, found at lucidd's start:
PriorityType other than multifactor (SiteFactor ignored) and a backfill window shorter than the
time limits (a starving job gets no reservation). Warnings only: lucidd starts either way."""

import json
from pathlib import Path

import pytest

from lucidd.backends.base import BackendError
from lucidd.backends.slurm import SlurmBackend, parse_controller_config
from lucidd.daemon import Daemon
from lucidd.live.config import config_from_dict
from lucidd.live.slurm_settings import bf_window_s, slurm_settings_warnings
from lucidd.live.store import Store
from tests.live.memslurm import Clock, MemSlurm

DATA = Path(__file__).parent / "data"

GOOD = {"PriorityType": "priority/multifactor", "SchedulerType": "sched/backfill",
        "SchedulerParameters": "bf_interval=30,bf_window=10080,bf_continue"}
WEEK = {"main": "7-00:00:00", "research": "2-00:00:00", "inbox": "UNLIMITED", "profiling": "UNLIMITED"}


def test_the_test_clusters_own_scontrol_show_config_is_read():
    c = parse_controller_config((DATA / "scontrol_show_config.txt").read_text())
    assert c["PriorityType"] == "priority/multifactor"
    assert c["SchedulerType"] == "sched/backfill"
    assert c["SchedulerParameters"] == "bf_interval=2"  # a value with '=' in it is kept whole
    assert c["BOOT_TIME"].isdigit()
    assert "Configuration data as of" not in " ".join(c)  # lines without "Name = value" are not settings


def test_the_backend_reads_settings_and_partition_limits_through_scontrol():
    class Runner:
        def run(self, argv, timeout_s=None, env=None):
            if argv == ["scontrol", "show", "config"]:
                assert env == {"SLURM_TIME_FORMAT": "%s"}
                return (DATA / "scontrol_show_config.txt").read_text()
            assert argv == ["scontrol", "-o", "show", "partition"]
            return (DATA / "partitions_inbox_down.txt").read_text()

    b = SlurmBackend(Runner())
    assert b.controller_config()["PriorityType"] == "priority/multifactor"
    assert b.controller_boot_time() == int(b.controller_config()["BOOT_TIME"])
    limits = b.partition_max_times()
    assert set(limits) == {"inbox", "profiling", "main", "research"}
    assert all(v for v in limits.values())


@pytest.mark.parametrize("params, seconds", [
    ("", 86400), ("bf_interval=30", 86400), ("bf_window=10080", 604800),
    ("bf_continue,bf_window=2880,bf_resolution=600", 172800), ("bf_window=abc", None),
    ("BF_WINDOW=2880", 172800),  # Slurm matches the name in any case
    ("bf_window=0", 86400), ("bf_window=50000", 86400),  # outside 1..43200 Slurm uses its default
    ("bf_window=²", None),  # digits that int() would refuse
])
def test_bf_window_is_read_from_scheduler_parameters_in_minutes_with_slurms_default(params, seconds):
    assert bf_window_s(params) == seconds


def test_a_site_set_up_as_docs_deploy_says_gets_no_warning():
    assert slurm_settings_warnings(GOOD, WEEK, {"main", "research"}, True) == []


def test_priority_basic_is_named_because_slurm_then_ignores_sitefactor():
    basic = {**GOOD, "PriorityType": "priority/basic"}
    (w,) = slurm_settings_warnings(basic, WEEK, {"main"}, True)
    assert "PriorityType=priority/basic" in w and "ignores SiteFactor" in w
    # with lucidd's ordering off nothing depends on it, nor on the backfill window
    assert slurm_settings_warnings(basic, WEEK, {"main"}, False) == []
    assert slurm_settings_warnings({**GOOD, "SchedulerParameters": ""}, WEEK, {"main"}, False) == []


def test_a_window_shorter_than_a_partitions_maxtime_names_those_partitions_only():
    default_window = {**GOOD, "SchedulerParameters": "bf_interval=30"}  # Slurm's 1440 minutes
    (w,) = slurm_settings_warnings(default_window, {**WEEK, "quick": "12:00:00"}, {"main", "research", "quick"}, True)
    assert w.startswith("bf_window is 1 day, shorter than")
    assert "main (MaxTime 7-00:00:00)" in w and "research (MaxTime 2-00:00:00)" in w and "quick" not in w
    # the inbox and profiling are UNLIMITED by design: not among the partitions lucidd orders
    assert "inbox" not in w and "profiling" not in w


def test_an_unlimited_partition_is_named_as_one():
    (w,) = slurm_settings_warnings(GOOD, {"main": "UNLIMITED"}, {"main"}, True)
    assert "main (MaxTime UNLIMITED)" in w and "a MaxTime where there is none" in w


def test_what_cannot_be_read_is_not_checked():
    assert slurm_settings_warnings({}, WEEK, {"main"}, True) == []  # a backend that cannot tell
    # another scheduler (sched/builtin has no backfill), an unreadable window, an odd MaxTime
    assert slurm_settings_warnings({**GOOD, "SchedulerType": "sched/builtin"}, WEEK, {"main"}, True) == []
    assert slurm_settings_warnings({**GOOD, "SchedulerParameters": "bf_window=x"}, WEEK, {"main"}, True) == []
    assert slurm_settings_warnings(GOOD, {"main": "soon"}, {"main"}, True) == []
    assert slurm_settings_warnings(GOOD, {}, {"main"}, True) == []  # a partition Slurm did not list


class SettingsSlurm(MemSlurm):
    def __init__(self, clock, config, max_times):
        super().__init__(clock)
        self.config, self.max_times = config, max_times

    def controller_config(self):
        if isinstance(self.config, Exception):
            raise self.config
        return dict(self.config)

    def partition_max_times(self):
        return dict(self.max_times)


def _cfg(tmp_path, **slurm):
    return config_from_dict({"daemon": {"state_dir": str(tmp_path / "state")},
                             "models": {"dir": str(tmp_path / "models")}, "slurm": slurm})


def _lucidctl(capsys, *argv):
    from lucidd.cli import main as lucidctl

    capsys.readouterr()
    assert lucidctl(list(argv)) == 0
    return capsys.readouterr().out


def test_a_start_logs_the_warnings_records_them_for_status_and_still_runs(tmp_path, caplog):
    cfg = _cfg(tmp_path)
    clock = Clock()
    slurm = SettingsSlurm(clock, {**GOOD, "PriorityType": "priority/basic", "SchedulerParameters": ""},
                          {"inbox": "UNLIMITED", "profiling": "UNLIMITED", "main": "3-00:00:00"})
    with caplog.at_level("WARNING", logger="lucidd"):
        d = Daemon(cfg, backend=slurm, clock=clock)
        d.start()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slurm.conf: ")]
    assert len(logged) == 2 and "priority/basic" in logged[0] and "main (MaxTime 3-00:00:00)" in logged[1]
    stored = json.loads(d.store.get_meta("slurm_warnings"))
    assert [f"slurm.conf: {w}" for w in stored] == logged
    clock.t += 10
    assert d.run_once()  # a warning, not a refusal

    # Slurm not answering at the next start: nothing checked, the last start's findings kept
    d.store.release_instance_lock()
    slurm.config = BackendError("scontrol: slurmctld not responding")
    with caplog.at_level("WARNING", logger="lucidd"):
        d2 = Daemon(cfg, backend=slurm, clock=clock)
        d2.start()
    assert "Slurm's settings not checked at start" in caplog.text
    assert json.loads(d2.store.get_meta("slurm_warnings")) == stored

    # fixed settings: the next start records that there is nothing to say
    d2.store.release_instance_lock()
    slurm.config = GOOD
    slurm.max_times = WEEK
    d3 = Daemon(cfg, backend=slurm, clock=clock)
    d3.start()
    assert json.loads(d3.store.get_meta("slurm_warnings")) == []


def test_lucidctl_status_shows_the_warnings_of_the_last_start(tmp_path, capsys):
    cfg_path = tmp_path / "lucidd.toml"
    cfg_path.write_text(f'[daemon]\nstate_dir = "{tmp_path / "state"}"\n[models]\ndir = "{tmp_path / "models"}"\n')
    from lucidd.live.config import load_config

    cfg = load_config(str(cfg_path))
    store = Store(cfg.database.url)
    store.create()
    status = ("--json", "status", "--config", str(cfg_path))
    assert json.loads(_lucidctl(capsys, *status))["slurm_warnings"] is None  # no start recorded them yet
    store.set_meta("slurm_warnings", json.dumps(["PriorityType=priority/basic: Slurm ignores SiteFactor"]))
    assert json.loads(_lucidctl(capsys, *status))["slurm_warnings"] == [
        "PriorityType=priority/basic: Slurm ignores SiteFactor"]
    text = _lucidctl(capsys, "status", "--config", str(cfg_path))
    assert "slurm.conf (as lucidd found it when it started): PriorityType=priority/basic" in text


def test_a_backend_that_cannot_tell_or_an_unforeseen_reply_records_nothing_and_starts(tmp_path, caplog):
    cfg = _cfg(tmp_path)
    clock = Clock()
    slurm = SettingsSlurm(clock, {}, WEEK)  # MemSlurm-like backends: the base class's {}
    d = Daemon(cfg, backend=slurm, clock=clock)
    d.start()
    assert d.store.get_meta("slurm_warnings") is None  # not checked is not "nothing found"
    d.store.release_instance_lock()
    slurm.config = GOOD
    slurm.partition_max_times = lambda: 1 / 0
    with caplog.at_level("ERROR", logger="lucidd"):
        d2 = Daemon(cfg, backend=slurm, clock=clock)
        d2.start()
    assert "Slurm's settings not checked at start" in caplog.text
    clock.t += 10
    assert d2.run_once()


def test_a_check_run_reads_the_settings_and_writes_nothing(tmp_path, caplog):
    cfg = _cfg(tmp_path)
    clock = Clock()
    slurm = SettingsSlurm(clock, {**GOOD, "PriorityType": "priority/basic"}, WEEK)
    with caplog.at_level("WARNING", logger="lucidd"):
        Daemon(cfg, dry_run=True, check=True, backend=slurm, clock=clock).start()
    assert "slurm.conf: PriorityType=priority/basic" in caplog.text
    assert not (tmp_path / "state" / "lucidd.db").exists()


def test_partition_settings_the_inbox_cannot_carry_are_warned_of():
    """A review (2 December 2026): Slurm checks access lists, per-node limits and the partition QOS,
    and applies the partition's defaults, at submission, against the inbox, so none of them held for
    a job in the inbox or in profiling, and a job kept the inbox's defaults after its release."""
    from lucidd.live.slurm_settings import partition_limit_warnings

    class Runner:
        def __init__(self, text):
            self.text = text

        def run(self, argv, timeout_s=None, env=None):
            assert argv == ["scontrol", "-o", "show", "partition"]
            return self.text

    text = (DATA / "partitions_inbox_down.txt").read_text()
    same = SlurmBackend(Runner(text)).partition_settings()
    assert set(same) >= {"inbox", "profiling", "main"} and same["main"]["AllowAccounts"] == "ALL"
    assert partition_limit_warnings(same, {"main", "research"}, "inbox") == []  # the test cluster: as the inbox
    lines = text.splitlines()
    main = next(i for i, line in enumerate(lines) if line.startswith("PartitionName=main "))
    lines[main] = (lines[main].replace("AllowAccounts=ALL", "AllowAccounts=lab,ops").replace("QoS=N/A", "QoS=mainq")
                   .replace("JobDefaults=(null)", "JobDefaults=DefCpuPerGPU=4,DefMemPerGPU=8000"))
    (w,) = partition_limit_warnings(SlurmBackend(Runner("\n".join(lines))).partition_settings(), {"main"}, "inbox")
    # (access lists are not warned of: a job they keep out goes to its partition unprofiled)
    assert w.startswith("partition main: QoS=mainq (the inbox: N/A), "
                        "JobDefaults=DefCpuPerGPU=4,DefMemPerGPU=8000 (the inbox: (null))")
    assert partition_limit_warnings({}, {"main"}, "inbox") == []  # not read: not checked


def test_a_min_job_age_under_three_cycles_is_warned_of():
    """MinJobAge=2 with lucidd's 10 s cycle: 7 of 7 short jobs were recorded as GONE, without their end
    (a review on a test cluster, 3 December 2026)."""
    (w,) = slurm_settings_warnings({**GOOD, "MinJobAge": "2 sec"}, WEEK, {"main"}, True, 10.0)
    assert w.startswith("MinJobAge=2 s, under 3 x lucidd's interval_s (10 s)") and "30 s or more" in w
    assert slurm_settings_warnings({**GOOD, "MinJobAge": "300 sec"}, WEEK, {"main"}, True, 10.0) == []
    assert slurm_settings_warnings({**GOOD, "MinJobAge": "2 sec"}, WEEK, {"main"}, True) == []  # no interval
