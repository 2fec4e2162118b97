"""Read CmdStan output (CSV files) into an ArviZ-style :class:`xarray.DataTree`, without cmdstanpy.

>>> from ppl_loo.stan.cmdstan_csv import from_cmdstan
>>> dt = from_cmdstan(["output_1.csv", "output_2.csv"], log_likelihood="log_lik")  # doctest: +SKIP

A CmdStan CSV file holds

* comment lines (``#``) with the run configuration (``stan_version_*``, ``model``, ``num_samples``,
  ``num_warmup``, ``save_warmup``, ``thin``, ...), written as an indented ``key = value`` tree;
* the header row (``lp__,accept_stat__,...,mu,theta.1,...``);
* when ``save_warmup=1``, the warmup draws;
* the adaptation block (``# Adaptation terminated``, ``# Step size = ...``, the inverse metric);
* the sampling draws, then the timing comments (``# Elapsed Time: ...``).

Array variables are written one column per element, ``name.i.j`` (1-based); the element order is
column-major, but values are placed by their parsed indices, not by column order.

:func:`read_rdump` (:mod:`ppl_loo.stan.rdump`) reads the R dump data format; PyStan fits are
converted by :mod:`ppl_loo.stan.pystan_fit`.
"""

from __future__ import annotations

import glob
import io
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr

from .rdump import read_rdump

__all__ = ["CmdStanCSV", "from_cmdstan", "read_cmdstan_csv", "read_rdump"]

#: CmdStan sampler diagnostic columns -> ArviZ ``sample_stats`` names.
SAMPLE_STATS_NAMES = {
    "lp__": "lp",
    "accept_stat__": "acceptance_rate",
    "stepsize__": "step_size",
    "treedepth__": "tree_depth",
    "n_leapfrog__": "n_steps",
    "divergent__": "diverging",
    "energy__": "energy",
}
_INT_STATS = {"tree_depth", "n_steps"}
_BOOL_STATS = {"diverging"}


# ---------------------------------------------------------------------------------------- one file
@dataclass
class CmdStanCSV:
    """The parsed content of one CmdStan CSV file."""

    path: str
    config: dict[str, str]  # leaf key -> value (first occurrence) and dotted path -> value
    header: list[str]
    draws: np.ndarray  # (n_rows, n_columns): warmup rows (if saved) then sampling rows
    n_warmup_rows: int
    step_size: float | None = None
    inv_metric: np.ndarray | None = None  # 1-D (diag_e) or 2-D (dense_e)
    timing: dict[str, float] = field(default_factory=dict)

    @property
    def warmup(self) -> np.ndarray:
        return self.draws[: self.n_warmup_rows]

    @property
    def sampling(self) -> np.ndarray:
        return self.draws[self.n_warmup_rows :]

    @property
    def stan_version(self) -> str | None:
        parts = [self.config.get(f"stan_version_{p}") for p in ("major", "minor", "patch")]
        return ".".join(parts) if all(p is not None for p in parts) else None

    def get_int(self, key: str, default: int) -> int:
        """An integer setting; CmdStan >= 2.33 writes booleans as ``true`` / ``false``."""
        value = self.config.get(key)
        if value is None:
            return default
        low = value.strip().lower()
        if low in ("true", "false"):
            return int(low == "true")
        try:
            return int(float(low))
        except ValueError:
            return default


_CONFIG_RE = re.compile(r"^#(\s*)([A-Za-z_][\w]*)\s*=\s*(.*?)\s*(\(Default\))?\s*$")
_SECTION_RE = re.compile(r"^#(\s*)([A-Za-z_][\w]*)\s*$")
_TIME_RE = re.compile(r"([-+0-9.eE]+)\s*seconds\s*\(([^)]*)\)")


