"""Issue 12: every table in README.md is the output of the command printed just before it.

Each README table (a code block starting with the summary header) is paired with the shell block
before it, which is re-run here (`--out` into a temporary folder, no progress bar, no plots) and
must print exactly the table's rows. `./scripts/quickstart.sh` stands for `lucidctl simulate` with
no arguments, which is what it runs after installing.
"""

import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO, SHARED

HEADER = "policy"


def _blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)]


def _pairs():
    blocks = _blocks((REPO / "README.md").read_text())
    out = []
    for (lang, cmd), (_, table) in zip(blocks, blocks[1:]):
        if lang == "sh" and table.startswith(HEADER):
            out.append((cmd, table))
    return out


def _argv(cmd: str) -> list[str]:
    """The lucidctl simulate arguments of a README command."""
    cmd = cmd.replace("\\\n", " ")
    if "quickstart.sh" in cmd:
        return []
    line = next(ln for ln in cmd.splitlines() if "lucidctl simulate" in ln)
    words = shlex.split(line.split("#")[0])
    return [w.replace("../shared", str(SHARED)) for w in words[words.index("simulate") + 1:]]


def _rows(table: str) -> list[str]:
    return [" ".join(ln.split()) for ln in table.strip().splitlines()]


def test_every_readme_table_has_its_command():
    pairs = _pairs()
    assert len(pairs) >= 3  # the sample, Venus, Philly
    assert all("lucidctl simulate" in cmd or "quickstart.sh" in cmd for cmd, _ in pairs)


def _ids():
    ids = []
    for cmd, _ in _pairs():
        if "quickstart.sh" in cmd:
            ids.append("sample")
        else:
            ids.append(re.search(r"traces/(\w+?)_", cmd).group(1) if "traces/" in cmd else "other")
    return ids


@pytest.mark.slow
@pytest.mark.parametrize("cmd,table", _pairs(), ids=_ids())
def test_readme_table_is_what_its_command_prints(tmp_path, cmd, table):
    argv = _argv(cmd)
    if any(str(SHARED) in a for a in argv) and not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present")
    if "--out" in argv:
        i = argv.index("--out")
        del argv[i:i + 2]
    r = subprocess.run([sys.executable, "-m", "lucidd.cli", "simulate", *argv, "--out", str(tmp_path / "o"),
                        "--no-progress", "--no-plots"], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [" ".join(ln.split()) for ln in r.stdout.splitlines()]
    start = next(i for i, ln in enumerate(lines) if ln.startswith(HEADER + " "))
    expected = _rows(table)
    assert lines[start:start + len(expected)] == expected
