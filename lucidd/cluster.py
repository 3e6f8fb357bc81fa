"""Cluster model: virtual clusters of identical GPU nodes, and consolidated placement.

Placement follows the Lucid artifact's "consolidate" placer exactly (see docs/simulator.md):
jobs of up to one node's GPUs go to a single node, best fit (fewest free GPUs that still fit,
lowest node index on ties); larger jobs take whole free nodes, plus one partial node for a
remainder. That exactness is what lets our per-job results match the original simulator.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .csvfiles import RowWidthError, read_table, row_line
from .errors import ConfigError, TraceError


#: The most nodes a simulated cluster may have, all VCs together. The largest GPU clusters have
#: tens of thousands of nodes; a replay of 100,000 takes under a minute, while a mistyped count
#: (a billion nodes) would fill the machine's memory before the first job starts.
MAX_NODES = 100_000


@dataclass
class VCSpec:
    name: str
    nodes: int
    gpus_per_node: int = 8

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class ClusterSpec:
    """Virtual clusters (static partitions) of identical nodes, as `vc_config.csv` describes."""

    vcs: dict[str, VCSpec] = field(default_factory=dict)
    source: str = ""
    notes: list = field(default_factory=list)  # what the sizing of a trace-sized spec should tell its reader

    @property
    def total_gpus(self) -> int:
        return sum(v.gpus for v in self.vcs.values())

    @property
    def total_nodes(self) -> int:
        return sum(v.nodes for v in self.vcs.values())

    def describe(self) -> str:
        parts = ", ".join(f"{v.name}:{v.nodes}x{v.gpus_per_node}" for v in self.vcs.values())
        return f"{len(self.vcs)} VCs, {self.total_nodes} nodes, {self.total_gpus} GPUs ({parts})"


def load_vc_config(path, gpus_per_node: int = 8) -> ClusterSpec:
    """Read a VC config: the artifact's layout (`,num` header: VC name, node count) or
    `vc,nodes[,gpus_per_node]`."""
    path = os.fspath(path)
    try:
        # text as written: a VC named "NA" or "null" is a VC, not a missing value
        df = read_table(path, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise ConfigError(f"{path}: VC config not found") from None
    except RowWidthError as exc:
        raise ConfigError(f"{path}: {exc} (expected `vc,nodes[,gpus_per_node]` on every row)") from None
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: VC config is an empty file (expected a header line, e.g. "
                          "`vc,nodes,gpus_per_node`, and one row per VC)") from None
    except Exception as exc:
        raise ConfigError(f"{path}: cannot read VC config ({exc})") from None
    if df.empty:
        raise ConfigError(f"{path}: VC config has no rows")
    cols = [str(c).strip() for c in df.columns]
    df.columns = cols
    if "vc" in cols and "nodes" in cols:
        name_col, nodes_col = "vc", "nodes"
    elif "num" in cols:
        name_col, nodes_col = cols[0], "num"
    else:
        raise ConfigError(f"{path}: expected columns 'vc,nodes[,gpus_per_node]' or the artifact's ',num' layout, got {cols}")
    spec = ClusterSpec(source=path)
    for i, row in df.iterrows():
        line = row_line(df, i)
        name = str(row[name_col]).strip()
        try:
            nodes = _whole(row[nodes_col])
            gpn = _whole(row["gpus_per_node"]) if "gpus_per_node" in cols else gpus_per_node
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{path}, row {line}: node and GPU counts must be whole numbers") from None
        if not name or name == "nan":
            raise ConfigError(f"{path}, row {line}: empty VC name")
        if nodes <= 0 or gpn <= 0:
            raise ConfigError(f"{path}, row {line}: VC '{name}' needs a positive node and GPU count")
        if gpn > 64:  # as --gpus-per-node
            raise ConfigError(f"{path}, row {line}: VC '{name}' has {gpn} GPUs per node; at most 64")
        if name in spec.vcs:
            raise ConfigError(f"{path}, row {line}: VC '{name}' listed twice")
        spec.vcs[name] = VCSpec(name, nodes, gpn)
        if spec.total_nodes > MAX_NODES:
            raise ConfigError(f"{path}, row {line}: the VCs up to '{name}' have {spec.total_nodes} nodes; "
                              f"at most {MAX_NODES:,} in all")
    return spec


def _whole(value) -> int:
    """A count as a VC config may write it ("4", 4, 4.0), refusing what is not a whole number
    (2.5 used to become 2 without a word)."""
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


def size_cluster_from_trace(jobs: pd.DataFrame, gpus_per_node: int = 8, nodes: int | None = None,
                            target_load: float = 0.9) -> ClusterSpec:
    """Size VCs for a trace that comes without a VC config.

    With `nodes`, all jobs share one VC of that many nodes. Otherwise each VC gets enough nodes
    that its offered GPU load (GPU-seconds / (span x GPUs)) is about `target_load`, and at least
    enough for its largest job, but never more GPUs than all its jobs ask for together (more could
    never be busy at once: a short trace, one job, would otherwise get a cluster sized for its
    whole run squeezed into a one-second span). Documented in docs/simulator.md; pass
    --vc-config for real sizes.
    """
    spec = ClusterSpec(source="sized from trace")
    if nodes is not None:
        if not 0 < nodes <= MAX_NODES:
            raise ConfigError(f"--nodes {nodes}: must be from 1 to {MAX_NODES}")
        spec.vcs["all"] = VCSpec("all", nodes, gpus_per_node)  # exactly as asked: too-big jobs are reported
        spec.source = f"--nodes {nodes}"
        return spec
    span = max(1, int(jobs["submit_time"].max() - jobs["submit_time"].min())) if len(jobs) else 1
    by_largest = []
    for vc, grp in jobs.groupby("vc", sort=True):
        gpu_seconds = float((grp["gpu_num"] * grp["duration"]).sum())
        need = gpu_seconds / (span * target_load)
        by_load = max(1, math.ceil(need / gpus_per_node))
        largest = math.ceil(int(grp["gpu_num"].max()) / gpus_per_node)
        n = min(max(by_load, largest), max(1, math.ceil(int(grp["gpu_num"].sum()) / gpus_per_node)))
        if n == largest > by_load:
            by_largest.append(f"{vc} ({n} nodes for a {int(grp['gpu_num'].max())}-GPU job)")
        if n > MAX_NODES:  # a bogus GPU count (an imported 10**12) would size a cluster no replay can hold
            job = grp.loc[grp["gpu_num"].idxmax()]
            raise ConfigError(f"VC '{vc}' sized from the trace needs {n:,} nodes, more than the {MAX_NODES:,} a "
                              f"replay holds (its largest job, {job.get('job_id', '?')}, asks for "
                              f"{int(job['gpu_num']):,} GPUs): check the trace's gpu_num, or give --nodes or "
                              "--vc-config")
        spec.vcs[str(vc)] = VCSpec(str(vc), n, gpus_per_node)
    if spec.total_nodes > MAX_NODES:
        raise ConfigError(f"the VCs sized from the trace need {spec.total_nodes:,} nodes in all, more than the "
                          f"{MAX_NODES:,} a replay holds: give --nodes or --vc-config")
    # The sizing trusts the first and last submissions: one stray submit time (a 0 for a missing
    # one, milliseconds for seconds) shrank a 13-node cluster to 1 and multiplied the average JCT by
    # 18, without a word (an admin trial).
    if len(jobs) >= 3:
        t = np.sort(jobs["submit_time"].to_numpy(np.int64))
        gaps = np.diff(t)
        k = int(np.argmax(gaps))
        if gaps[k] > (t[-1] - t[0]) / 2:
            spec.notes.append(f"one gap between submissions, {int(gaps[k]):,} s of the trace's {int(t[-1] - t[0]):,} s "
                              f"(after submit time {int(t[k])}), sets the span the VCs were sized over: check for a "
                              "stray submit time (a 0, or milliseconds), window the trace (--start/--end), or size "
                              "it with --nodes or --vc-config")
    if by_largest:
        spec.notes.append("VCs sized for their largest job, not their load: " + ", ".join(by_largest[:8])
                          + (" ..." if len(by_largest) > 8 else ""))
    return spec


def check_scale_factor(factor) -> float:
    """`--scale-nodes F`: a number above 0 (and at most 100); ConfigError naming the flag otherwise."""
    try:
        f = float(factor)
    except (TypeError, ValueError):
        f = math.nan
    if not (math.isfinite(f) and 0 < f <= 100):
        shown = str(factor) if math.isnan(f) else f"{f:g}"
        raise ConfigError(f"--scale-nodes {shown}: must be a number above 0 and at most 100 (0.8: 20 % fewer nodes)")
    return f


def scale_cluster(spec: ClusterSpec, factor: float, jobs: pd.DataFrame | None = None) -> tuple[ClusterSpec, list]:
    """What-if sizing (`--scale-nodes F`): every VC's node count x F, rounded half up, and never
    fewer nodes than the VC's largest job in `jobs` needs (nor fewer than 1).

    Returns the scaled spec and the names of the VCs kept above their rounded count that way."""
    f = check_scale_factor(factor)
    largest = jobs.groupby("vc")["gpu_num"].max().to_dict() if jobs is not None and len(jobs) else {}
    out = ClusterSpec(source=f"{spec.source}, nodes x{f:g}")
    raised = []
    for name, vc in spec.vcs.items():
        n = max(1, math.floor(vc.nodes * f + 0.5))
        need = math.ceil(int(largest.get(name, 0)) / vc.gpus_per_node)
        if need > n:
            n = need
            raised.append(name)
        out.vcs[name] = VCSpec(name, n, vc.gpus_per_node)
    if out.total_nodes > MAX_NODES:
        raise ConfigError(f"--scale-nodes {f:g}: {spec.total_nodes} nodes become {out.total_nodes}; "
                          f"at most {MAX_NODES:,} in all")
    return out, raised


def check_trace_fits(jobs: pd.DataFrame, spec: ClusterSpec, path: str = "trace") -> None:
    """Every job must name a configured VC and fit in it; name the first offending row."""
    vcs = spec.vcs
    unknown = ~jobs["vc"].isin(list(vcs))
    if unknown.any():
        bad = jobs[unknown].iloc[0]
        names = sorted(jobs.loc[unknown, "vc"].unique())
        raise TraceError(path, f"VC '{bad['vc']}' is not in the cluster config ({spec.source}); unknown VCs: "
                         f"{', '.join(map(str, names[:10]))}", row=_row(bad), column="vc")
    cap = jobs["vc"].map({k: v.gpus for k, v in vcs.items()})
    too_big = jobs["gpu_num"] > cap
    if too_big.any():
        bad = jobs[too_big].iloc[0]
        raise TraceError(path, f"job {bad['job_id']} asks for {int(bad['gpu_num'])} GPUs but VC '{bad['vc']}' has only "
                         f"{vcs[bad['vc']].gpus}", row=_row(bad), column="gpu_num")


def _row(series):
    return int(series["row"]) if "row" in series and not pd.isna(series["row"]) else None


def place_consolidated(free: list[int], gpu_num: int, gpus_per_node: int):
    """Where a job of `gpu_num` GPUs would go, as ((node_index, n_gpus), ...), or None.

    Pure function of the per-node free-GPU counts; mirrors the artifact's ConsolidatePlacement,
    including its quirks (a remainder may land on a fully free node; the partial node for a
    remainder is the node with the most free GPUs after the whole nodes).
    """
    if gpu_num <= 0 or sum(free) < gpu_num:
        return None
    if gpu_num <= gpus_per_node:
        best, best_free = -1, gpus_per_node + 1
        for i, f in enumerate(free):
            if gpu_num <= f < best_free:
                best, best_free = i, f
                if f == gpu_num:
                    break
        return ((best, gpu_num),) if best >= 0 else None
    # Nodes with free GPUs, most free first, node order on ties (a stable sort).
    order = sorted((i for i, f in enumerate(free) if f > 0), key=lambda i: -free[i])
    whole, rem = divmod(gpu_num, gpus_per_node)
    out = []
    if rem == 0:
        for i in order:
            if free[i] < gpus_per_node:
                return None
            out.append((i, gpus_per_node))
            if len(out) == whole:
                return tuple(out)
        return None
    needed = whole + 1
    for i in order:
        if free[i] == gpus_per_node and needed > 1:
            out.append((i, gpus_per_node))
            needed -= 1
            continue
        if free[i] >= rem and needed == 1:
            out.append((i, rem))
            return tuple(out)
        return None
    return None


class VirtualCluster:
    """Live GPU state of one VC: which job holds which GPU (up to two jobs per GPU when packed)."""

    def __init__(self, spec: VCSpec):
        self.spec = spec
        self.name = spec.name
        self.gpus_per_node = spec.gpus_per_node
        self.node_names = list(range(spec.nodes))
        # holders[node][gpu] -> list of jobs on that GPU
        self.holders = [[[] for _ in range(spec.gpus_per_node)] for _ in range(spec.nodes)]
        self.free = [spec.gpus_per_node] * spec.nodes  # GPUs with no job at all

    @property
    def total_gpus(self) -> int:
        return len(self.free) * self.gpus_per_node

    def free_gpus(self) -> int:
        return sum(self.free)

    def allocate(self, job, layout) -> None:
        """Give `job` the lowest-numbered free GPUs on each node of `layout` ((node, n), ...)."""
        alloc = []
        for node, n in layout:
            if self.free[node] < n:
                raise ValueError(f"placement of job {job.job_id} on node {node} needs {n} free GPUs, has {self.free[node]}")
            gpus = []
            for g, holders in enumerate(self.holders[node]):
                if not holders:
                    holders.append(job)
                    gpus.append(g)
                    if len(gpus) == n:
                        break
            self.free[node] -= n
            alloc.append((node, tuple(gpus)))
        job.alloc = tuple(alloc)

    def allocate_shared(self, job, partner) -> None:
        """Put `job` on exactly the GPUs `partner` holds (lazy packing: at most two per GPU)."""
        for node, gpus in partner.alloc:
            for g in gpus:
                holders = self.holders[node][g]
                if len(holders) != 1 or holders[0] is not partner:
                    raise ValueError(f"job {job.job_id} cannot share GPU {node}:{g} with job {partner.job_id}")
        for node, gpus in partner.alloc:
            for g in gpus:
                self.holders[node][g].append(job)
        job.alloc = partner.alloc

    def release(self, job) -> None:
        for node, gpus in job.alloc:
            for g in gpus:
                holders = self.holders[node][g]
                holders.remove(job)
                if not holders:
                    self.free[node] += 1
        job.alloc = ()

    def busy_gpus(self) -> int:
        return self.total_gpus - sum(self.free)

    def add_nodes(self, count: int) -> None:
        for _ in range(count):
            self.node_names.append(max(self.node_names, default=-1) + 1)
            self.holders.append([[] for _ in range(self.gpus_per_node)])
            self.free.append(self.gpus_per_node)

    def remove_idle_nodes(self, count: int) -> int:
        """Remove up to `count` idle nodes (highest index first); returns how many were removed."""
        removed = 0
        for i in range(len(self.free) - 1, -1, -1):
            if removed == count:
                break
            if self.free[i] == self.gpus_per_node and i == len(self.free) - 1:
                self.free.pop()
                self.holders.pop()
                self.node_names.pop()
                removed += 1
        return removed
