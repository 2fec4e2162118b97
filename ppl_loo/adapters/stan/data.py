"""Helpers of the Stan adapters: observations in the data, Stan's flat names, draws in and out.

Shared by the LOO adapter (:mod:`ppl_loo.adapters.stan.posterior`) and the PVI terms
(:mod:`ppl_loo.adapters.stan.pvi`); they work on a :class:`~ppl_loo.stan_bridge.StanModel` (the bridge) and
its data ``dict``.
"""

from __future__ import annotations

import re

import numpy as np

from ppl_loo.stan_bridge.model import StanDataError, StanEvaluationError

__all__ = [
    "NAME_RE",
    "constrain_draws",
    "detect_n_obs",
    "dim_names",
    "flat_columns",
    "observation_data",
    "observation_keys",
    "split_name",
    "unconstrain_draws",
]

#: a flat Stan name, ``theta.2.3``: the variable and its 1-based indices
NAME_RE = re.compile(r"^([^.]+)((?:\.\d+)*)$")


def split_name(name: str) -> tuple[str, tuple[int, ...]]:
    """Split a flat Stan name into the variable and its indices.

    Parameters
    ----------
    name : str
        A name such as ``"theta.2.3"``.

    Returns
    -------
    tuple
        ``("theta", (2, 3))`` (1-based indices); a name that is not of that form is returned
        whole with no indices.
    """
    m = NAME_RE.match(name)
    if not m:
        return name, ()
    idx = tuple(int(k) for k in m.group(2).split(".")[1:]) if m.group(2) else ()
    return m.group(1), idx


def flat_columns(bridge, var: str) -> dict[str, int]:
    """``{flat name: column}`` of the variable ``var`` in ``param_constrain(include_tp, include_gq)``."""
    names = bridge.constrained_param_names(include_tp=True, include_gq=True)
    return {name: j for j, name in enumerate(names) if split_name(name)[0] == var}


def dim_names(dims: dict) -> dict[str, tuple[str, ...]]:
    """``{name: ("name_dim_0", ...)}`` for ``{name: shape}``."""
    return {k: tuple(f"{k}_dim_{j}" for j in range(len(s))) for k, s in dims.items()}


def _is_int_scalar(v, whole_floats: bool) -> bool:
    """Whether ``v`` is an integer scalar (with ``whole_floats``: also a float of integer value)."""
    if isinstance(v, bool) or np.ndim(v) != 0:
        return False
    v = np.asarray(v)
    if whole_floats:
        return float(v).is_integer()
    return np.issubdtype(v.dtype, np.integer)


def detect_n_obs(data: dict, n_log_lik: int | None = None, *, prefer: str | None = None,
                 whole_floats: bool = False) -> str:
    """The data entry holding the number of observations, when the data say so unambiguously.

    Candidates are the positive integer scalars ``K`` such that some array entry has leading
    dimension ``data[K]``; when the program has a ``log_lik`` generated quantity of length
    ``n_log_lik``, only candidates of that value remain.

    Parameters
    ----------
    data : dict
        The data of the program.
    n_log_lik : int, optional
        Length of the program's ``log_lik`` generated quantity.
    prefer : str, optional
        Among several candidates, this one (PVI prefers ``"N"``) instead of an error.
    whole_floats : bool
        Also count floats of integer value (``10.0``) as integer scalars.

    Returns
    -------
    str
        The only candidate, or ``prefer`` when it is one of several.

    Raises
    ------
    StanDataError
        No candidate, or several without ``prefer`` among them; the message asks for
        ``n_obs=...`` and names the candidates.
    """
    leading = {np.shape(v)[0] for v in data.values() if np.ndim(v) >= 1}
    cands = [k for k, v in data.items()
             if _is_int_scalar(v, whole_floats) and int(np.asarray(v)) >= 1 and int(np.asarray(v)) in leading]
    if n_log_lik is not None:
        cands = [k for k in cands if int(np.asarray(data[k])) == n_log_lik]
    if len(cands) == 1:
        return cands[0]
    if prefer is not None and prefer in cands:
        return prefer
    shapes = {k: (int(np.asarray(v)) if _is_int_scalar(v, whole_floats) else np.shape(v)) for k, v in data.items()}
    with_ll = f" equal to the length {n_log_lik} of the log_lik generated quantity" if n_log_lik else ""
    if not cands:
        raise StanDataError(
            "cannot tell which data entry is the number of observations: no integer entry"
            f"{with_ll} is the leading dimension of an array entry (data: {shapes}). Pass "
            "n_obs='N' (the name of that entry) to pl.StanModel."
        )
    raise StanDataError(
        f"the number of observations is ambiguous: the integer entries {cands}{with_ll} are each the "
        f"leading dimension of an array entry (data: {shapes}). Pass n_obs=... to pl.StanModel, for "
        f"example n_obs={cands[0]!r}, and obs_keys=[...] if not every such array is indexed by observation."
    )


def observation_keys(data: dict, n_key: str, n: int) -> list[str]:
    """The data entries other than ``n_key`` whose leading dimension is ``n`` (the default ``obs_keys``)."""
    return [k for k, v in data.items() if k != n_key and np.ndim(v) >= 1 and np.shape(v)[0] == n]