def read_cmdstan_csv(path) -> CmdStanCSV:
    """Parse one CmdStan CSV file (config comments, header, warmup/sampling draws, adaptation, timing)."""
    path = os.fspath(path)
    config: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    header: list[str] | None = None
    rows: list[str] = []
    n_warmup_rows: int | None = None
    step_size = None
    metric_rows: list[list[float]] = []
    in_metric = False
    timing: dict[str, float] = {}

    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            if line.startswith("#"):
                body = line[1:].strip()
                if header is None:  # configuration tree
                    m = _CONFIG_RE.match(line)
                    ms = None if m else _SECTION_RE.match(line)
                    mm = m or ms
                    if mm:
                        indent, key = len(mm.group(1)), mm.group(2)
                        while stack and stack[-1][0] >= indent:
                            stack.pop()
                        if m:
                            value = m.group(3)
                            dotted = ".".join([s for _, s in stack] + [key])
                            config.setdefault(dotted, value)
                            config.setdefault(key, value)
                        stack.append((indent, key))
                    continue
                if body.startswith("Adaptation terminated"):
                    n_warmup_rows = len(rows)
                    continue
                if body.lower().startswith("step size"):
                    try:
                        step_size = float(body.split("=", 1)[1])
                    except (IndexError, ValueError):
                        pass
                    continue
                if "inverse mass matrix" in body.lower() or "inverse metric" in body.lower():
                    in_metric, metric_rows = True, []
                    continue
                if in_metric:
                    try:
                        metric_rows.append([float(v) for v in body.split(",") if v.strip()])
                        continue
                    except ValueError:
                        in_metric = False
                for val, what in _TIME_RE.findall(body):
                    key = what.strip().lower().replace("-", "")  # warmup, sampling, total
                    timing[key] = float(val)
                continue
            in_metric = False
            if header is None:
                header = [h.strip() for h in line.split(",")]
                continue
            rows.append(line)

    if header is None:
        raise ValueError(f"{path}: no header row; is this a CmdStan CSV file?")
    if rows:
        draws = np.loadtxt(io.StringIO("\n".join(rows)), delimiter=",", dtype=np.float64, ndmin=2)
    else:
        draws = np.empty((0, len(header)))
    if draws.shape[1] != len(header):
        raise ValueError(f"{path}: {draws.shape[1]} values per row but {len(header)} columns in the header")
    out = CmdStanCSV(path, config, header, draws, 0, step_size, None, timing)
    if n_warmup_rows is None:
        # no adaptation block (adapt engaged=0, fixed_param): count the saved warmup from the config
        n_warmup_rows = 0
        if out.get_int("save_warmup", 0):
            thin = max(out.get_int("thin", 1), 1)
            n_warmup_rows = min(math.ceil(out.get_int("num_warmup", 0) / thin), len(rows))
    elif not out.get_int("save_warmup", 0):
        n_warmup_rows = 0
    out.n_warmup_rows = n_warmup_rows
    if metric_rows:
        out.inv_metric = np.array(metric_rows[0]) if len(metric_rows) == 1 else np.array(metric_rows)
    return out


# ---------------------------------------------------------------------------------------- columns
def _split_column(col: str) -> tuple[str, tuple[int, ...]]:
    """``'theta.3'`` -> ``('theta', (2,))`` (0-based); non-indexed names are scalars."""
    parts = col.split(".")
    if len(parts) > 1:
        try:
            idx = tuple(int(p) - 1 for p in parts[1:])
            if all(i >= 0 for i in idx):
                return parts[0], idx
        except ValueError:
            pass
    return col, ()


def _variables(header: list[str]) -> dict[str, tuple[tuple[int, ...], list[tuple[int, tuple[int, ...]]]]]:
    """``{name: (shape, [(column, index), ...])}`` for the non-diagnostic columns, in header order."""
    groups: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    for j, col in enumerate(header):
        if col.endswith("__"):
            continue
        name, idx = _split_column(col)
        groups.setdefault(name, []).append((j, idx))
    out = {}
    for name, cols in groups.items():
        ndims = {len(i) for _, i in cols}
        if len(ndims) != 1:
            raise ValueError(f"variable {name!r}: columns with different numbers of indices")
        nd = ndims.pop()
        shape = tuple(max(i[k] for _, i in cols) + 1 for k in range(nd))
        if len(cols) != math.prod(shape):
            raise ValueError(f"variable {name!r}: {len(cols)} columns for shape {shape}")
        out[name] = (shape, cols)
    return out


