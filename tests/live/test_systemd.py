"""systemd/lucidd.service, lucidd-failopen.service and lucidd-failopen.timer: `systemd-analyze verify`
finds nothing to say about them, and the settings lucidd relies on are there.

verify needs the ExecStart binaries to exist, so the units are copied to tmp_path with ExecStart
pointing at this environment's lucidd/lucidd-failopen. Debian CI has systemd-analyze (package
systemd); elsewhere the verify tests are skipped with a reason.
"""

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "systemd"
NAMES = ["lucidd.service", "lucidd-failopen.service", "lucidd-failopen.timer", "lucidd-sampler.service"]
ANALYZE = shutil.which("systemd-analyze") or ("/usr/bin/systemd-analyze"
                                              if Path("/usr/bin/systemd-analyze").exists() else None)
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (Debian: package systemd)")


def installed(name):
    p = Path(sys.executable).with_name(name)
    return str(p) if p.exists() else shutil.which(name)


def unit(name) -> dict:
    """{section: {key: [values]}} (systemd keys may repeat)."""
    out, section = {}, None
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out.setdefault(section, {})
            continue
        k, _, v = line.partition("=")
        out[section].setdefault(k.strip(), []).append(v.strip())
    return out


def one(u, section, key):
    vals = u[section][key]
    assert len(vals) == 1, (section, key, vals)
    return vals[0]


def copy_for_verify(tmp_path, names=NAMES, edit=None):
    lucidd, failopen, sampler = installed("lucidd"), installed("lucidd-failopen"), installed("lucidd-sampler")
    if not lucidd or not failopen or not sampler:
        pytest.skip("lucidd console scripts not installed in this environment (pip install -e .)")
    for name in NAMES:
        text = (UNITS / name).read_text()
        text = re.sub(r"^ExecStart=/usr/local/bin/lucidd-failopen ", f"ExecStart={failopen} ", text, flags=re.M)
        text = re.sub(r"^ExecStart=/usr/local/bin/lucidd ", f"ExecStart={lucidd} ", text, flags=re.M)
        text = re.sub(r"^ExecStart=/usr/local/bin/lucidd-sampler ", f"ExecStart={sampler} ", text, flags=re.M)
        if edit:
            text = edit(name, text)
        (tmp_path / name).write_text(text)
    return [f"./{n}" for n in names]


