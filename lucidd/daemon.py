"""`lucidd`: the scheduling daemon (live-cluster loop arrives with its own issue).

The command-line contract is fixed now so packaging and the systemd unit can rely on it:
`lucidd --config FILE [--backend slurm|sim] [--once] [--dry-run]`.
"""

from __future__ import annotations

import argparse
import sys

from . import __version__


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lucidd", description="Lucid GPU scheduler daemon for Slurm")
    p.add_argument("--config", required=True, help="configuration file (keys documented in docs/)")
    p.add_argument("--backend", choices=["slurm", "sim"], default="slurm")
    p.add_argument("--once", action="store_true", help="run a single reconcile and exit")
    p.add_argument("--dry-run", action="store_true", help="decide and log, change nothing in Slurm")
    p.add_argument("--version", action="version", version=f"lucidd {__version__}")
    p.parse_args(argv)
    print("lucidd: the live reconcile loop is not built yet (see the project's open issues); "
          "`lucidctl simulate` runs the scheduler on traces", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
