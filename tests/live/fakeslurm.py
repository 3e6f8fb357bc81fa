"""Small stand-ins for Slurm's client commands, for unit tests only (the real-Slurm tier is
tests/slurm/). Each fake is a /bin/sh script in a temporary `bin_dir`; every call appends its argv
to a log, so a test can check exactly what lucidd ran (and that no shell was involved)."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
_REC = "\x1e"  # between calls
_ARG = "\0"  # between arguments


class FakeSlurm:
    def __init__(self, bin_dir: Path):
        self.bin = Path(bin_dir)
        self.bin.mkdir(parents=True, exist_ok=True)
        self.log = self.bin.parent / f"{self.bin.name}.calls"

    def script(self, name: str, body: str):
        """A fake command: records its argv, then runs `body` (sh)."""
        path = self.bin / name
        path.write_text("#!/bin/sh\n"
                        f"{{ printf '{_REC}%s' \"$(basename \"$0\")\"; printf '\\0%s' \"$@\"; }} "
                        f">> {shlex.quote(str(self.log))}\n"
                        f"{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def prints(self, name: str, text_file: Path | str, rc: int = 0):
        return self.script(name, f"cat {shlex.quote(str(text_file))}\nexit {rc}")

    def fails(self, name: str, message: str, rc: int = 1):
        return self.script(name, f"printf '%s\\n' {shlex.quote(message)} >&2\nexit {rc}")

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        text = self.log.read_text()
        return [rec.split(_ARG) for rec in text.split(_REC)[1:]]

    def cluster(self, squeue="squeue_inbox.json", sinfo="sinfo_idle.json", partitions="partitions_inbox_down.txt"):
        """squeue/sinfo print captured replies; `scontrol -o show partition` prints the partitions,
        every other scontrol call succeeds silently (as `scontrol update` does)."""
        self.prints("squeue", DATA / squeue)
        self.prints("sinfo", DATA / sinfo)
        self.script("scontrol", 'if [ "$1" = "-o" ]; then cat ' + shlex.quote(str(DATA / partitions)) + "; fi\nexit 0")
        self.prints("sacct", DATA / "sacct_finished.json")
        self.script("scancel", "exit 0")
        return self


def env_without_slurm(**extra) -> dict:
    """The environment for a subprocess that must never reach a real slurmctld."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "NOTIFY_SOCKET")}
    env.update(extra)
    return env
