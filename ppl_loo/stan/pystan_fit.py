"""PyStan 3 fits (``stan.fit.Fit``) to the DataTree of :func:`ppl_loo.from_cmdstan`."""

from __future__ import annotations

import importlib.metadata
import json
import math
import re
from typing import Any

import numpy as np
import xarray as xr

from .cmdstan_csv import _TIME_RE, _build_tree

__all__ = ["from_pystan_fit", "pystan_messages"]


def pystan_messages(fit) -> list[dict]:
    """Per chain: step size, inverse metric, timing and Stan's gradient timing from the raw output.

    PyStan 3 keeps every chain's httpstan output (JSON lines) in ``fit.stan_outputs``; besides the
    draws it holds the messages CmdStan would write as CSV comments (topic ``sample``: "Step
    size = ...", "Diagonal elements of inverse mass matrix:", "Elapsed Time: ...") and the logger's
    "Gradient evaluation took X seconds".
    """
    out = []
    for raw in getattr(fit, "stan_outputs", ()):
        info: dict[str, Any] = {"timing": {}}
        metric_next = False
        for line in raw.splitlines():
            if b'"values":{' in line or b'"values": {' in line:
                continue  # a draw (may hold NaN/inf, which strict JSON parsers reject)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            vals = msg.get("values")
            if not isinstance(vals, list) or not vals or not isinstance(vals[0], str):
                continue
            text = vals[0]
            if msg.get("topic") == "logger":
                m = re.search(r"Gradient evaluation took ([-+0-9.eE]+) seconds", text)
                if m:
                    info["gradient_seconds"] = float(m.group(1))
                continue
            if msg.get("topic") != "sample":
                continue
            body = text.strip()
            if metric_next:
                metric_next = False
                try:
                    info["inv_metric"] = np.array([float(v) for v in body.split(",") if v.strip()])
                    continue
                except ValueError:
                    pass
            if body.lower().startswith("step size"):
                info["step_size"] = float(body.split("=", 1)[1])
            elif "inverse mass matrix" in body.lower() or "inverse metric" in body.lower():
                metric_next = True
            else:
                for val, what in _TIME_RE.findall(body):
                    info["timing"][what.strip().lower().replace("-", "")] = float(val)
        out.append(info)
    return out


def from_pystan_fit(fit, *, include_warmup, **kw) -> xr.DataTree:
    """PyStan 3 ``Fit``.

    ``fit[name]`` has shape ``(*dims, n_saved * num_chains)`` (scalars: ``(1, ...)``) where the
    last axis runs over draws with the chains interleaved (``draw * num_chains + chain``: PyStan
    stores ``(column, draw, chain)`` and flattens the last two in C order); with
    ``save_warmup=True`` the first ``ceil(num_warmup / num_thin)`` saved draws are warmup.
    """
    n_chain = int(fit.num_chains)
    thin = int(getattr(fit, "num_thin", 1) or 1)
    n_warm = math.ceil(int(fit.num_warmup) / thin) if getattr(fit, "save_warmup", False) else 0
    header: list[str] = []
    cols: list[np.ndarray] = []
    for name in getattr(fit, "sample_and_sampler_param_names", ()):
        header.append(name)
        cols.append(np.asarray(fit[name], dtype=np.float64).reshape(-1))
    for name, dims in zip(fit.param_names, fit.dims):
        dims = tuple(int(k) for k in dims)
        a = np.asarray(fit[name], dtype=np.float64)
        total = a.shape[-1]
        flat = a.reshape(-1, total, order="F")  # elements in column-major order, like CmdStan
        idxs = [()] if not dims else [i[::-1] for i in np.ndindex(*dims[::-1])]
        if len(idxs) != flat.shape[0]:
            raise ValueError(f"PyStan fit: {name!r} has {flat.shape[0]} values per draw, expected dims {dims}")
        for k, idx in enumerate(idxs):
            header.append(name + "".join(f".{i + 1}" for i in idx))
            cols.append(flat[k])
    if not cols:
        raise ValueError("the PyStan fit has no draws")
    total = cols[0].shape[0]
    if total % n_chain:
        raise ValueError(f"{total} draws do not split into {n_chain} chains")
    draws = np.stack(cols, axis=-1).reshape(total // n_chain, n_chain, len(cols)).transpose(1, 0, 2)
    sampling = draws[:, n_warm:]
    warmup = draws[:, :n_warm] if include_warmup and n_warm > 0 else None
    attrs: dict[str, Any] = {"inference_library": "pystan"}
    try:
        attrs["inference_library_version"] = importlib.metadata.version("pystan")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a Fit without pystan installed
        attrs["inference_library_version"] = "unknown"
    attrs.update({"num_samples": int(fit.num_samples), "num_warmup": int(fit.num_warmup),
                  "save_warmup": int(bool(getattr(fit, "save_warmup", False))), "thin": thin})
    stats_attrs: dict[str, Any] = {}
    msgs = pystan_messages(fit)
    if len(msgs) == n_chain:
        if all("step_size" in m for m in msgs):
            attrs["step_size"] = np.array([m["step_size"] for m in msgs])
        if all("inv_metric" in m for m in msgs) and len({m["inv_metric"].shape for m in msgs}) == 1:
            stats_attrs["inv_metric"] = np.stack([m["inv_metric"] for m in msgs])
        for key in ("warmup", "sampling", "total"):
            if all(key in m["timing"] for m in msgs):
                stats_attrs[f"elapsed_time_{key}"] = np.array([m["timing"][key] for m in msgs])
        if all("gradient_seconds" in m for m in msgs):
            stats_attrs["gradient_seconds"] = np.array([m["gradient_seconds"] for m in msgs])
    return _build_tree(header, sampling, warmup, attrs=attrs, stats_attrs=stats_attrs, **kw)