def _gather(draws: np.ndarray, shape, cols) -> np.ndarray:
    """``draws (chain, draw, column)`` -> ``(chain, draw, *shape)``, placing columns by index."""
    arr = np.empty(draws.shape[:2] + tuple(shape), dtype=draws.dtype)
    for j, idx in cols:
        arr[(slice(None), slice(None)) + idx] = draws[:, :, j]
    return arr


def _names_map(spec, what: str) -> dict[str, str]:
    """``None | str | list | {new: stan}`` -> ``{new_name: stan_name}``."""
    if spec is None:
        return {}
    if isinstance(spec, str):
        return {spec: spec}
    if isinstance(spec, dict):
        return {str(k): str(v) for k, v in spec.items()}
    try:
        return {str(s): str(s) for s in spec}
    except TypeError:
        raise TypeError(f"{what}: expected None, a name, a list of names or a dict, got {spec!r}") from None


def _dims(name: str, shape) -> list[str]:
    return ["chain", "draw"] + [f"{name}_dim_{k}" for k in range(len(shape))]


def _dataset(arrays: dict[str, np.ndarray], attrs: dict) -> xr.Dataset:
    """Variables over ``(chain, draw, name_dim_0, ...)`` with integer coordinates (as ArviZ)."""
    data_vars = {}
    coords: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        dims = _dims(name, a.shape[2:])
        data_vars[name] = (dims, a)
        for dim, size in zip(dims, a.shape):
            coords[dim] = np.arange(size)
    return xr.Dataset(data_vars, coords=coords, attrs=dict(attrs))


def _stat_array(name: str, a: np.ndarray) -> np.ndarray:
    if name in _BOOL_STATS:
        return a.astype(bool)
    if name in _INT_STATS and np.all(np.isfinite(a)):
        return a.astype(np.int64)
    return a


def _observed_dataset(observed_data) -> xr.Dataset:
    if isinstance(observed_data, xr.Dataset):
        return observed_data
    if not isinstance(observed_data, dict):
        raise TypeError("observed_data: expected a dict {name: array} or an xarray.Dataset")
    vars_ = {}
    for name, v in observed_data.items():
        a = np.asarray(v)
        vars_[name] = ([f"{name}_dim_{k}" for k in range(a.ndim)], a)
    return xr.Dataset(vars_)


# ---------------------------------------------------------------------------------------- builders
def _build_tree(
    header: list[str],
    sampling: np.ndarray,  # (chain, draw, column)
    warmup: np.ndarray | None,
    *,
    log_likelihood,
    posterior_predictive,
    observed_data,
    attrs: dict,
    stats_attrs: dict | None = None,
) -> xr.DataTree:
    variables = _variables(header)
    ll = _names_map(log_likelihood, "log_likelihood")
    pp = _names_map(posterior_predictive, "posterior_predictive")
    for stan in {**ll, **pp}.values():
        if stan not in variables:
            raise KeyError(f"{stan!r} is not a variable of the CmdStan output; variables: {list(variables)}")
    special = set(ll.values()) | set(pp.values())
    stat_cols = {SAMPLE_STATS_NAMES.get(c, c.rstrip("_")): j for j, c in enumerate(header) if c.endswith("__")}

    def groups(draws: np.ndarray, prefix: str) -> dict[str, xr.Dataset]:
        post = {n: _gather(draws, s, c) for n, (s, c) in variables.items() if n not in special}
        out = {f"{prefix}posterior": _dataset(post, attrs)}
        if stat_cols:
            stats = {n: _stat_array(n, draws[:, :, j]) for n, j in stat_cols.items()}
            out[f"{prefix}sample_stats"] = _dataset(stats, {**attrs, **(stats_attrs or {})})
        if ll:
            out[f"{prefix}log_likelihood"] = _dataset(
                {new: _gather(draws, *variables[stan]) for new, stan in ll.items()}, attrs
            )
        if pp:
            out[f"{prefix}posterior_predictive"] = _dataset(
                {new: _gather(draws, *variables[stan]) for new, stan in pp.items()}, attrs
            )
        return out

    tree = groups(sampling, "")
    if warmup is not None:
        tree.update(groups(warmup, "warmup_"))
    if observed_data is not None:
        tree["observed_data"] = _observed_dataset(observed_data)
    dt = xr.DataTree.from_dict(tree)
    dt.attrs.update(attrs)
    return dt


