"""The report's text: numbers (:func:`format_number`), measured records (:func:`format_measured`,
:func:`format_short`), the paper's number (:func:`format_target`), Markdown cells, clipping and
wrapping to the report's line width, anchors."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: The longest line the report writes (tables included); longer text is cut with "...".
_MAX_LINE = 200


def format_number(x: Any, decimals: int | None = None) -> str:
    """A number as text: 3 significant digits (``0.124``, ``5e-08``), numbers from 1000 up to 10^7
    rounded to whole numbers without an exponent or separators (``12346``: a comma would read as a
    list separator), or ``decimals`` fixed decimals when given."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, str):
        return x
    if isinstance(x, int):
        return str(x) if abs(x) < 10_000_000 else f"{x:.3g}"
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if decimals is not None:
        text = f"{x:.{decimals}f}"
        return "0" + text[2:] if text.startswith("-0") and float(text) == 0 else text
    if x == 0:
        return "0"
    if 1000 <= abs(x) < 1e7:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number_or_inf(v: Any) -> bool:
    return _is_number(v) or v in ("inf", "-inf")


def _comparison_text(m: Mapping[str, Any]) -> str:
    """``{"value", "vs", "diff", "ci", "level", "names"}`` as ``0.124 vs 0.130 (diff -0.006, 95% CI [...])``."""
    nums = [m.get("value"), m.get("vs")]
    finite = [abs(float(v)) for v in nums if _is_number(v) and math.isfinite(float(v))]
    decimals = None
    if finite and max(finite) > 0 and 1e-4 <= max(finite) < 1e4:
        decimals = max(0, min(8, 2 - math.floor(math.log10(max(finite)))))

    def num(v: Any) -> str:
        return format_number(v, decimals) if _is_number(v) else format_measured(v)

    names = m.get("names") or []
    left = f"{names[0]} {num(m.get('value'))}" if len(names) > 0 else num(m.get("value"))
    right = f"{names[1]} {num(m.get('vs'))}" if len(names) > 1 else num(m.get("vs"))
    extra = []
    if m.get("diff") is not None:
        extra.append(f"diff {num(m['diff'])}")
    ci = m.get("ci")
    if isinstance(ci, list) and len(ci) == 2:
        level = m.get("level", 0.95)
        pct = f"{100 * float(level):g}%" if _is_number(level) else "95%"
        extra.append(f"{pct} CI [{num(ci[0])}, {num(ci[1])}]")
    others = {k: v for k, v in m.items() if k not in ("value", "vs", "diff", "ci", "level", "names")}
    if others:
        extra.append(format_measured(others))
    return f"{left} vs {right}" + (f" ({', '.join(extra)})" if extra else "")


def _verdict_text(m: Mapping[str, Any]) -> str:
    """A verdict record (``runner.verdict.Verdict.as_measured``) as ``effect +0.012 (99% CI [+0.004,
    +0.020], 8 replicates; detectable 0.009)``, with ``; needs N replicates`` when the record has
    ``replicates_needed`` (the count that brings the detectable effect below the paper's margin);
    the paper's effect is the row's target."""
    ci = m.get("ci") or [None, None]
    level = m.get("level", 0.95)
    pct = f"{100 * float(level):.4g}%" if _is_number(level) else "95%"

    def signed(v: Any) -> str:
        return ("+" if _is_number(v) and float(v) > 0 else "") + format_number(v)

    reps = f", {m['replicates']} replicates" if m.get("replicates") else ""
    need = ""
    if "replicates_needed" in m:  # a study that plans its power records what the claim needs
        n = m["replicates_needed"]
        need = (f"; needs {n} replicates" if n is not None else
                f"; needs more than {m['max_replicates']} replicates" if m.get("max_replicates") else "")
    return (f"effect {signed(m.get('effect'))} ({pct} CI [{signed(ci[0])}, {signed(ci[1])}]{reps}; "
            f"detectable {format_number(m.get('mde'))}{need})")


def format_measured(value: Any, *, max_items: int = 8) -> str:
    """``measured`` (or ``target``) as readable text: numbers to 3 significant digits, a
    comparison record as ``a vs b (diff d, 95% CI [lo, hi])``, dicts as ``key value, ...``, lists
    as ``[a, b, ...]`` (at most ``max_items`` items, then how many more)."""
    if value is None:
        return "n/a"
    if isinstance(value, (bool, int, float)):
        return format_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if "value" in value and "vs" in value:
            return _comparison_text(value)
        if "effect" in value and "mde" in value and "ci" in value:
            return _verdict_text(value)
        if set(value) == {"value", "low", "high", "source"}:  # a verdict's paper effect (its target)
            size = (format_number(value["value"]) if value["value"] is not None else
                    f"[{format_number(value['low'])}, {format_number(value['high'])}]" if value["low"] is not None
                    else "direction only")
            return f"{size} ({value['source']})"
        parts = []
        for k, v in value.items():
            text = format_measured(v, max_items=max_items)
            parts.append(f"{k} ({text})" if isinstance(v, Mapping) else f"{k} {text}")
        return ", ".join(parts) if parts else "{}"
    if isinstance(value, (list, tuple)):
        items = [format_measured(v, max_items=max_items) for v in value[:max_items]]
        more = len(value) - max_items
        return "[" + ", ".join(items) + (f", ... {more} more" if more > 0 else "") + "]"
    return str(value)


