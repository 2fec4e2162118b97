"""PyStan 3 fits (``stan.fit.Fit``) to a DataTree, through ``arviz_base.from_pystan``.

What is added to ``from_pystan`` (arviz_base 1.3):

* warmup: ``from_pystan(..., save_warmup=True)`` fills ``warmup_posterior`` (and the warmup
  log-likelihood / posterior-predictive groups) with the *sampling* draws
  (``io_pystan.get_draws`` slices ``values[:, num_warmup:]`` for both). So the fit is converted
  as if it had saved no warmup (every saved draw in one group) and split here;
* the adaptation and timing messages (step size, inverse metric, elapsed times, Stan's "Gradient
  evaluation took"), which ``from_pystan`` does not read: :func:`pystan_messages`;
* the names and ``observed_data`` handling shared with the CmdStan reader (:mod:`.groups`).
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import re
from typing import Any

import numpy as np
import xarray as xr
from arviz_base import from_pystan

from .groups import assemble, requested_names, split_warmup

__all__ = ["from_pystan_fit", "is_pystan_fit", "pystan_messages"]

TIME_RE = re.compile(r"([-+0-9.eE]+)\s*seconds\s*\(([^)]*)\)")
GRADIENT_RE = re.compile(r"Gradient evaluation took ([-+0-9.eE]+) seconds")


def is_pystan_fit(obj) -> bool:
    """Whether ``obj`` looks like a PyStan 3 ``stan.fit.Fit`` (checked without importing ``stan``)."""
    return hasattr(obj, "param_names") and hasattr(obj, "num_chains") and hasattr(obj, "__getitem__")


def _message_text(line: bytes) -> tuple[str | None, str | None]:
    """``(topic, text)`` of one httpstan output line holding a message; ``(None, None)`` for a draw."""
    if b'"values":{' in line or b'"values": {' in line:
        return None, None  # a draw (may hold NaN/inf, which strict JSON parsers reject)
    try:
        msg = json.loads(line)
    except ValueError:
        return None, None
    vals = msg.get("values")
    if not isinstance(vals, list) or not vals or not isinstance(vals[0], str):
        return None, None
    return msg.get("topic"), vals[0].strip()


def _chain_messages(raw: bytes) -> dict[str, Any]:
    info: dict[str, Any] = {"timing": {}}
    metric_next = False
    for line in raw.splitlines():
        topic, body = _message_text(line)
        if topic == "logger" and (m := GRADIENT_RE.search(body)):
            info["gradient_seconds"] = float(m.group(1))
        if topic != "sample":
            continue
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
            for val, what in TIME_RE.findall(body):
                info["timing"][what.strip().lower().replace("-", "")] = float(val)
    return info


def pystan_messages(fit) -> list[dict]:
    """Per chain: step size, inverse metric, timing and Stan's gradient timing from the raw output.

    PyStan 3 keeps every chain's httpstan output (JSON lines) in ``fit.stan_outputs``; besides the
    draws it holds the messages CmdStan would write as CSV comments (topic ``sample``: "Step
    size = ...", "Diagonal elements of inverse mass matrix:", "Elapsed Time: ...") and the logger's
    "Gradient evaluation took X seconds".

    Parameters
    ----------
    fit : stan.fit.Fit

    Returns
    -------
    list of dict
        One per chain: ``timing`` (``{"warmup", "sampling", "total"}`` seconds) and, when printed,
        ``step_size``, ``inv_metric`` and ``gradient_seconds``.
    """
    return [_chain_messages(raw) for raw in getattr(fit, "stan_outputs", ())]


class _EveryDrawFit:
    """The fit seen as if it saved no warmup, so that ``from_pystan`` reads every saved draw."""

    save_warmup = False

    def __init__(self, fit):
        self._fit = fit

    def __getattr__(self, name):
        return getattr(self._fit, name)


def _fit_attrs(fit, n_chain: int) -> tuple[dict, dict]:
    """Attributes of every group and of ``sample_stats``: settings, step sizes, metric, timings."""
    attrs: dict[str, Any] = {"inference_library": "pystan"}
    try:
        attrs["inference_library_version"] = importlib.metadata.version("pystan")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a Fit without pystan installed
        attrs["inference_library_version"] = "unknown"
    attrs.update({"num_samples": int(fit.num_samples), "num_warmup": int(fit.num_warmup),
                  "save_warmup": int(bool(getattr(fit, "save_warmup", False))),
                  "thin": int(getattr(fit, "num_thin", 1) or 1)})
    stats_attrs: dict[str, Any] = {}
    msgs = pystan_messages(fit)
    if len(msgs) != n_chain:
        return attrs, stats_attrs
    if all("step_size" in m for m in msgs):
        attrs["step_size"] = np.array([m["step_size"] for m in msgs])
    if all("inv_metric" in m for m in msgs) and len({m["inv_metric"].shape for m in msgs}) == 1:
        stats_attrs["inv_metric"] = np.stack([m["inv_metric"] for m in msgs])
    for key in ("warmup", "sampling", "total"):
        if all(key in m["timing"] for m in msgs):
            stats_attrs[f"elapsed_time_{key}"] = np.array([m["timing"][key] for m in msgs])
    if all("gradient_seconds" in m for m in msgs):
        stats_attrs["gradient_seconds"] = np.array([m["gradient_seconds"] for m in msgs])
    return attrs, stats_attrs


def from_pystan_fit(fit, *, log_likelihood="log_lik", posterior_predictive=None, observed_data=None,
                    include_warmup: bool = False) -> xr.DataTree:
    """PyStan 3 ``Fit`` -> DataTree (the arguments and groups of :func:`ppl_loo.from_cmdstan`).

    Parameters
    ----------
    fit : stan.fit.Fit
    log_likelihood, posterior_predictive, observed_data, include_warmup
        As :func:`ppl_loo.io.cmdstan.from_cmdstan`.

    Returns
    -------
    xarray.DataTree
    """
    ll, pp = requested_names(log_likelihood, posterior_predictive, fit.param_names, "PyStan")
    thin = int(getattr(fit, "num_thin", 1) or 1)
    n_warm = math.ceil(int(fit.num_warmup) / thin) if getattr(fit, "save_warmup", False) else 0
    dt = from_pystan(_EveryDrawFit(fit), log_likelihood=ll or None,
                     posterior_predictive=list(dict.fromkeys(pp.values())) or None, save_warmup=False)
    groups = {}
    for name, node in dt.children.items():
        warm, rest = split_warmup(node.to_dataset(), n_warm)
        groups[name] = rest
        if include_warmup and n_warm > 0:
            groups[f"warmup_{name}"] = warm
    attrs, stats_attrs = _fit_attrs(fit, int(fit.num_chains))
    return assemble(groups, attrs=attrs, stats_attrs=stats_attrs, observed_data=observed_data,
                    pp_names=pp)
