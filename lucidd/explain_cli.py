"""`lucidctl explain job ID --sim-out DIR`: why a simulated Lucid job was scheduled the way it was.

Reads ``DIR/jobs_lucid.csv`` (else another ``jobs_lucid*.csv`` variant) and the models that
``lucidctl simulate`` saved in ``DIR/models/`` (orchestrator/artifacts.py), and reports for one job:
its facts, its duration estimate with the top EBM contributions (or the fallback rule and why), its
packing class with the decision-tree path, what the profiler did with it, and the orchestrator's
decision (packed or not, with whom, and why). Output contract: docs/cli.md ("explain").
"""

from __future__ import annotations

import bisect
import glob
import json
import math
import os
import re

import pandas as pd

from .errors import LucidError
from .jobs import within_limit

CLASS_NAMES = {0: "Tiny", 1: "Medium", 2: "Jumbo"}
TOP_TERMS = 8  # terms shown in the text output (JSON carries them all)


def explain_sim_job(args) -> int:
    from orchestrator.artifacts import json_safe

    result = explain_job(args.sim_out, str(args.id))
    if getattr(args, "json", False):
        print(json.dumps(json_safe(result), indent=2))
    else:
        print(render(result))
    return 0


# ----- gathering ------------------------------------------------------------------------------------

def _jobs_file(sim_out: str) -> tuple[str, str]:
    if not os.path.isdir(sim_out):
        raise LucidError(f"{sim_out}: no such simulation output directory")
    path = os.path.join(sim_out, "jobs_lucid.csv")
    if not os.path.exists(path):
        variants = sorted(glob.glob(os.path.join(sim_out, "jobs_lucid*.csv")))
        if not variants:
            raise LucidError(f"{sim_out}: no jobs_lucid*.csv; explain needs a run with "
                             f"`lucidctl simulate --policies lucid --out {sim_out}`")
        path = variants[0]
    policy = os.path.basename(path)[len("jobs_"):-len(".csv")]
    return path, policy