def observation_data(data: dict, n_key: str, obs_keys, idx, replace: dict | None = None) -> dict:
    """The data restricted to the observations ``idx``.

    Parameters
    ----------
    data : dict
        The full data.
    n_key : str
        The entry holding the number of observations; set to ``len(idx)``.
    obs_keys : sequence of str
        The entries indexed by observation along their first axis.
    idx : sequence of int
        The observations kept (0-based, in this order).
    replace : dict, optional
        Entries set after the subsetting (an outcome replaced by a category).

    Returns
    -------
    dict
        The data of the kept observations.
    """
    idx = np.asarray(idx, dtype=int).reshape(-1)
    out = dict(data)
    for k in obs_keys:
        out[k] = np.asarray(data[k])[idx]
    out[n_key] = len(idx)
    if replace:
        out.update(replace)
    return out


def constrain_draws(bridge, theta) -> dict:
    """``{name: (S, *shape)}`` of the parameters and transformed parameters at unconstrained draws."""
    vals = bridge.param_constrain(np.asarray(theta, dtype=np.float64), include_tp=True)
    return bridge.split_constrained(vals, include_tp=True)


def _source_line(code: str, msg: str) -> str:
    """`` [line 11: real<lower=0> tau;]`` for a Stan message that names a line of ``code``."""
    m = re.search(r"line (\d+), column", msg)
    lines = code.splitlines()
    if m and 1 <= int(m.group(1)) <= len(lines):
        return f" [line {m.group(1)}: {lines[int(m.group(1)) - 1].strip()}]"
    return ""


def _posterior_dataset(posterior):
    """The ``posterior`` group of a DataTree as a Dataset (a Dataset is returned as it is)."""
    if hasattr(posterior, "children") and "posterior" in getattr(posterior, "children", {}):
        posterior = posterior["posterior"]
    if hasattr(posterior, "to_dataset"):
        posterior = posterior.to_dataset()
    return posterior


def _constrained_matrix(posterior, param_dims: dict) -> np.ndarray:
    """The constrained draws ``(S, n)`` in Stan's flat order, after checking names, dims and shapes."""
    missing = [v for v in param_dims if v not in posterior]
    if missing:
        raise ValueError(
            f"the posterior lacks the parameter(s) {missing} of the Stan program (it has {list(posterior.data_vars)}): "
            f"the draws come from a different model, or the wrong program was given (program parameters: "
            f"{dict(param_dims)})."
        )
    blocks = []
    for var, shape in param_dims.items():
        da = posterior[var]
        extra = [d for d in da.dims if d not in ("chain", "draw")]
        if "chain" not in da.dims or "draw" not in da.dims:
            raise ValueError(f"posterior variable {var!r} has dims {da.dims}; expected ('chain', 'draw', ...)")
        got = tuple(da.sizes[d] for d in extra)
        if got != tuple(shape):
            raise ValueError(
                f"posterior variable {var!r} has shape {got} per draw but the Stan program declares {tuple(shape)} "
                "with these data: the draws come from a different model or from different data."
            )
        a = np.asarray(da.transpose("chain", "draw", *extra).values, dtype=np.float64)
        a = a.reshape(a.shape[0] * a.shape[1], *shape)
        # Stan's flat order is column-major within each variable
        blocks.append(a.reshape(a.shape[0], -1, order="F") if shape else a.reshape(-1, 1))
    x = np.concatenate(blocks, axis=1) if blocks else np.zeros((0, 0))
    finite = np.isfinite(x)
    if not finite.all():
        bad = int((~finite).any(axis=1).sum())
        raise ValueError(f"the posterior has {bad} draw(s) with NaN or inf parameter values; remove them first")
    return x


def unconstrain_draws(bridge, posterior) -> np.ndarray:
    """Posterior draws with Stan's variable names as unconstrained draws ``(S, d)``.

    Parameters
    ----------
    bridge : StanModel
        The program on the data the draws come from.
    posterior : xarray.Dataset or DataTree
        Draws with dims ``chain, draw, ...`` (a DataTree: its ``posterior`` group).

    Returns
    -------
    numpy.ndarray
        ``(chains * draws, d)``, chain-major.

    Raises
    ------
    ValueError
        A parameter of the program is missing, has other dims or another shape per draw than
        the program declares for these data, or a draw has NaN / inf values.
    StanEvaluationError
        A draw is outside the support of the parameters (Stan's message, with the chain and draw
        index and the declaration's line).
    """
    posterior = _posterior_dataset(posterior)
    x = _constrained_matrix(posterior, bridge.get_dims(include_tp=False, include_gq=False))
    try:
        return bridge.param_unconstrain(x)
    except StanEvaluationError as err:
        msg = str(err)
        m = re.search(r"draw (\d+):", msg)
        where = ""
        if m:
            s_ = int(m.group(1))
            n_draw = posterior.sizes["draw"]
            where = f" (chain index {s_ // n_draw}, draw index {s_ % n_draw})"
        raise StanEvaluationError(
            f"a posterior draw{where} is outside the support of the Stan program's parameters: {msg}"
            f"{_source_line(bridge.code, msg)}. Check that the draws come from this program."
        ) from None
