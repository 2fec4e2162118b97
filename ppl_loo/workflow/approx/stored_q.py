"""The approximation ``q`` a :func:`ppl_loo.pvi`, :func:`ppl_loo.laplace` or :func:`ppl_loo.qnvb`
result stores, read back for :func:`ppl_loo.loo` (Eq. 13).

Kept apart from those workflows so that ``pl.loo`` reads a stored fit without importing them.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.numerics.gaussian import MeanField, SubspaceGaussian
from ppl_loo.numerics.gaussian import log_q as gaussian_log_q
from ppl_loo.numerics.vi.families import Family, get_family

__all__ = ["pvi_log_q", "stored_gaussian", "stored_log_q", "APPROXIMATION_GROUPS"]

#: the groups of the Gaussian approximations whose ``q`` ``pl.loo`` reads (method -> group)
APPROXIMATION_GROUPS = ("laplace", "qnvb")


def _family_of(attrs) -> Family:
    """The variational family a ``pvi`` group was fitted with."""
    return get_family(attrs["family"], **json.loads(attrs.get("family_options", "{}") or "{}"))


def _params_of(family, phi, leaves_json, dim):
    """The family's parameters from the flat ``phi`` the ``pvi`` group stores."""
    template = family.init(dim)
    leaves, treedef = jax.tree_util.tree_flatten(template)
    shapes = [tuple(s) for _, s in json.loads(leaves_json)]
    if [tuple(np.shape(x)) for x in leaves] != shapes:
        raise ValueError("the pvi group's parameters do not match its family; was the DataTree edited?")
    out, k = [], 0
    for s in shapes:
        size = int(np.prod(s)) if s else 1
        out.append(jnp.asarray(np.asarray(phi[k:k + size]).reshape(s)))
        k += size
    return jax.tree_util.tree_unflatten(treedef, out)


def pvi_log_q(data, theta=None):
    """``log q`` of a ``pl.pvi`` result as a JAX function of one unconstrained draw, or ``None``.

    ``None`` unless ``data`` has a ``pvi`` group whose draws are the ``posterior`` group. With
    ``theta`` (the posterior draws in the model's unconstrained space, as ``pl.loo`` computes
    them) the function is checked against the ``log_q`` stored per draw: a mismatch means the
    model given to ``pl.loo`` parameterizes the space differently from the one PVI used (or the
    draws were changed), and the variational correction (Eq. 13) would be wrong, so it raises.
    """
    if not isinstance(data, xr.DataTree) or "pvi" not in data.children:
        return None
    g = data["pvi"].to_dataset()
    if g.attrs.get("posterior_group") != "posterior" or "phi" not in g:
        return None
    family = _family_of(g.attrs)
    params = _params_of(family, np.asarray(g["phi"].values), g.attrs["phi_leaves"], int(g.attrs["dim"]))

    def log_q(th):
        return family.log_q(params, th)

    if theta is not None:
        theta = np.asarray(theta, dtype=np.float64)
        stored = np.asarray(g["log_q"].values).reshape(-1)
        if theta.shape[0] != stored.shape[0]:
            raise ValueError(f"the posterior has {theta.shape[0]} draws but the pvi group's log_q has "
                             f"{stored.shape[0]}: the draws are not the ones pl.pvi wrote. Pass log_q= explicitly.")
        got = np.asarray(jax.jit(jax.vmap(log_q))(jnp.asarray(theta)))
        if not np.allclose(got, stored, rtol=1e-6, atol=1e-6 * (1 + np.max(np.abs(stored)))):
            raise ValueError(
                "the pvi group's q does not reproduce its stored log_q at the posterior draws under this model: the "
                "model's unconstrained parameterization differs from the one pl.pvi used (or the draws were "
                "changed). Pass the same model to pl.loo, or log_q= explicitly."
            )
    return log_q


def _gaussian_of(g):
    """The :class:`~ppl_loo.numerics.gaussian.SubspaceGaussian` / ``MeanField`` a group stores."""
    if "sigma" in g and "mu" in g:
        return MeanField(jnp.asarray(g["mu"].values, dtype=jnp.float64),
                         jnp.asarray(g["sigma"].values, dtype=jnp.float64))
    return SubspaceGaussian(*(jnp.asarray(np.asarray(g[k].values, dtype=np.float64)) for k in ("q_mean", "q_basis",
                                                                                               "q_chol", "q_c")))


def stored_gaussian(data, theta=None):
    """``(group name, Gaussian q)`` of a ``pl.laplace`` / ``pl.qnvb`` DataTree whose draws are its
    ``posterior`` group, or ``None``.

    With ``theta`` (the posterior draws in the model's unconstrained space) ``q`` is checked against
    the ``log_q`` stored per draw, as :func:`pvi_log_q` does: a mismatch means the model given to
    ``pl.loo`` parameterizes the space differently from the one the fit used, or the draws changed.
    """
    if not isinstance(data, xr.DataTree):
        return None
    for name in APPROXIMATION_GROUPS:
        if name not in data.children:
            continue
        g = data[name].to_dataset()
        if g.attrs.get("posterior_group") != "posterior" or "log_q" not in g:
            continue
        q = _gaussian_of(g)
        if theta is not None:
            _check_log_q(name, q, theta, np.asarray(g["log_q"].values).reshape(-1))
        return name, q
    return None


def _check_log_q(name, q, theta, stored):
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape[0] != stored.shape[0]:
        raise ValueError(f"the posterior has {theta.shape[0]} draws but the {name} group's log_q has "
                         f"{stored.shape[0]}: the draws are not the ones pl.{name} wrote. Pass log_q= explicitly.")
    if theta.shape[1] != q.mean.shape[0]:
        raise ValueError(f"the model has {theta.shape[1]} unconstrained parameters but the {name} group's q has "
                         f"{q.mean.shape[0]}: pass the model pl.{name} was fitted with.")
    got = np.asarray(jax.jit(jax.vmap(lambda th: gaussian_log_q(q, th)))(jnp.asarray(theta)))
    if not np.allclose(got, stored, rtol=1e-6, atol=1e-6 * (1 + np.max(np.abs(stored)))):
        raise ValueError(
            f"the {name} group's q does not reproduce its stored log_q at the posterior draws under this model: the "
            f"model's unconstrained parameterization differs from the one pl.{name} used (or the draws were "
            "changed). Pass the same model to pl.loo, or log_q= explicitly.")


def stored_log_q(data):
    """``(method, log_q per draw)`` of a DataTree whose ``variational`` group stores the density of the
    approximation its ``posterior`` draws come from (CmdStan ``method=variational``, read by
    :func:`ppl_loo.from_cmdstan`), or ``None``."""
    if not isinstance(data, xr.DataTree) or "variational" not in data.children:
        return None
    g = data["variational"].to_dataset()
    if g.attrs.get("posterior_group") != "posterior" or "log_q" not in g:
        return None
    return g.attrs.get("method", "variational"), np.asarray(g["log_q"].values, dtype=np.float64)