def _read_jobs(path: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as exc:  # noqa: BLE001 -- unreadable or empty file
        raise LucidError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None
    if "job_id" not in df.columns:
        raise LucidError(f"{path}: no job_id column")
    return df


def _num(v):
    """A CSV cell as int/float (None when empty or not a number)."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and math.isnan(v) else v
    s = str(v).strip()
    if s == "":
        return None
    try:
        f = float(s)
    except ValueError:
        return None
    if math.isnan(f):
        return None
    return int(f) if f.is_integer() else f


def _bool(v) -> bool:
    return str(v).strip().lower() in ("true", "1", "1.0", "yes")


def _id_text(v) -> str | None:
    """A job id cell (ids written from a float column come back as '100075.0')."""
    s = str(v).strip() if v is not None else ""
    if s == "" or s.lower() == "nan":
        return None
    return s[:-2] if re.fullmatch(r"-?\d+\.0", s) else s


def nearby_ids(ids, wanted: str, n: int = 5) -> list[str]:
    """A few ids close to `wanted`: numerically when all ids are plain integers, else in sort order;
    for a job with array tasks (`32` of `32_0`, `32_1`, ...), its tasks first."""
    ids = [str(i) for i in dict.fromkeys(ids)]
    tasks = [i for i in ids if i.startswith(f"{wanted}_")]
    if tasks:
        return sorted(tasks, key=lambda i: (len(i), i))[:n]
    # digits only: int() also takes "32_1" (Python's digit separators) and suggested 321 for 32_9
    plain = re.compile(r"-?\d+")
    if not (all(plain.fullmatch(i) for i in ids) and re.fullmatch(r"-?\d+(\.0)?", wanted)):
        keys = sorted(ids)
        k = bisect.bisect_left(keys, wanted)
        return keys[max(0, k - n // 2): max(0, k - n // 2) + n]
    nums = sorted(int(i) for i in ids)
    w = int(float(wanted))
    k = bisect.bisect_left(nums, w)
    window = nums[max(0, k - n): k + n]
    return [str(x) for x in sorted(sorted(window, key=lambda x: (abs(x - w), x))[:n])]


def explain_job(sim_out: str, job_id: str) -> dict:
    """Everything `explain` reports for one job, as plain data (the --json object)."""
    from orchestrator.artifacts import load_artifacts

    path, policy = _jobs_file(sim_out)
    jobs = _read_jobs(path)
    jobs["job_id"] = jobs["job_id"].map(_id_text)
    hit = jobs[jobs["job_id"] == str(job_id)]
    if hit.empty:
        near = nearby_ids(jobs["job_id"].dropna().tolist(), str(job_id))
        raise LucidError(f"job {job_id} is not in {path} ({len(jobs):,} jobs)"
                         + (f"; nearby ids: {', '.join(near)}" if near else ""))
    row = hit.iloc[0]
    try:
        art = load_artifacts(sim_out)
    except FileNotFoundError:
        raise LucidError(f"{os.path.join(sim_out, 'models', 'index.json')}: no saved models; re-run "
                         f"`lucidctl simulate --policies lucid --out {sim_out}` to save what explain needs") from None
    except Exception as exc:  # noqa: BLE001 -- corrupt index or feature table
        raise LucidError(f"{os.path.join(sim_out, 'models')}: unreadable ({exc.__class__.__name__}: {exc})") from None
    feat = art.row(str(job_id))
    if feat is None:
        raise LucidError(f"job {job_id} is in {os.path.basename(path)} but not in {sim_out}/models/: the models "
                         "are from another run; re-run the simulation to save them again")
    warnings: list[str] = list(art.index.get("errors") or [])
    by_id = jobs.set_index("job_id", drop=False)
    return {
        "job_id": str(job_id),
        "policy": policy,
        "jobs_file": os.path.abspath(path),
        "origin": art.index.get("origin"),
        "job": _facts(row),
        "estimate": _estimate(row, feat, art, policy, warnings),
        "packing": _packing(row, feat, art, policy, warnings),
        "profiler": _profiler(row, art, policy),
        "decision": _decision(row, by_id, policy, art.index.get("options") or {}),
        "warnings": warnings,
    }


def _facts(row) -> dict:
    facts = {k: _num(row.get(k)) for k in ("gpu_num", "submit_time", "start_time", "end_time", "duration",
                                            "queue_s", "jct_s", "shared_s", "preemptions")}
    facts["vc"] = row.get("vc") or None
    facts["user"] = row.get("user") or None
    facts["shared"] = _bool(row.get("shared"))
    return facts


def _estimate(row, feat, art, policy: str, warnings: list) -> dict:
    from orchestrator.artifacts import explain_estimate, fallback_rule, feature_frame

    used = _num(row.get("estimate_s"))
    out = {"seconds": used, "actual_s": _num(row.get("duration")), "source": None, "model_version": None,
           "model_seconds": None, "kind": None, "reason": "", "intercept": None, "terms": [],
           "capped_at_limit_s": None}
    if policy == "lucid-oracle":
        out.update(source="oracle", kind="oracle", reason="lucid-oracle orders the queue by the true duration")
        return out
    dur = art.index.get("duration")
    if not isinstance(dur, dict) or not dur or "estimate_source" not in feat.index:  # (a hand-edited index: a string)
        out.update(source="unknown", kind="unknown", reason="no duration model information was saved for this run")
        return out
    src, version = str(feat["estimate_source"]), int(feat["model_version"])
    out.update(source=src, model_version=version)
    feats = feature_frame(feat)
    if version > 0:
        info = next((v for v in dur.get("versions", []) if int(v["version"]) == version), None)
        if info is None:
            out.update(kind="unknown", reason=f"EBM v{version} produced this estimate but was not saved")
            return out
        expl = explain_estimate(art.duration_model(version), feats)
        trained = (f"EBM v{version}, refitted at t={_s(info.get('refit_time'))} on the {info.get('train_rows'):,} jobs "
                   f"that had ended by then")
        if expl.kind == "ebm":
            out.update(kind="ebm", intercept=expl.intercept, reason=f"{trained}; {expl.reason}",
                       terms=[{"term": t.term, "value": t.value, "contribution": t.contribution} for t in expl.terms])
        else:
            out.update(kind="fallback", reason=f"{trained}, not applied: {expl.reason}")
        out["model_seconds"] = float(expl.prediction)
    else:
        rule = fallback_rule(feats.iloc[0], src, float(dur.get("default_estimate_s", 3600.0)))
        out.update(kind="fallback", model_seconds=float(feat["estimate"]),
                   reason=f"no EBM yet: {_why_no_model(feat, dur)}; estimate = {rule}")
    ms = out["model_seconds"]
    limit = _num(feat.get("time_limit")) if "time_limit" in feat.index else None
    expected = None if ms is None else within_limit(max(1.0, ms), limit)
    if expected is not None and ms is not None and expected < max(1.0, ms):
        out["capped_at_limit_s"] = limit
        out["reason"] += f"; capped at the job's own time limit, {limit:,.0f} s (Slurm ends it there)"
    if used is not None and expected is not None and abs(expected - used) > 1e-6 * max(1.0, abs(used)):
        warnings.append(f"the saved models give {expected:.6g} s, the run used {used:.6g} s: models/ is from another run?")
    return out


def contribution_lines(intercept, terms: list, indent: str = "  ") -> list:
    """An EBM estimate's top terms as a text table (the simulator's and the live daemon's
    `explain`); [] without terms."""
    from models.render import format_value, render_table

    if not terms:
        return []
    shown = terms[:TOP_TERMS]
    rows = [["(intercept)", "", f"{intercept:+.4g}", f"x{math.exp(intercept):.3g}"]]
    for t in shown:
        value = " x ".join(format_value(v) for v in t["value"].values()) if isinstance(t["value"], dict) \
            else format_value(t["value"])
        rows.append([t["term"], value, f"{t['contribution']:+.4g}", f"x{math.exp(t['contribution']):.3g}"])
    rest = terms[len(shown):]
    if rest:
        c = sum(t["contribution"] for t in rest)
        rows.append([f"({len(rest)} more terms)", "", f"{c:+.4g}", f"x{math.exp(c):.3g}"])
    return [f"{indent}top contributions (log1p seconds; x = factor on 1 + duration):",
            render_table(["term", "value", "contribution", "factor"], rows, align="llrr", indent=indent + "  ")]


def _why_no_model(feat, dur: dict) -> str:
    submit = _num(feat.get("submit_time")) if "submit_time" in feat.index else None
    refits = sorted(dur.get("refits") or [], key=lambda r: r["refit_time"])
    period = int(dur.get("refit_every_s", 604800))
    if not refits:
        return (f"the trace spans less than one refit period ({period // 86400} days), so the duration model "
                "was never fitted")
    before = [r for r in refits if submit is not None and r["refit_time"] <= submit]
    if not before:
        return f"submitted before the first weekly refit (t={_s(refits[0]['refit_time'])})"
    last = before[-1]
    if last.get("skipped"):
        return f"the refit at t={_s(last['refit_time'])} was skipped ({last['skipped']})"
    return "no fitted model covered this submission"


def _packing(row, feat, art, policy: str, warnings: list) -> dict:
    score = _num(row.get("share_score"))
    out = {"share_score": score, "class": CLASS_NAMES.get(score) if score is not None else None,
           "kind": "none", "path": [], "leaf": "", "reason": "", "features": {}}
    if policy == "lucid-nopacking":
        out["reason"] = "packing is disabled in lucid-nopacking: jobs get no class and never share GPUs"
        return out
    info = art.index.get("packing")
    if not info:
        out["reason"] = "no packing model was saved for this run"
        return out
    if not info.get("fitted"):
        out["reason"] = info.get("reason", "no packing model was fitted")
        return out
    from orchestrator.artifacts import PACKING_FEATURES

    x = {c: (None if pd.isna(feat.get(c)) else float(feat.get(c))) for c in PACKING_FEATURES}
    out["features"] = x
    expl = art.packing_model().explain(x)
    pred = int(expl.prediction)
    out.update(kind=expl.kind, path=list(expl.path), share_score=pred, **{"class": CLASS_NAMES.get(pred)})
    if expl.kind == "tree":
        out["leaf"] = expl.reason
        out["reason"] = f"decision tree trained on {info.get('source') or 'labelled workloads'}"
    else:
        out["reason"] = expl.reason
    if score is not None and int(score) != pred:
        warnings.append(f"the saved packing model gives class {pred}, the run used {score}: models/ is from another run?")
    return out


def _default_tprof(policy: str) -> int:
    """Tprof of a run that did not set it: the paper's 200 s for Lucid's own engine, lucidd's
    `[profiler] tprof_s` default for Lucid as lucidd runs it."""
    if policy.startswith("lucid-standalone"):
        return 200
    from .live.config import config_from_dict

    return config_from_dict({}).profiler.tprof_s


def _profiler(row, art, policy: str) -> dict:
    profiled, finished = _bool(row.get("profiled")), _bool(row.get("profiler_finished"))
    opts = art.index.get("options") or {}
    tprof = opts.get("tprof") or _default_tprof(policy)
    out = {"profiled": profiled, "finished": finished, "start": _num(row.get("profiler_start")),
           "end": _num(row.get("profiler_end")), "tprof_s": tprof, "reason": ""}
    if policy == "lucid-noprofiler":
        out["reason"] = "no profiling partition in lucid-noprofiler"
    elif not profiled:
        nprof = opts.get("nprof") or 8
        gpus = _num(row.get("gpu_num")) or 0
        own = str(row.get("profile_reason") or "").strip()
        off = opts.get("profiling") is False or opts.get("cprof") == 0
        if own:  # the replay's own reason (lucidd's words), when it wrote one (_read_jobs keeps "" empty)
            out["reason"] = own
        elif gpus > nprof:
            out["reason"] = f"not profiled: {gpus} GPUs > Nprof {nprof}"
        else:
            out["reason"] = "not profiled (the profiler was off for this run)" if off else "not profiled"
    elif finished:
        out["reason"] = f"ran {_s(out['start'])} .. {_s(out['end'])} and finished inside Tprof={tprof} s"
    else:
        out["reason"] = (f"ran {_s(out['start'])} .. {_s(out['end'])}, did not finish inside Tprof={tprof} s: "
                         "requeued to the main cluster, restarted there with no credit")
    return out


_RANK = re.compile(r"queue rank (\d+)")
_JOINED = re.compile(r"^packed with job (\S+?):")


def _decision(row, by_id: pd.DataFrame, policy: str, options: dict) -> dict:
    reason = str(row.get("decision") or "")
    partner = _id_text(row.get("packed_with"))
    out = {"reason": reason, "packed": False, "role": None, "packed_with": partner, "partner_class": None,
           "not_packed_because": None, "queue_rank": None, "starvation_guard": reason.startswith("starvation guard"),
           "summary": ""}
    m = _RANK.search(reason)
    if m:
        out["queue_rank"] = int(m.group(1))
    if partner is not None and partner in by_id.index:
        p = by_id.loc[partner]
        p = p.iloc[0] if isinstance(p, pd.DataFrame) else p
        ps = _num(p.get("share_score"))
        out["partner_class"] = CLASS_NAMES.get(ps) if ps is not None else None
    j = _JOINED.match(reason)
    if reason.startswith("finished inside the profiler"):
        out.update(role="profiler", summary="finished in the profiler; the orchestrator never had to place it")
    elif j:
        out.update(role="joined", packed=True, packed_with=_id_text(j.group(1)),
                   summary=f"packed onto the GPUs of running job {_id_text(j.group(1))}: {reason.split(': ', 1)[-1]}")
    elif "not packed:" in reason:
        why = reason.split("not packed:", 1)[1].strip()
        if why.startswith("packing off") and policy == "lucid-nopacking":
            why = "packing is disabled in lucid-nopacking"
        elif why.startswith("packing off") and options.get("gss") == 0:
            why = "packing is disabled (--gss 0)"
        out["not_packed_because"] = why
        guard = " (starvation guard: it had waited past the limit and jumped the queue)" \
            if out["starvation_guard"] else ""
        if partner is not None:
            out.update(role="host", packed=True, summary=f"started on exclusive GPUs{guard} (not packed: {why}); "
                                                         f"later job {partner} was packed onto them")
        else:
            out.update(role="exclusive", summary=f"ran on exclusive GPUs{guard}; not packed: {why}")
    elif reason:
        out.update(role="other", summary=reason)
    else:
        out.update(summary="no decision recorded for this job")
    return out


# ----- rendering ------------------------------------------------------------------------------------

def _s(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f} s"
    return f"{int(v):,} s"


def _t(v, r: dict) -> str:
    """A time: seconds since the trace origin, and the wall-clock time when the origin is known."""
    if v is None or not r.get("origin"):
        return _s(v)
    at = pd.Timestamp(r["origin"]) + pd.Timedelta(seconds=float(v))
    return f"{at:%Y-%m-%d %H:%M:%S} ({_s(v)})"


def render(r: dict) -> str:
    from models.render import format_value, render_table

    j = r["job"]
    lines = [f"job {r['job_id']}  ({r['policy']}, {r['jobs_file']})",
             f"  {j['gpu_num']} GPU(s), vc {j['vc'] or '-'}, user {j['user'] or '-'}",
             f"  submit {_t(j['submit_time'], r)}  start {_t(j['start_time'], r)}  end {_t(j['end_time'], r)}",
             f"  queue {_s(j['queue_s'])}, JCT {_s(j['jct_s'])}, run time alone {_s(j['duration'])}"
             + (f", shared GPUs for {_s(j['shared_s'])}" if j.get("shared") else ""),
             ""]
    e = r["estimate"]
    src = e["source"] if e["kind"] != "ebm" else f"EBM v{e['model_version']}"
    lines.append(f"duration estimate: {_s(e['seconds'])} (actual {_s(e['actual_s'])}), source: {src}")
    for part in (e["reason"].split("; ", 1) if e["kind"] == "ebm" else [e["reason"]]):
        if part:
            lines.append(f"  {part}")
    lines += contribution_lines(e["intercept"], e["terms"])
    lines.append("")
    p = r["packing"]
    if p["class"] is not None:
        lines.append(f"packing class: {p['class']} (sharing score {p['share_score']})")
    else:
        lines.append("packing class: none")
    if p["features"]:
        lines.append("  inputs: " + ", ".join(f"{k} {format_value(v)}" for k, v in p["features"].items()))
    if p["reason"]:
        lines.append(f"  {p['reason']}")
    for i, step in enumerate(p["path"], 1):
        lines.append(f"  {i}. {step}")
    if p["leaf"]:
        lines.append(f"  => {p['leaf']}")
    lines.append("")
    lines.append(f"profiler: {r['profiler']['reason']}")
    d = r["decision"]
    lines.append(f"decision: {d['summary']}")
    if d["reason"] and d["role"] != "joined":
        lines.append(f"  orchestrator: {d['reason']}")
    if d["packed_with"] and d["partner_class"]:
        lines.append(f"  partner {d['packed_with']} is {d['partner_class']}")
    for w in r["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)

