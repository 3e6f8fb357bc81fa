"""`lucidctl explain` on a lent run that `[profiler] keep_lent_while_idle` keeps past its Tprof.

No action is recorded while such a run goes on (only its reclaim, if one comes, is), so the story
must say why a job admitted with "Tprof 3600 s" is still in profiling hours later.
"""

from __future__ import annotations

from types import SimpleNamespace

from lucidd.admin_cli import _kept_lent_note


def _cfg(keep=True, tprof=600, long_tprof=3600):
    return SimpleNamespace(profiler=SimpleNamespace(keep_lent_while_idle=keep, tprof_s=tprof, long_tprof_s=long_tprof))


def _run(**kw):
    r = dict(lent=True, phase="profiling", profile="admitted", profile_start=1_000)
    r.update(kw)
    return SimpleNamespace(**r)


def test_a_lent_run_past_its_tprof_is_said_to_be_kept():
    note = _kept_lent_note(_cfg(), _run(), now=1_000 + 5_000)
    assert note and "5000 s, past its Tprof 3600 s: kept there" in note and "keep_lent_while_idle" in note


def test_no_note_before_its_tprof_or_without_the_key_or_for_a_run_not_lent():
    assert _kept_lent_note(_cfg(), _run(), now=1_000 + 3_599) is None
    assert _kept_lent_note(_cfg(keep=False), _run(), now=1_000 + 5_000) is None
    assert _kept_lent_note(_cfg(), _run(lent=False), now=1_000 + 5_000) is None
    assert _kept_lent_note(_cfg(), _run(profile="requeued"), now=1_000 + 5_000) is None
    assert _kept_lent_note(_cfg(), _run(profile_start=None), now=1_000 + 5_000) is None


def test_without_long_tprof_a_lent_run_has_tprof_s():
    note = _kept_lent_note(_cfg(long_tprof=0), _run(), now=1_000 + 700)
    assert note and "past its Tprof 600 s" in note
