#!/usr/bin/env bash
# Install lucidd and run its main job on the embedded default: simulate the bundled sample
# trace under every policy and print the comparison (no Slurm, no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/lucidctl simulate "$@"