def format_short(value: Any, _depth: int = 0) -> str:
    """``measured`` for the report's table: ``value [low, high]`` when there is an interval (a
    comparison as its difference, a verdict as its effect), a number, or at most three scalar
    fields of a record (``key value``); never a nested record (those are in ``details.md``)."""
    if value is None:
        return "n/a"
    if isinstance(value, (bool, int, float, str)):
        return format_measured(value)
    if isinstance(value, Mapping):
        ci = value.get("ci")
        ci = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else None
        if ci is None and _is_number(value.get("low")) and _is_number(value.get("high")):
            ci = [value["low"], value["high"]]
        if "value" in value and "vs" in value:
            diff = value.get("diff")
            head = f"{format_number(value['value'])} vs {format_number(value['vs'])}"
            if ci is not None and diff is not None:
                return f"{head}, diff {format_number(diff)} [{format_number(ci[0])}, {format_number(ci[1])}]"
            return head
        for key in ("effect", "value", "mean", "estimate"):
            if key in value and _is_number(value[key]):
                interval = f" [{format_number(ci[0])}, {format_number(ci[1])}]" if ci is not None else ""
                level = value.get("level")
                if interval and _is_number(level) and abs(float(level) - 0.95) > 1e-9:
                    interval += f" ({100 * float(level):.3g}%)"
                word = "" if key == "value" else f"{key} "
                return f"{word}{format_number(value[key])}{interval}"
        tally = _status_tally(value) if _depth == 0 else ""
        if tally:  # many compared readings (e.g. per epsilon x baseline): their statuses counted
            return tally
        subs = [(k, v) for k, v in value.items() if isinstance(v, Mapping)]
        if subs and len(subs) == len(value) and _depth == 0:  # named readings: the first one, how many more
            more = f"; +{len(subs) - 1} more" if len(subs) > 1 else ""
            return f"{subs[0][0]}: {format_short(subs[0][1], 1)}{more}"
        scalars = [(k, v) for k, v in value.items() if _is_number(v) or isinstance(v, (str, bool))]
        scalars = [(k, v) for k, v in scalars if not (isinstance(v, str) and len(v) > 20)]
        more = len(value) - min(3, len(scalars))
        text = ", ".join(f"{k} = {format_number(v)}" for k, v in scalars[:3])
        return (text + (f", +{more} more" if more > 0 else "")) if text else f"{len(value)} fields"
    if isinstance(value, (list, tuple)):
        if all(_is_number(v) for v in value):
            return format_measured(list(value), max_items=4)
        return f"{len(value)} values"
    return str(value)


def _status_tally(value: Mapping[str, Any]) -> str:
    """A record of three or more nested readings that each carry a ``status`` (a comparison per epsilon
    and baseline, say) as their statuses counted: ``"12 comparisons: 4 lower, 6 unresolved, 2
    baseline unreached"`` (the readings themselves are in ``details.md``); ``""`` otherwise."""
    found: list[str] = []

    def walk(v: Any, depth: int) -> None:
        if not isinstance(v, Mapping) or depth > 3:
            return
        if isinstance(v.get("status"), str):
            found.append(v["status"])
            return
        for sub in v.values():
            walk(sub, depth + 1)

    for sub in value.values():
        walk(sub, 1)
    if len(found) < 3:
        return ""
    counts: dict[str, int] = {}
    for st in found:
        counts[st] = counts.get(st, 0) + 1
    parts = ", ".join(f"{n} {st.replace('_', ' ')}" for st, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{len(found)} comparisons: {parts}"


def format_target(value: Any) -> str:
    """The paper's number: a verdict target's size (``0.0106``, ``[low, high]`` or "direction"),
    else :func:`format_measured`."""
    if isinstance(value, Mapping) and {"value", "low", "high"} <= set(value):
        if value["value"] is not None:
            return format_number(value["value"])
        if value["low"] is not None:
            return f"[{format_number(value['low'])}, {format_number(value['high'])}]"
        return "direction only"
    if isinstance(value, Mapping):
        return format_short(value)
    return format_measured(value)


def _md(value: Any) -> str:
    """A value as one Markdown table cell."""
    text = value if isinstance(value, str) else format_measured(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _statement(text: Any) -> str:
    """A statement's head: up to its first " (" or ": " when that leaves 25 characters or more."""
    text = str(text or "")
    for sep in (": ", " ("):
        k = text.find(sep)
        if k >= 25:
            text = text[:k]
    return text


def _first_sentence(text: str) -> str:
    m = re.search(r"(?<=[a-z0-9)\]])[.;] (?=[A-Z(])", text)
    return text[:m.start()] if m and m.start() >= 12 else text


def _clip(text: str, width: int) -> str:
    """``text`` on one line, cut at a word boundary to ``width`` characters with "..."."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[:width - 3]
    if " " in cut[width // 2:]:
        cut = cut[:cut.rfind(" ")]
    return cut.rstrip(",;: ") + "..."


def _wrap(text: str, width: int = 160) -> list[str]:
    """A paragraph as lines of at most ``width`` characters (links and words are never split)."""
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]


def _seconds(s: float) -> str:
    s = float(s)
    return f"{s:.1f} s" if s < 60 else f"{int(s // 60)} min {s % 60:04.1f} s"


def _compact_json(config: Any) -> str:
    """A config dict as JSON with one top-level key per line (lists kept on one line)."""
    if not isinstance(config, dict) or not config:
        return json.dumps(config)
    items = [f"  {json.dumps(str(k))}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(config.items())]
    return "{\n" + ",\n".join(items) + "\n}"


def _anchor(name: str) -> str:
    """GitHub-style heading anchor of ``name``."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
