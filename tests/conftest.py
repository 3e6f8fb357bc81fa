import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("LUCIDD_SHARED", REPO.parent / "shared"))
VENUS_DIR = SHARED / "traces" / "helios_venus_sept2020_lucid"
PHILLY = SHARED / "traces" / "philly_sia_completed" / "philly.csv"
ARTIFACT = SHARED / "lucid-artifact"


# ----- the real-Slurm tier must run in CI ----------------------------------------------------
# A skipped integration test in CI would be a silent pass of the part that matters most, so with
# CI=true any skipped test marked `slurm` fails the session (the README's test command starts the
# test cluster; see tests/slurm/conftest.py).
_SKIPPED_SLURM = []


def pytest_runtest_logreport(report):
    if report.skipped and "slurm" in report.keywords:
        _SKIPPED_SLURM.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI", "").lower() == "true" and _SKIPPED_SLURM:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = (f"CI=true: {len(_SKIPPED_SLURM)} real-Slurm test(s) skipped (the integration tier must run), "
               f"e.g. {_SKIPPED_SLURM[0]}")
        if tr is not None:
            tr.write_line(msg, red=True)
        session.exitstatus = 1