def verify(tmp_path, files):
    r = subprocess.run([ANALYZE, "verify", *files], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_LOG_LEVEL": "notice"})
    ours = [ln for ln in (r.stdout + r.stderr).splitlines() if "lucidd" in ln]
    return r, ours


# ----- systemd-analyze verify -------------------------------------------------------------------

@needs_analyze
def test_systemd_analyze_verify_has_nothing_to_say_about_our_units(tmp_path):
    files = copy_for_verify(tmp_path)
    r, ours = verify(tmp_path, files)
    assert ours == [], "\n".join(ours)
    assert r.returncode == 0, r.stderr


@needs_analyze
def test_verify_would_notice_a_broken_unit(tmp_path):
    """The check above can fail: a misspelt key and a bad value are reported with our file's name."""
    def edit(name, text):
        if name == "lucidd.service":
            text = text.replace("WatchdogSec=120s", "WatchdogSec=two minutes")
            text = text.replace("[Install]", "Restat=always\n[Install]")
        return text

    files = copy_for_verify(tmp_path, edit=edit)
    _, ours = verify(tmp_path, files)
    assert any("WatchdogSec" in ln or "sec value" in ln for ln in ours), ours
    assert any("Restat" in ln for ln in ours), ours


@needs_analyze
def test_hardening_exposure_is_low(tmp_path):
    files = copy_for_verify(tmp_path)
    for f in files[:2]:
        r = subprocess.run([ANALYZE, "security", "--offline=true", f], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0 and "offline" in r.stderr:
            pytest.skip("systemd-analyze security --offline needs systemd >= 250")
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
        assert m, r.stdout[-500:] + r.stderr
        assert float(m.group(1)) <= 3.0, f"{f}: exposure {m.group(1)}"


# ----- what lucidd relies on --------------------------------------------------------------------

def test_lucidd_service_settings():
    u = unit("lucidd.service")
    s = u["Service"]
    assert one(u, "Service", "Type") == "notify"
    assert one(u, "Service", "ExecStart") == "/usr/local/bin/lucidd --config /etc/lucidd/lucidd.toml"
    assert one(u, "Service", "WatchdogSec") == "120s"
    assert one(u, "Service", "Restart") == "on-failure" and "RestartSec" in s
    assert "2" in one(u, "Service", "RestartPreventExitStatus").split()  # bad config: no restart loop
    assert one(u, "Service", "User") == "slurm"
    assert one(u, "Service", "StateDirectory") == "lucidd"
    assert "ExecStop" not in s  # SIGTERM makes lucidd release its jobs and open the inbox
    assert s.get("KillSignal", ["SIGTERM"]) == ["SIGTERM"]
    assert one(u, "Install", "WantedBy") == "multi-user.target"


@pytest.mark.parametrize("name", ["lucidd.service", "lucidd-failopen.service"])
def test_hardening_keeps_slurm_reachable(name):
    u = unit(name)
    s = u["Service"]
    assert one(u, "Service", "NoNewPrivileges") == "yes"
    assert one(u, "Service", "ProtectSystem") == "strict"
    assert one(u, "Service", "ProtectHome") == "yes" and one(u, "Service", "PrivateTmp") == "yes"
    # slurmctld/slurmdbd are reached over the network, munge over /run/munge/munge.socket.2
    assert "PrivateNetwork" not in s and "IPAddressDeny" not in s
    families = one(u, "Service", "RestrictAddressFamilies").split()
    assert {"AF_UNIX", "AF_INET", "AF_INET6"} <= set(families) and not families[0].startswith("~")
    for key in ("InaccessiblePaths", "TemporaryFileSystem"):
        for v in s.get(key, []):
            assert not any(p in v for p in ("/run", "/etc/slurm", "/var/lib/lucidd")), (key, v)
    assert "DynamicUser" not in s  # must run as SlurmUser
    if name == "lucidd.service":
        assert one(u, "Service", "ReadWritePaths") == "/var/lib/lucidd"
    else:
        assert "ReadWritePaths" not in s  # the guard only reads the heartbeat


def test_failopen_service_is_independent_of_lucidd():
    u = unit("lucidd-failopen.service")
    assert one(u, "Service", "Type") == "oneshot"
    assert one(u, "Service", "ExecStart") == "/usr/local/bin/lucidd-failopen --config /etc/lucidd/lucidd.toml"
    assert one(u, "Service", "User") == "slurm"
    for key in ("Requires", "BindsTo", "PartOf", "Requisite", "Conflicts", "After", "Wants"):
        for v in u["Unit"].get(key, []):
            assert "lucidd.service" not in v, (key, v)
    assert "Install" not in u  # started by the timer only


def test_timer_runs_every_15_seconds_from_the_start():
    u = unit("lucidd-failopen.timer")
    t = u["Timer"]
    assert one(u, "Timer", "OnUnitActiveSec") == "15s"
    assert one(u, "Timer", "AccuracySec") == "1s"
    assert one(u, "Timer", "Unit") == "lucidd-failopen.service"
    # OnUnitActiveSec alone never fires for a unit that has never run: something must start it
    assert any(k in t for k in ("OnActiveSec", "OnBootSec", "OnStartupSec"))
    assert one(u, "Install", "WantedBy") == "timers.target"
    for key in ("Requires", "BindsTo", "PartOf"):
        assert key not in u.get("Unit", {})


def test_units_parse_as_ini():
    for name in NAMES:
        cp = configparser.ConfigParser(strict=False, interpolation=None)
        cp.optionxform = str
        cp.read_string((UNITS / name).read_text())
        assert cp.sections()


def test_sampler_service_settings():
    """On a GPU node, as root (every user's processes), a notify service that a missing driver
    (exit 3) or a bad config (exit 2) does not put in a restart loop, with the GPUs visible."""
    u = unit("lucidd-sampler.service")
    s = u["Service"]
    assert one(u, "Service", "ExecStart") == "/usr/local/bin/lucidd-sampler --config /etc/lucidd/lucidd.toml"
    assert one(u, "Service", "Type") == "notify" and one(u, "Service", "User") == "root"
    assert set(one(u, "Service", "RestartPreventExitStatus").split()) == {"2", "3"}
    assert "PrivateDevices" not in s and "ProtectProc" not in s  # /dev/nvidia*, other users' /proc
    assert one(u, "Install", "WantedBy") == "multi-user.target"
