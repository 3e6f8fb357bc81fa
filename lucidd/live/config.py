"""lucidd's configuration: a TOML file (`/etc/lucidd/lucidd.toml`), validated at start.

Every key, its type, range and default is declared once in `SCHEMA` below; docs/config.md
documents the same keys (a test checks the two agree). A bad file gives one line naming the key.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Key:
    type: type | tuple
    default: object
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None


_STR_LIST = list
SCHEMA: dict[str, dict[str, Key]] = {
    "slurm": {
        "backend": Key(str, "auto", "auto | cli | pyslurm: how lucidd talks to Slurm (auto: pyslurm only when it "
                                    "matches the running Slurm, else the CLI)", choices=("auto", "cli", "pyslurm")),
        "bin_dir": Key(str, "", "directory of squeue/sinfo/sacct/scontrol (empty: found on PATH)"),
        "command_timeout_s": Key(float, 30.0, "timeout of one Slurm command", min=1, max=600),
        "inbox_partition": Key(str, "inbox", "the Default=YES, State=DOWN partition new jobs wait in"),
        "profiling_partition": Key(str, "profiling", "the MaxTime=INFINITE partition jobs are profiled in"),
        "default_partition": Key(str, "main", "where a job that named no partition runs"),
        "managed_partitions": Key(_STR_LIST, [], "partitions whose pending jobs lucidd orders by SiteFactor "
                                                 "(empty: every partition but the inbox and profiling)"),
    },
    "daemon": {
        "interval_s": Key(float, 10.0, "seconds between reconcile cycles", min=0.2, max=3600),
        "state_dir": Key(str, "/var/lib/lucidd", "heartbeat, default database and model store"),
        "heartbeat_file": Key(str, "", "file lucidd touches every cycle (empty: STATE_DIR/heartbeat)"),
        "failopen_after_s": Key(float, 60.0, "heartbeat age after which lucidd-failopen opens the inbox",
                                min=5, max=86400),
        "log_level": Key(str, "info", "debug | info | warning | error",
                         choices=("debug", "info", "warning", "error")),
        "decider": Key(str, "orchestrator.live:LucidDecider", "module:class that makes the decisions"),
        "history_interval_s": Key(float, 300.0, "seconds between sacct reads of finished jobs", min=1, max=86400),
        "record_cycles": Key(int, 100, "reconcile cycles whose full input and decisions are kept for replay",
                             min=0, max=100000),
        "keep_days": Key(int, 180, "days the records of ended jobs (with their actions) and of reconcile cycles "
                                   "are kept (jobs: at least [models] history_days)", min=1, max=36500),
        "standby": Key(bool, False, "when another lucidd holds the database, wait (retrying every interval_s) and "
                                    "take over when it stops, instead of exiting 3: a backup controller's lucidd"),
    },
    "database": {
        "url": Key(str, "", "SQLAlchemy URL (empty: sqlite:///STATE_DIR/lucidd.db); e.g. "
                            "postgresql+psycopg://lucidd@db/lucidd"),
    },
    "profiler": {
        "enabled": Key(bool, True, "send new jobs through the profiling partition first"),
        "tprof_s": Key(int, 600, "Tprof: seconds a job runs in profiling before lucidd requeues it", min=1,
                       max=86400),
        "nprof_gpus": Key(int, 8, "Nprof: jobs asking for more GPUs skip profiling", min=0, max=100000),
        "max_job_share": Key(float, 1.0, "a job asking for more than this share of the profiling capacity "
                                         "skips profiling: one job holding the whole capacity makes every job "
                                         "behind it wait (1.0: only Nprof limits it)", min=0.0, max=1.0),
        "capacity_gpus": Key(int, 0, "GPUs the profiling jobs may hold at once (0: auto, the larger of "
                                     "nprof_gpus and 3 % of the profiling partition's GPUs)", min=0, max=10000000),
        "burst_capacity_gpus": Key(int, 0, "extra GPUs allowed while more than burst_queue jobs wait "
                                           "(time-aware scaling; 0: same as capacity)", min=0, max=10000000),
        "burst_queue": Key(int, 10, "inbox jobs waiting for profiling above which the burst capacity applies",
                           min=0, max=1000000),
        "skip_when_free": Key(bool, True, "a job that would start at once (nobody waits in its partition and "
                                          "one of its nodes has its GPUs free) skips profiling: there it could "
                                          "only be delayed"),
        # Measured on the load sweep (docs/lucid.md, "Lending idle GPUs to profiling"): the profiling
        # partition spans every node, so a short job of a busy partition can end on GPUs another
        # partition leaves idle; capped at 3 %, most such GPUs stayed idle.
        "lend_idle_gpus": Key(bool, True, "beyond the capacity, profiling may also use the GPUs free on nodes "
                                          "whose partitions nobody waits in; lucidd steers those runs onto "
                                          "them (ExcNodeList) and they are still requeued at Tprof"),
        "reclaim_lent": Key(bool, False, "requeue a lent profiling run as soon as a job waits in a partition of "
                                        "its node (lend_idle_gpus)"),
        # off by default: measured over the load sweep (docs/lucid.md, "Lent runs kept until their
        # GPUs are needed") it cuts whole Philly's average JCT by 32-45 % but costs Venus x1.0 3 % and
        # puts Venus' tails above slurm's, and a reclaimed run loses all it ran (up to days), not at
        # most long_tprof_s
        "keep_lent_while_idle": Key(bool, False, "a lent profiling run is requeued only once a job in a "
                                                 "partition of its node has waited long_tprof_s since its "
                                                 "submission: until then it runs on past its Tprof"),
        # 3600: a profiling run of the ~40 % of Philly's jobs that run 10-60 minutes ends there instead
        # of waiting days in a full partition (docs/lucid.md, "Lending idle GPUs to profiling")
        "long_tprof_s": Key(int, 3600, "Tprof of a run admitted on GPUs nobody waits for (lend_idle_gpus), "
                                       "and of the oldest other runs while those past tprof_s hold at most "
                                       "long_share of the profiling partition's GPUs (0: tprof_s for every run)",
                            min=0, max=7 * 86400),
        # 0.06: measured after long runs were requeued at long_tprof_s (82bad5f), better than 0.03 on
        # Venus x0.8 and Philly x1 and the small clusters; Philly x1.5 4 % worse on one replay, better
        # on the jittered mean (docs/lucid.md)
        "long_share": Key(float, 0.06, "share of the profiling partition's GPUs that runs past tprof_s (not "
                                       "on borrowed GPUs) may hold, up to long_tprof_s", min=0.0, max=1.0),
        "room_wait_s": Key(int, 0, "how long a job waits for profiling room before it goes to its partition "
                                   "unprofiled (0: 2 x the longest Tprof a run may get: long_tprof_s, or "
                                   "tprof_s without it)", min=0, max=7 * 86400),
        "exempt_users": Key(_STR_LIST, [], "users whose jobs skip profiling"),
        "exempt_accounts": Key(_STR_LIST, [], "accounts whose jobs skip profiling"),
        "exempt_partitions": Key(_STR_LIST, [], "requested partitions whose jobs skip profiling"),
    },
    "ordering": {
        "enabled": Key(bool, True, "apply Lucid's queue order as SiteFactor"),
        # 12 h without aging: the setting of the load sweep (docs/lucid.md) that keeps Slurm's order
        # for the jobs Slurm's backfill would otherwise pass over for days (wide jobs whose estimate
        # is too long), at every load; 96 h with 48 h aging (lucid-standalone's) did not.
        "starvation_s": Key(int, 12 * 3600, "wait after which a job goes to the front", min=1, max=10 ** 9),
        # 4: on the load sweep and the small clusters (docs/lucid.md, "Wide jobs starve sooner") a
        # job of two or more nodes, which backfill passes over while any smaller job fits, was the
        # tail (vcHvQ's 32-GPU jobs); guarding it sooner cut vcHvQ's jittered p99.9 11 % and
        # Venus x1.0's 9 %, with no average JCT worse (on 8-GPU nodes: 6 h for 9-16 GPUs, 4 h up to
        # 24, 3 h beyond)
        "starvation_node_cap": Key(int, 4, "a job needing k nodes (its GPUs over the partition's GPUs per "
                                            "node, rounded up) starves after starvation_s / min(k, this); 1: "
                                            "starvation_s for every job", min=1, max=64),
        "aging_halflife_s": Key(int, 0, "a waiting job's estimate x GPUs halves every this many seconds "
                                                "(0: no aging)", min=0, max=10 ** 9),
        # 1 h: on the load sweep (docs/lucid.md) it cut the average JCT where most jobs starve
        # (Venus x0.8 -17 %, Philly x1 -19 %) with the p99.9 within 0.1 % of oldest-first.
        "starving_halflife_s": Key(int, 3600, "among jobs past starvation_s, a job's submission counts this many "
                                              "seconds later per doubling of its estimate x GPUs (0: oldest first)",
                                   min=0, max=10 ** 7),
        "points_per_doubling": Key(int, 1000, "SiteFactor points between two jobs whose estimate x GPUs differ "
                                              "2x", min=1, max=1000000),
        "default_estimate_s": Key(int, 3600, "duration assumed for a job with no model and no history", min=1,
                                  max=10 ** 8),
    },
    "models": {
        "dir": Key(str, "", "model store (empty: STATE_DIR/models)"),
        "refit_every_s": Key(int, 7 * 86400, "duration model refit period (in a background thread)", min=60,
                             max=10 ** 8),
        "history_days": Key(int, 60, "days of finished jobs the models learn from", min=1, max=3650),
        "min_history_jobs": Key(int, 200, "finished jobs needed before the first model is fitted", min=10,
                                max=10 ** 7),
    },
    # GPU packing (binder/live.py; docs/deploy.md "GPU packing"): needs job_submit.lua's
    # LUCIDD_PACKING and a gres.conf with one Type per GPU and 2 shards each
    "packing": {
        "enabled": Key(bool, False, "lower waiting 1-GPU jobs of shards to one shard (they may share a GPU) "
                                    "while their partition waits for GPUs"),
        "gpu_memory_mib": Key(int, 0, "memory of one GPU, MiB (nvidia-smi --query-gpu=memory.total); 0: each "
                                      "partition's smallest GPU, as the NVML samplers on its nodes report it",
                              min=0, max=10 ** 7),
        "memory_headroom_mib": Key(int, 1024, "GPU memory kept free on a shared GPU, MiB", min=0, max=10 ** 7),
        "gss": Key(int, 1, "GPU sharing score budget: each job that may share scores at most GSS / 2 "
                           "(1: Tiny jobs only)",
                   min=0, max=4),
        "model": Key(str, "", "packing model file (models/packing.py, e.g. a simulation's models/packing.joblib); "
                              "empty: the rule on SM utilisation"),
        "tiny_below_util": Key(float, 15.0, "rule: mean SM utilisation (%) below which a job is Tiny",
                               min=0, max=100),
        "jumbo_from_util": Key(float, 60.0, "rule: mean SM utilisation (%) from which a job is Jumbo",
                               min=0, max=100),
        "min_util_samples": Key(int, 3, "NVML utilisation readings of the profiling run a class needs",
                                min=1, max=10 ** 6),
    },
    # lucidd-sampler, on each GPU node (profiler/nvml_sampler.py); it reads [database] url as well
    "sampler": {
        "interval_s": Key(float, 5.0, "seconds between two NVML readings of the node's GPUs", min=0.1, max=3600),
        "flush_s": Key(float, 30.0, "seconds between two writes of the per-job figures to the database",
                       min=1, max=86400),
        "keep_days": Key(int, 30, "days a job's GPU figures are kept after its run was last seen", min=1,
                         max=3650),
        "node": Key(str, "", "this node's name, as Slurm knows it (empty: the host name up to the first dot)"),
    },
}


class Section:
    """Attribute access to one validated section."""

    def __init__(self, name, values):
        self._name = name
        self.__dict__.update(values)

    def as_dict(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


class Config:
    def __init__(self, sections: dict, path: str | None = None):
        self.path = path
        for name, values in sections.items():
            setattr(self, name, Section(name, values))
        d = self.daemon
        if not d.heartbeat_file:
            d.heartbeat_file = os.path.join(d.state_dir, "heartbeat")
        if not self.database.url:
            self.database.url = "sqlite:///" + os.path.join(d.state_dir, "lucidd.db")
        if not self.models.dir:
            self.models.dir = os.path.join(d.state_dir, "models")

    @property
    def managed_partitions(self):
        return set(self.slurm.managed_partitions)

    def as_dict(self) -> dict:
        return {name: getattr(self, name).as_dict() for name in SCHEMA}


def _check(section: str, key: str, spec: Key, value):
    where = f"[{section}] {key}"
    want = spec.type
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if want is _STR_LIST:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where}: must be a list of strings, got {_toml(value)}")
        return list(value)
    if want is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: must be true or false, got {_toml(value)}")
        return value
    if want is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}: must be an integer, got {_toml(value)}")
    if want is float and (isinstance(value, bool) or not isinstance(value, float)):
        raise ConfigError(f"{where}: must be a number, got {_toml(value)}")
    if want is str and not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string, got {_toml(value)}")
    if want is float and value != value:  # NaN passes every comparison below
        raise ConfigError(f"{where}: must be a number, got nan")
    if spec.min is not None and value < spec.min:
        raise ConfigError(f"{where}: must be >= {spec.min:g}, got {_toml(value)}")
    if spec.max is not None and value > spec.max:
        raise ConfigError(f"{where}: must be <= {spec.max:g}, got {_toml(value)}")
    if spec.choices is not None and value not in spec.choices:
        raise ConfigError(f"{where}: must be one of {', '.join(spec.choices)}, got {_toml(value)}")
    return value


def _toml(value) -> str:
    """A value as the TOML file spells it (true, not Python's True), for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


# What lucidd-failopen reads: with `lenient`, a fault anywhere else in the file (a key a newer or
# older lucidd knows, a misspelling, a bad value) is a warning, not a reason to leave jobs in a
# closed inbox (an admin trial: a rolled-back package with the newer config failed open nowhere).
FAILOPEN_SECTIONS = ("daemon", "slurm")


def config_from_dict(raw: dict, path: str | None = None, lenient: list | None = None) -> Config:
    """The checked Config. `lenient` (a list): unknown sections and keys, and bad values outside
    FAILOPEN_SECTIONS, are appended to it as warnings and ignored (defaults used) instead of raised."""
    if not isinstance(raw, dict):
        raise ConfigError("configuration must be a TOML table")

    def fault(text, section=None):
        if lenient is None or section in FAILOPEN_SECTIONS:
            raise ConfigError(text)
        lenient.append(text)

    raw = dict(raw)
    for section in list(raw):
        if section not in SCHEMA and not isinstance(raw[section], dict):
            home = [name for name, keys in SCHEMA.items() if section in keys]
            fault(f"{section}: a key outside any section"
                  + (" (it belongs under " + " or ".join(f"[{h}]" for h in home) + ")" if home else
                     f" (keys go under a section: {', '.join(SCHEMA)})"))
            raw.pop(section)
        elif section not in SCHEMA:
            fault(f"[{section}]: unknown section (known: {', '.join(SCHEMA)})")
            raw.pop(section)
        elif not isinstance(raw[section], dict):
            fault(f"[{section}]: must be a table ([{section}] followed by key = value lines)", section)
            raw.pop(section)
    sections = {}
    for section, keys in SCHEMA.items():
        given = dict(raw.get(section, {}))
        for key in list(given):
            if key not in keys:
                # unknown keys are warnings even in [daemon]/[slurm]: fail-open needs only the known ones
                fault(f"[{section}] {key}: unknown key (known: {', '.join(keys)})")
                given.pop(key)
        values = {}
        for k, spec in keys.items():
            default = list(spec.default) if isinstance(spec.default, list) else spec.default
            try:
                values[k] = _check(section, k, spec, given[k]) if k in given else default
            except ConfigError as exc:
                fault(str(exc), section)
                values[k] = default
        sections[section] = values
    s = sections["slurm"]

    def not_one_name(name):
        return not name or any(c.isspace() or c in ",=" for c in name)

    for key in ("inbox_partition", "profiling_partition", "default_partition"):
        if not_one_name(s[key]):
            raise ConfigError(f"[slurm] {key}: must be a partition name, got {s[key]!r}")
    if s["inbox_partition"] == s["profiling_partition"]:
        raise ConfigError("[slurm] profiling_partition: must differ from inbox_partition")
    if s["default_partition"] in (s["inbox_partition"], s["profiling_partition"]):
        raise ConfigError("[slurm] default_partition: must be a partition jobs run in, not the inbox or profiling")
    # one name per entry: "main,research" matches no partition (jobs are compared partition by
    # partition), so the list would silently manage or exempt nothing when Slurm is not there to check
    lists = [("slurm", "managed_partitions", s["managed_partitions"]),
             ("profiler", "exempt_partitions", sections["profiler"]["exempt_partitions"])]
    for section, key, names in lists:
        for name in names:
            if not_one_name(name):
                raise ConfigError(f"[{section}] {key}: each entry must be one partition name, got {name!r}"
                                  + (" (give them as separate entries)" if "," in name else ""))
    own = [n for n in s["managed_partitions"] if n in (s["inbox_partition"], s["profiling_partition"])]
    if own:
        raise ConfigError(f"[slurm] managed_partitions: {own[0]!r} is lucidd's own inbox or profiling partition; "
                          "list the partitions jobs run in")
    d = sections["daemon"]
    if d["failopen_after_s"] < 2 * d["interval_s"] and lenient is None:  # lucidd refuses to run with it
        raise ConfigError(f"[daemon] failopen_after_s: must be >= 2 x interval_s "
                          f"({2 * d['interval_s']:g}), else lucidd-failopen opens the inbox between two "
                          f"cycles of a running lucidd; got {d['failopen_after_s']:g}")
    o = sections["ordering"]
    if o["aging_halflife_s"] > 0 and lenient is None:
        # The aged key grows by 1 per half-life since 2026; SiteFactor must stay inside Slurm's range
        # for decades, or every job would be clipped to the same value and Lucid's order lost.
        span = o["points_per_doubling"] * (64 + 30 * 365 * 86400 / o["aging_halflife_s"])
        if span > 9.0e8:
            raise ConfigError(f"[ordering] points_per_doubling: {o['points_per_doubling']} with aging_halflife_s "
                              f"{o['aging_halflife_s']} overflows Slurm's SiteFactor range within 30 years "
                              f"(points_per_doubling x half-lives must stay below 9e8); lower one or raise the other")
    k = sections["packing"]
    if k["enabled"] and lenient is None:
        if k["gpu_memory_mib"] and k["memory_headroom_mib"] >= k["gpu_memory_mib"]:
            raise ConfigError(f"[packing] memory_headroom_mib ({k['memory_headroom_mib']}) must be below "
                              f"gpu_memory_mib ({k['gpu_memory_mib']}): no job could share a GPU")
        if k["tiny_below_util"] > k["jumbo_from_util"]:
            raise ConfigError(f"[packing] tiny_below_util ({k['tiny_below_util']:g}) must not exceed "
                              f"jumbo_from_util ({k['jumbo_from_util']:g})")
    decider = sections["daemon"]["decider"]
    if ":" not in decider and lenient is None:
        raise ConfigError(f"[daemon] decider: must be 'module:Class', got {decider!r}")
    return Config(sections, path)


def load_config(path: str) -> Config:
    return load_config_and_toml(path)[0]


def load_config_lenient(path: str) -> tuple[Config, list]:
    """For lucidd-failopen: the Config and the warnings of what was ignored (config_from_dict's
    `lenient`). Faults in [daemon] and [slurm] values, and unreadable files, still raise."""
    raw = read_toml(path)
    warnings: list = []
    try:
        return config_from_dict(raw, path, lenient=warnings), warnings
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _toml_line_by_line(path: str) -> dict:
    """What a file that is not valid TOML says line by line: {section: {key: value}} of each one-line
    `key = value` that parses on its own under the `[section]` above it ({} if unreadable)."""
    out: dict = {}
    section = None
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    for line in lines:
        text = line.strip()
        if text.startswith("[") and text.endswith("]") and not text.startswith("[["):
            section = text[1:-1].strip()
            continue
        if section is None or "=" not in text or text.startswith("#"):
            continue
        try:
            one = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue
        out.setdefault(section, {}).update(one)
    return out


def load_config_failopen(path: str, lua_names: dict | None = None) -> tuple[Config, list, ConfigError | None]:
    """For lucidd-failopen: (Config, ignored, error). `error` is None when the file passes
    load_config_lenient. Otherwise (not valid TOML, a bad [daemon] or [slurm] value) the Config is
    still the best one the file allows: each [daemon]/[slurm] key that passes on its own is kept,
    the others get their defaults, and a partition name the file does not give validly is taken
    from `lua_names` (job_submit.lua's INBOX/PROFILING/DEFAULT: the partitions jobs are routed
    through). The guard then still opens the inbox when the heartbeat says lucidd is away: a broken
    config had left every new job PartitionDown in the inbox while lucidd was stopped (a review:
    a TOML typo, `systemctl restart lucidd`, then `scontrol reconfigure`)."""
    try:
        cfg, ignored = load_config_lenient(path)
        return cfg, ignored, None
    except ConfigError as exc:
        error = exc
    try:
        raw = read_toml(path)
    except ConfigError:
        # not TOML as a whole: each line that is TOML on its own, under its [section] (a custom
        # heartbeat_file or state_dir read as the default had failopen find no heartbeat and open
        # the inbox behind a live lucidd at every run: a review)
        raw = _toml_line_by_line(path)
    kept: dict = {}
    for section in FAILOPEN_SECTIONS:
        given = raw.get(section) if isinstance(raw, dict) else None
        for key, value in (given.items() if isinstance(given, dict) else ()):
            if key not in SCHEMA[section]:
                continue
            try:
                config_from_dict({section: {key: value}}, path, lenient=[])
            except ConfigError:
                continue
            kept.setdefault(section, {})[key] = value
    names = {"INBOX": "inbox_partition", "PROFILING": "profiling_partition", "DEFAULT": "default_partition"}
    for const, key in names.items():
        if (lua_names or {}).get(const) and key not in kept.get("slurm", {}):
            kept.setdefault("slurm", {})[key] = lua_names[const]
    try:
        cfg = config_from_dict(kept, path, lenient=[])
    except ConfigError:  # the kept names contradict each other: every default but the heartbeat's
        d = {k: v for k, v in kept.get("daemon", {}).items() if k in ("state_dir", "heartbeat_file")}
        cfg = config_from_dict({"daemon": d}, path, lenient=[])
    return cfg, [], error


def load_config_and_toml(path: str) -> tuple[Config, dict]:
    """The checked Config and the file's own TOML (which keys it sets: `simulate --config`)."""
    raw = read_toml(path)
    try:
        return config_from_dict(raw, path), raw
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def read_toml(path: str) -> dict:
    """A config file's TOML as a dict, its read and parse errors as one-line ConfigErrors."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        # A byte-order mark (Windows editors write one) is not TOML, but the file means the same
        # without it.
        raw = tomllib.loads(data.decode("utf-8-sig"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except PermissionError:
        raise ConfigError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return raw
