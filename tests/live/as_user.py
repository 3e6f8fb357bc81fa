"""Run a function as another user, for tests of what lucidd's files let users do. Needs root.

The function runs in a forked child of the test that drops to uid/gid `nobody` with the given
supplementary groups. It runs in-process, not as a new program: the interpreter may live where
`nobody` cannot read it (a root-only pyenv), so whatever it imports must be imported already."""

from __future__ import annotations

import os
import sys

NOBODY = 65534


def as_nobody(fn, groups=()):
    """`fn()` as nobody: (its int result, or 99 if it raised; stdout; stderr)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        rc = 99
        try:
            os.setgroups(list(groups))
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = os.fdopen(1, "w")
            sys.stderr = os.fdopen(2, "w")
            rc = int(fn() or 0)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent through stderr
            print(f"child raised {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r) as o, os.fdopen(err_r) as e:
        out, err = o.read(), e.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out, err