def _expand_paths(csv_files) -> list[str]:
    if isinstance(csv_files, (str, os.PathLike)):
        s = os.fspath(csv_files)
        if os.path.isdir(s):
            paths = sorted(glob.glob(os.path.join(s, "*.csv")))
        elif any(ch in s for ch in "*?["):
            paths = sorted(glob.glob(s))
        else:
            paths = [s]
    else:
        paths = [os.fspath(p) for p in csv_files]
    if not paths:
        raise ValueError(f"no CmdStan CSV files in {csv_files!r}")
    return paths


def _header_difference(ref: list[str], other: list[str]) -> str:
    missing = [c for c in ref if c not in set(other)]
    extra = [c for c in other if c not in set(ref)]
    parts = []
    if missing:
        parts.append(f"missing columns {missing[:20]}{' ...' if len(missing) > 20 else ''}")
    if extra:
        parts.append(f"extra columns {extra[:20]}{' ...' if len(extra) > 20 else ''}")
    if not parts:
        moved = [c for a, c in zip(ref, other) if a != c]
        parts.append(f"columns in a different order {moved[:20]}")
    return "; ".join(parts)


def _from_csv_files(paths, *, include_warmup, **kw) -> xr.DataTree:
    files = [read_cmdstan_csv(p) for p in paths]
    ref = files[0]
    for f in files[1:]:
        if f.header != ref.header:
            raise ValueError(
                f"CmdStan CSV file {f.path!r} has a different header from {ref.path!r} "
                f"(a different model?): {_header_difference(ref.header, f.header)}"
            )
    n_samp = {f.path: f.sampling.shape[0] for f in files}
    n_warm = {f.path: f.warmup.shape[0] for f in files}
    if len(set(n_samp.values())) != 1:
        raise ValueError(f"the CmdStan CSV files have different numbers of draws: {n_samp}")
    sampling = np.stack([f.sampling for f in files])
    warmup = None
    if include_warmup:
        if len(set(n_warm.values())) != 1:
            raise ValueError(f"the CmdStan CSV files have different numbers of warmup draws: {n_warm}")
        if ref.n_warmup_rows > 0:
            warmup = np.stack([f.warmup for f in files])
    attrs: dict[str, Any] = {"inference_library": "cmdstan"}
    if ref.stan_version:
        attrs["inference_library_version"] = ref.stan_version
        attrs["stan_version"] = ref.stan_version
    for key in ("model", "num_samples", "num_warmup", "save_warmup", "thin"):
        if key in ref.config:
            attrs["model_name" if key == "model" else key] = ref.config[key]
    for key in ("num_samples", "num_warmup", "save_warmup", "thin"):
        if key in attrs:
            attrs[key] = ref.get_int(key, 0)
    if "metric" in ref.config:
        attrs["metric"] = ref.config["metric"]
    for key, name, cast in (("delta", "adapt_delta", float), ("max_depth", "max_depth", int)):
        try:  # the sampler settings a refit reuses (ppl_loo.loo(..., refit=...))
            attrs[name] = cast(str(ref.config[key]).split()[0])
        except (KeyError, ValueError):
            pass
    step = [f.step_size for f in files]
    if all(s is not None for s in step):
        attrs["step_size"] = step[0] if len(step) == 1 else np.array(step)
    stats_attrs = {}
    for key in ("warmup", "sampling", "total"):
        vals = [f.timing.get(key) for f in files]
        if all(v is not None for v in vals):
            stats_attrs[f"elapsed_time_{key}"] = np.array(vals)
    if all(f.inv_metric is not None and f.inv_metric.ndim == 1 for f in files):
        shapes = {f.inv_metric.shape for f in files}
        if len(shapes) == 1:
            stats_attrs["inv_metric"] = np.stack([f.inv_metric for f in files]) if len(files) > 1 else files[0].inv_metric
    return _build_tree(ref.header, sampling, warmup, attrs=attrs, stats_attrs=stats_attrs, **kw)


