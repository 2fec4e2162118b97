"""What ``ppl_loo``'s readers add around ArviZ's converters (:mod:`arviz_base`).

``arviz_base.from_cmdstanpy`` and ``arviz_base.from_pystan`` build the groups; these helpers
cover what they do not: the default ``log_lik`` only when the program has it, a ``KeyError``
naming the variables when a requested one is missing, renamed posterior-predictive variables,
``observed_data`` given as arrays, the warmup split and the run's settings as attributes.
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from arviz_base import dict_to_dataset

__all__ = ["DEFAULT_LOG_LIK", "assemble", "names_map", "observed_dataset", "rename_variables",
           "requested_names", "split_warmup"]

#: The log-likelihood variable read by default, when the program has one.
DEFAULT_LOG_LIK = "log_lik"


def names_map(spec, what: str) -> dict[str, str]:
    """``None | str | list | {new: stan}`` -> ``{new_name: stan_name}``.

    Parameters
    ----------
    spec
        The variable(s), as the readers accept them.
    what
        The argument's name, for the error message.

    Returns
    -------
    dict
        ``{name in the DataTree: name in the Stan program}``.
    """
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


def requested_names(log_likelihood, posterior_predictive, available, source: str):
    """The log-likelihood and posterior-predictive maps, checked against the program's variables.

    The default ``log_likelihood="log_lik"`` is dropped when the program has no ``log_lik``; any
    other missing variable raises ``KeyError`` (the converters would raise ``ValueError`` deep
    inside, or silently skip it).

    Parameters
    ----------
    log_likelihood, posterior_predictive
        As :func:`ppl_loo.from_cmdstan` takes them.
    available
        The variable names of the fit.
    source
        ``"CmdStan"`` or ``"PyStan"``, for the error message.

    Returns
    -------
    tuple of dict
        ``({new: stan}, {new: stan})`` for the log-likelihood and posterior-predictive groups.
    """
    available = list(available)
    if log_likelihood == DEFAULT_LOG_LIK and DEFAULT_LOG_LIK not in available:
        log_likelihood = None
    ll = names_map(log_likelihood, "log_likelihood")
    pp = names_map(posterior_predictive, "posterior_predictive")
    for stan in {**ll, **pp}.values():
        if stan not in available:
            raise KeyError(f"{stan!r} is not a variable of the {source} output; variables: {available}")
    return ll, pp


def rename_variables(ds: xr.Dataset, mapping: dict[str, str]) -> xr.Dataset:
    """Rename variables ``{new: old}`` and their default dims (``old_dim_k`` -> ``new_dim_k``).

    The converters rename log-likelihood variables (a dict argument) but not posterior-predictive
    ones; this does it for the latter.
    """
    names = {}
    for new, old in mapping.items():
        if new == old or old not in ds.data_vars:
            continue
        names[old] = new
        for dim in ds[old].dims:
            if str(dim).startswith(f"{old}_dim_"):
                names[dim] = f"{new}{str(dim)[len(old):]}"
    return ds.rename(names) if names else ds


def observed_dataset(observed_data) -> xr.Dataset:
    """``{name: array}`` (dims ``name_dim_k``, through ``arviz_base.dict_to_dataset``) or a Dataset as is.

    ``from_pystan`` reads observed data only by name from the PyStan model's data, so both readers
    take arrays here instead.
    """
    if isinstance(observed_data, xr.Dataset):
        return observed_data
    if not isinstance(observed_data, dict):
        raise TypeError("observed_data: expected a dict {name: array} or an xarray.Dataset")
    return dict_to_dataset({k: np.asarray(v) for k, v in observed_data.items()}, sample_dims=[])


def split_warmup(ds: xr.Dataset, n_warmup: int) -> tuple[xr.Dataset, xr.Dataset]:
    """The first ``n_warmup`` draws and the rest, each with draw coordinates from 0."""
    warm = ds.isel(draw=slice(None, n_warmup))
    rest = ds.isel(draw=slice(n_warmup, None))
    return (warm.assign_coords(draw=np.arange(warm.sizes["draw"])),
            rest.assign_coords(draw=np.arange(rest.sizes["draw"])))


def assemble(groups: dict[str, xr.Dataset], *, attrs: dict, stats_attrs: dict, observed_data,
             pp_names: dict[str, str]) -> xr.DataTree:
    """The DataTree: posterior-predictive names, ``observed_data``, and the run's attributes.

    ``attrs`` go on the root and on every group but ``observed_data``; ``stats_attrs`` (timings,
    inverse metric) on ``sample_stats`` and ``warmup_sample_stats`` too.
    """
    out = {}
    for name, ds in groups.items():
        if name.endswith("posterior_predictive"):
            ds = rename_variables(ds, pp_names)
        extra = stats_attrs if name.endswith("sample_stats") else {}
        out[name] = ds.assign_attrs({**attrs, **extra})
    if observed_data is not None:
        out["observed_data"] = observed_dataset(observed_data)
    dt = xr.DataTree.from_dict(out)
    dt.attrs.update(attrs)
    return dt
