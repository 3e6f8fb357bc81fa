#!/usr/bin/env bash
# Install lucidd and run the whole test suite. Tests that need ../shared (real traces, the Lucid
# artifact's data) skip with a reason when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/python -m pytest -q -ra "$@"
