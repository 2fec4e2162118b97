"""CmdStan's R dump data files (``.data.R``), read with ``cmdstanpy.utils.parse_rdump_value``.

``cmdstanpy.utils.rload`` (cmdstanpy 1.3) is not used as is: it splits the file at every line
holding ``<-``, keeps ``#`` comments, deletes every ``L`` of a right-hand side, and its value
parser (``parse_rdump_value``) reads only ``c(...)`` vectors and ``structure(c(...), .Dim =
c(...))`` arrays of plain numbers: no ``a:b`` ranges (which R's ``dump()`` writes for integer
sequences, ``structure(1:6, .Dim = 2:3)``), no ``NA``, no ``integer(0)``, and every vector comes
back as floats, so integer data would reach Stan as ``1.0``. This module splits the assignments,
rewrites each value into the form ``parse_rdump_value`` reads, and restores integers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from cmdstanpy.utils import parse_rdump_value

__all__ = ["read_rdump"]

_ASSIGN_RE = re.compile(r"""(?m)^[ \t]*["'`]?([A-Za-z.][\w.]*)["'`]?[ \t]*<-""")
_RANGE_RE = re.compile(r"(-?\d+)\s*:\s*(-?\d+)")
_EMPTY_RE = re.compile(r"(integer|double|numeric|c)\s*\(\s*0?\s*\)")
_STRUCTURE_RE = re.compile(r"structure\s*\((.*),\s*\.Dim\s*=\s*(.*)\)", re.DOTALL)
_INT_RE = re.compile(r"[-+]?\d+")


def _range(m: re.Match) -> str:
    a, b = int(m.group(1)), int(m.group(2))
    return ", ".join(str(v) for v in (range(a, b + 1) if a <= b else range(a, b - 1, -1)))


def _as_c(text: str) -> tuple[str, bool]:
    """``"1:3"`` / ``"c(1:2, NA)"`` / ``"5"`` -> ``"c(1, 2, 3)"`` ...; and whether every value is an integer."""
    text = text.strip()
    inner = text[text.index("(") + 1 : text.rindex(")")] if re.match(r"c\s*\(", text) else text
    inner = _RANGE_RE.sub(_range, inner)
    inner = re.sub(r"\bNA\b", "nan", inner)
    tokens = [t.strip() for t in inner.split(",") if t.strip()]
    return f"c({', '.join(tokens)})", all(_INT_RE.fullmatch(t) for t in tokens)


def _value(rhs: str):
    """One right-hand side -> ``int``, ``float`` or ``ndarray`` (R arrays are column-major)."""
    s = re.sub(r"\b(\d+)L\b", r"\1", " ".join(rhs.split()).rstrip(";").strip())
    if m := _EMPTY_RE.fullmatch(s):
        return np.array([], dtype=np.int64 if m.group(1) == "integer" else np.float64)
    if m := _STRUCTURE_RE.fullmatch(s):
        values, integral = _as_c(m.group(1))
        dims, _ = _as_c(m.group(2))
        return np.asarray(parse_rdump_value(f"structure({values}, .Dim = {dims})"),
                          dtype=np.int64 if integral else np.float64)
    vector = s.startswith("c") or ":" in s
    values, integral = _as_c(s)
    arr = np.asarray(parse_rdump_value(values), dtype=np.int64 if integral else np.float64)
    if vector:
        return arr
    return int(arr[0]) if integral else float(arr[0])


def read_rdump(path) -> dict:
    """Read an R dump data file (CmdStan's ``.data.R``).

    Supports scalars, ``c(...)`` vectors, ``a:b`` ranges, ``structure(c(...), .Dim = c(...))``
    arrays (column-major, as R stores them), ``NA``/``Inf``, integer suffix ``L``, ``#``
    comments. Values written without a decimal point or exponent are integers.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    dict
        ``{name: int | float | ndarray}``.
    """
    text = Path(path).read_text(encoding="utf-8")
    text = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    matches = list(_ASSIGN_RE.finditer(text))
    out: dict[str, Any] = {}
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        out[m.group(1)] = _value(text[m.end() : end])
    return out
