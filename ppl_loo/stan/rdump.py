"""Read CmdStan's R dump data files (``.data.R``) into a dict of NumPy values."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["read_rdump"]

_ASSIGN_RE = re.compile(r"""(?m)^[ \t]*["'`]?([A-Za-z.][\w.]*)["'`]?[ \t]*<-""")


def _r_numbers(text: str) -> tuple[list[float], bool]:
    """Comma-separated R numbers (with ``a:b`` ranges, ``NA``, ``Inf``, ``1L``) -> values, all-int flag."""
    vals: list[float] = []
    is_int = True
    for tok in (t.strip() for t in text.split(",")):
        if not tok:
            continue
        if re.fullmatch(r"-?\d+L?\s*:\s*-?\d+L?", tok):
            a, b = (int(s.strip().rstrip("L")) for s in tok.split(":"))
            vals.extend(range(a, b + 1) if a <= b else range(a, b - 1, -1))
            continue
        t = tok.rstrip("L") if re.fullmatch(r"-?\d+L", tok) else tok
        low = t.lower().lstrip("+-")
        if low in ("na", "nan"):
            vals.append(math.nan)
            is_int = False
        elif low == "inf":
            vals.append(-math.inf if t.startswith("-") else math.inf)
            is_int = False
        else:
            v = float(t)
            if not re.fullmatch(r"[-+]?\d+", t):
                is_int = False
            vals.append(v)
    return vals, is_int


def _r_value(text: str):
    s = text.strip().rstrip(";").strip()
    dim = None
    m = re.match(r"^structure\s*\((.*)\)$", s, re.DOTALL)
    if m:
        inner = m.group(1)
        md = re.search(r"\.Dim\s*=\s*(c\s*\([^)]*\)|[\d:L\s]+)", inner)
        if md is None:
            raise ValueError(f"R dump: structure(...) without .Dim: {s[:80]!r}")
        d = md.group(1).strip()
        d = d[d.index("(") + 1 : -1] if d.startswith("c") else d
        dim = tuple(int(v) for v in _r_numbers(d)[0])
        s = inner[: md.start()].rstrip().rstrip(",").strip()
    mc = re.match(r"^c\s*\((.*)\)$", s, re.DOTALL)
    if mc:
        vals, is_int = _r_numbers(mc.group(1))
        vector = True
    elif re.match(r"^(integer|double|numeric)\s*\(\s*0?\s*\)$", s):
        vals, is_int, vector = [], True, True
    else:
        vals, is_int = _r_numbers(s)
        vector = len(vals) != 1 or ":" in s
    arr = np.array(vals, dtype=np.int64 if is_int else np.float64)
    if dim is not None:
        if math.prod(dim) != arr.size:
            raise ValueError(f"R dump: .Dim {dim} does not match {arr.size} values")
        return arr.reshape(dim, order="F")  # R arrays are column-major
    if not vector:
        return int(arr[0]) if is_int else float(arr[0])
    return arr


def read_rdump(path) -> dict:
    """Read an R dump data file (CmdStan's ``.data.R``) -> ``{name: int | float | ndarray}``.

    Supports scalars, ``c(...)`` vectors, ``a:b`` ranges, ``structure(c(...), .Dim = c(...))``
    arrays (column-major, as R stores them), ``NA``/``Inf``, integer suffix ``L``. Values written
    without a decimal point or exponent are integers.
    """
    text = Path(path).read_text(encoding="utf-8")
    text = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    matches = list(_ASSIGN_RE.finditer(text))
    out: dict[str, Any] = {}
    for k, m in enumerate(matches):
        end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
        out[m.group(1)] = _r_value(text[m.end() : end])
    return out
