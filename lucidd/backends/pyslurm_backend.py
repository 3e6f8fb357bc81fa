"""Optional pyslurm backend, behind the same interface as the CLI backend.

pyslurm binds one Slurm release: the only current one on PyPI (25.11.x) refuses to build against
anything else, and Debian ships Slurm 22.05, so no machine this project tests on can load it
(docs/deploy.md). lucidd therefore uses it only when it imports AND its version matches the
running Slurm's; otherwise the CLI backend runs, which is the tested path. Reads come from
pyslurm; writes go through the same `scontrol` runner as the CLI backend, so the Slurm traps the
daemon guards against (requeue timing, `priority=` pinning) are handled in one place.
"""

from __future__ import annotations

import re

from .base import ClusterSnapshot, LiveJob
from .slurm import SlurmBackend, SlurmRunner, parse_partitions, parse_sinfo


def _slurm_version(runner: SlurmRunner) -> str | None:
    try:
        out = runner.run(["scontrol", "--version"])
    except Exception:  # noqa: BLE001 - no Slurm at all is just "no match"
        return None
    m = re.search(r"(\d+)\.(\d+)", out)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def pyslurm_unavailable_reason(runner: SlurmRunner | None = None) -> str | None:
    """None when pyslurm can be used here, else why not (one line)."""
    try:
        import pyslurm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, or a build for another Slurm
        return f"pyslurm does not import ({type(exc).__name__}: {exc})"
    version = getattr(pyslurm, "__version__", "") or ""
    running = _slurm_version(runner or SlurmRunner())
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m or running is None:
        return f"cannot compare pyslurm {version or '?'} with the running Slurm {running or '?'}"
    if f"{m.group(1)}.{m.group(2)}" != running:
        return f"pyslurm {version} is built for Slurm {m.group(1)}.{m.group(2)}, the running Slurm is {running}"
    return None


class PySlurmBackend(SlurmBackend):  # pragma: no cover - needs a pyslurm that matches the running Slurm
    name = "pyslurm"

    def snapshot(self) -> ClusterSnapshot:
        import pyslurm

        now = int(self.clock())
        jobs = []
        for j in pyslurm.Jobs.load().values():
            d = j.to_dict()
            per_node = d.get("gres_per_node") or {}
            shards = int(per_node.get("shard", 0) or 0)
            gpus = int(per_node.get("gpu", 0) or 0) or (1 if shards else 0)  # a job of shards: one GPU
            jobs.append(LiveJob(
                job_id=int(d["id"]), name=d.get("name") or "", user=d.get("user_name") or "",
                account=d.get("account") or "", qos=d.get("qos") or "", partition=d.get("partition") or "",
                state=str(d.get("state") or "").upper(), reason=d.get("state_reason") or "",
                gpus=gpus * int(d.get("num_nodes") or 1), shards=shards,
                nodes=int(d.get("num_nodes") or 1), submit_time=int(d.get("submit_time") or 0),
                start_time=d.get("start_time") or None, time_limit_s=(d["time_limit"] * 60) if d.get("time_limit") else None,
                restart_count=int(d.get("requeue_count") or 0), requeue=bool(d.get("is_requeueable", True)),
                comment=d.get("comment") or "", admin_comment=d.get("admin_comment") or "",
                priority=int(d.get("priority") or 0), nice=int(d.get("nice") or 0), reservation=str(d.get("reservation") or ""),
                required_nodes=d.get("required_nodes") or "", excluded_nodes=d.get("excluded_nodes") or "",
                node_names=tuple(n for n in str(d.get("nodes") or "").split(",") if n and "[" not in n),
                batch=bool(d.get("is_batch", d.get("batch_flag", True))), deadline=int(d.get("deadline") or 0) or None))
        nodes = parse_sinfo(self.runner.run_json(["sinfo", "--json"]))
        parts = parse_partitions(self.runner.run(["scontrol", "-o", "show", "partition"]), nodes)
        return ClusterSnapshot(now, jobs, parts, nodes)
