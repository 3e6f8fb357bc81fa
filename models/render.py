"""Plain-text rendering of model explanations (no third-party imports).

``render_explanation`` turns an ``Explanation`` (or its ``to_dict()`` form, e.g. read back from
JSON) into a few lines for the CLI or a log:

* kind "ebm"      -> a table: term | value | contribution, intercept first, sum last;
* kind "tree"     -> the numbered decision path, then the leaf summary;
* kind "fallback" -> the rule used and why.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

#: Class names for models whose prediction is a class id (kept here so rendering needs no model import).
CLASS_NAMES: dict[str, dict[int, str]] = {"packing": {0: "Tiny", 1: "Medium", 2: "Jumbo"}}


def _get(obj: Any, key: str, default=None):
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def format_value(v: Any, digits: int = 4) -> str:
    """Compact, stable text for a feature value, contribution or prediction."""
    if v is None:
        return "missing"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v:  # NaN
            return "missing"
        if v == int(v) and abs(v) < 1e12:
            return str(int(v))
        return f"{v:.{digits}g}"
    if isinstance(v, (tuple, list)):
        return " x ".join(format_value(x, digits) for x in v)
    try:  # numpy scalars without importing numpy
        return format_value(v.item(), digits)
    except AttributeError:
        return str(v)


def format_prediction(model: str, prediction: Any) -> str:
    names = CLASS_NAMES.get(model or "")
    if names is not None:
        try:
            return f"{int(prediction)} ({names[int(prediction)]})"
        except (KeyError, TypeError, ValueError):
            pass
    return format_value(prediction)


def render_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None, indent: str = ""
) -> str:
    """Fixed-width text table; `align` is one char per column ('l' or 'r', default 'l')."""
    rows = [[c if isinstance(c, str) else format_value(c) for c in r] for r in rows]
    headers = [str(h) for h in headers]
    align = align or "l" * len(headers)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells):
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if align[i] == "r" else c.ljust(widths[i]))
        return (indent + "  ".join(out)).rstrip()

    sep = indent + "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep] + [line(r) for r in rows])


def _signed(x: float) -> str:
    return f"{x:+.4g}"


def render_explanation(exp: Any, max_terms: int | None = 12) -> str:
    """Text for one Explanation (dataclass or dict)."""
    model = _get(exp, "model", "")
    kind = _get(exp, "kind", "")
    pred = format_prediction(model, _get(exp, "prediction"))
    reason = _get(exp, "reason", "") or ""

    if kind == "fallback":
        lines = [f"{model}: {pred}  [fallback, no model applied]"]
        if reason:
            lines.append(f"  reason: {reason}")
        return "\n".join(lines)

    if kind == "tree":
        lines = [f"{model}: {pred}  [decision path]"]
        path = list(_get(exp, "path", []) or [])
        if not path:
            lines.append("  (root is a leaf: no decision taken)")
        for i, step in enumerate(path, 1):
            lines.append(f"  {i}. {step}")
        if reason:
            lines.append(f"  => {reason}")
        return "\n".join(lines)

    if kind == "ebm":
        terms = list(_get(exp, "terms", []) or [])
        intercept = _get(exp, "intercept")
        lines = [f"{model}: {pred}  [additive explanation]"]
        if reason:
            lines.append(f"  {reason}")
        shown = terms if max_terms is None else terms[:max_terms]
        rows = []
        if intercept is not None:
            rows.append(["(intercept)", "", _signed(float(intercept))])
        for t in shown:
            rows.append([str(_get(t, "term")), format_value(_get(t, "value")), _signed(float(_get(t, "contribution")))])
        rest = terms[len(shown):]
        if rest:
            rest_sum = sum(float(_get(t, "contribution")) for t in rest)
            rows.append([f"({len(rest)} more terms)", "", _signed(rest_sum)])
        total = float(intercept) if intercept is not None else 0.0
        total += sum(float(_get(t, "contribution")) for t in terms)
        rows.append(["= sum", "", _signed(total)])
        lines.append(render_table(["term", "value", "contribution"], rows, align="llr", indent="  "))
        return "\n".join(lines)

    lines = [f"{model}: {pred}  [{kind or 'unknown kind'}]"]
    if reason:
        lines.append(f"  {reason}")
    return "\n".join(lines)


def render_mapping(d: Mapping[str, Any], indent: str = "") -> str:
    """key: value lines (e.g. for evaluation() dicts); nested lists/dicts are printed inline."""
    width = max((len(str(k)) for k in d), default=0)
    out = []
    for k, v in d.items():
        text = format_value(v) if isinstance(v, (int, float, type(None))) else str(v)
        out.append(f"{indent}{str(k).ljust(width)}  {text}")
    return "\n".join(out)
