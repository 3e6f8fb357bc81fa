#!/usr/bin/env bash
# Install lucidd and run the whole test suite. Tests that need ../shared (real traces, the Lucid
# artifact's data) skip with a reason when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
LUCIDD_EXTRAS=test,rl scripts/install.sh  # rl: PyTorch for the DL2 smoke training (tests/elastic)
exec .venv/bin/python -m pytest -q -ra "$@"
