#!/usr/bin/env bash
# Create .venv and install lucidd into it (editable). Safe to re-run; used by quickstart and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
need_apt=()
command -v "$PY" >/dev/null 2>&1 || need_apt+=(python3)
"$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "install.sh: need ${need_apt[*]} (Python >= 3.11 with venv); install them and re-run" >&2; exit 1
  fi
fi
"$PY" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"install.sh: lucidd needs Python >= 3.11, found {sys.version.split()[0]}")
PY
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# LUCIDD_EXTRAS: the extras to install (scripts/test.sh adds rl for the DL2 smoke training).
extras=${LUCIDD_EXTRAS:-test}
stamp=.venv/.lucidd-installed-${extras//,/-}
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ scripts/constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  # constraints.txt: the numeric stack's exact versions, so replays print the documented figures
  .venv/bin/python -m pip install -q -c scripts/constraints.txt -e ".[$extras]"
  touch "$stamp"
fi