def from_cmdstan(
    csv_files,
    *,
    log_likelihood="log_lik",
    posterior_predictive=None,
    observed_data=None,
    include_warmup: bool = False,
) -> xr.DataTree:
    """CmdStan output -> :class:`xarray.DataTree` with ArviZ groups.

    Parameters
    ----------
    csv_files
        A CSV path, a list of paths (one chain each, all with the same header), a directory or a
        glob pattern; or a cmdstanpy ``CmdStanMCMC`` (its ``runset.csv_files`` are read, so
        ``cmdstanpy.from_csv(...)`` works too, without a CmdStan installation); or a PyStan 3
        ``stan.fit.Fit`` (draws, sampler diagnostics, warmup when saved, thinning, and the step
        size, inverse metric, timings and Stan's "Gradient evaluation took" from its output).
    log_likelihood
        The pointwise log-likelihood variable(s): a name, a list of names, a dict
        ``{new_name: stan_name}`` (renamed in the ``log_likelihood`` group), or None.
        Default ``"log_lik"``; a missing variable raises ``KeyError`` unless it is the default.
    posterior_predictive
        Same forms, for the ``posterior_predictive`` group.
    observed_data
        ``{name: array}`` (or a Dataset) stored as the ``observed_data`` group.
    include_warmup
        Add ``warmup_posterior`` / ``warmup_sample_stats`` (...) groups when the files saved the
        warmup (``save_warmup=1``); otherwise warmup rows are dropped.

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` (every non-diagnostic variable except the log-likelihood and
        posterior-predictive ones), ``sample_stats`` (``lp``, ``acceptance_rate``, ``step_size``,
        ``tree_depth``, ``n_steps``, ``diverging`` (bool), ``energy``), ``log_likelihood``,
        ``posterior_predictive``, ``observed_data``. Variables have dims
        ``(chain, draw, name_dim_0, ...)``. Attributes: ``stan_version``, ``model_name``,
        ``num_samples``, ``num_warmup``, ``save_warmup``, ``thin``, ``step_size`` (adapted, per
        chain); ``sample_stats`` also has ``inv_metric`` (diagonal) and ``elapsed_time_*``.
    """
    kw = {"posterior_predictive": posterior_predictive, "observed_data": observed_data}
    runset = getattr(csv_files, "runset", None)
    if runset is not None and hasattr(runset, "csv_files"):
        csv_files = list(runset.csv_files)
    elif hasattr(csv_files, "param_names") and hasattr(csv_files, "num_chains") and hasattr(csv_files, "__getitem__"):
        fit = csv_files
        ll = _resolve_default_ll(log_likelihood, list(fit.param_names))
        from .pystan_fit import from_pystan_fit

        return from_pystan_fit(fit, include_warmup=include_warmup, log_likelihood=ll, **kw)
    paths = _expand_paths(csv_files)
    if log_likelihood == "log_lik":  # the default: only when present
        header = read_cmdstan_header(paths[0])
        log_likelihood = _resolve_default_ll(log_likelihood, list(_variables(header)))
    return _from_csv_files(paths, include_warmup=include_warmup, log_likelihood=log_likelihood, **kw)


def _resolve_default_ll(log_likelihood, names):
    if log_likelihood == "log_lik" and "log_lik" not in names:
        return None
    return log_likelihood


def read_cmdstan_header(path) -> list[str]:
    """The column names of a CmdStan CSV file (the first non-comment line)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                return [h.strip() for h in line.rstrip("\r\n").split(",")]
    raise ValueError(f"{path}: no header row; is this a CmdStan CSV file?")
