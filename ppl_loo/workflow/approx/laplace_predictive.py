"""``ppl_loo.laplace_predictive``: the linearized predictive of a ``pl.laplace`` fit at new inputs.

Faller & Martin eq. 10-12 and 17-19: the outputs are linearized at the mode,
``f(X) ~ f_hat(X) + J_X (theta - theta_hat)``, so their epistemic covariance is
``Sigma_{P,X} = J_X P M^-1 P^T J_X^T`` (the full Laplace: ``P = I``). Regression: Gaussian with that
variance plus the noise; classification: the probit approximation (per logit). The covariance on
the complement of the subspace, which the stored proposal ``q`` adds for importance sampling, is
not part of the paper's predictive and is left out here (notes, A18: the validated path).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr

from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import uses_x64
from ppl_loo.numerics.laplace.predictive import linearized_predictive, predictive_variance

__all__ = ["laplace_predictive"]


@uses_x64
def laplace_predictive(data, model, X_new, *, var_name=None):
    """The linearized Laplace predictive at new inputs.

    Parameters
    ----------
    data : xarray.DataTree
        Returned by :func:`ppl_loo.laplace` (its ``laplace`` group: the mode ``map``, ``P``, ``M``).
    model :
        The model the fit was made with: its output function is evaluated (and differentiated) at
        ``X_new``; a DataTree holds no functions.
    X_new : array (m, p)
        New inputs, as the model's own inputs (without a constant column the model adds itself).
    var_name : str, optional
        The observed variable (models with several).

    Returns
    -------
    xarray.Dataset
        Over ``(new_obs,)``: ``f`` (the output at the mode), ``var_f`` (its epistemic variance, the
        diagonal of ``Sigma_{P,X}``) and, for a Bernoulli outcome, ``p`` (the probit predictive
        probability of ``y = 1``, eq. 12) and ``log_p1``/``log_p0``; for a Gaussian one, ``var_y``
        (``var_f + sigma^2``, eq. 10).
    """
    pm = as_model(model, var_name=var_name)
    if not hasattr(data, "children") or "laplace" not in data.children:
        raise ValueError("data has no laplace group: pass the DataTree returned by pl.laplace.")
    if pm.output is None:
        raise ValueError(f"laplace_predictive needs the model's output at new inputs (a GLM's linear predictor or "
                         f"a network's logits); this {pm.kind} model declares none.")
    g = data["laplace"].to_dataset()
    theta = jnp.asarray(np.asarray(g["map"].values, dtype=np.float64))
    if theta.shape[0] != pm.dim:
        raise ValueError(f"the laplace group has {theta.shape[0]} parameters but the model has {pm.dim}: pass the "
                         "model the fit was made with.")
    f = pm.output.fn(theta, X_new)  # (m, C)
    J = jax.jacrev(lambda th: pm.output.fn(th, X_new))(theta)  # (m, C, d)
    var = predictive_variance(J, jnp.asarray(g["P"].values), jnp.asarray(g["M"].values), diagonal=True)
    pred = linearized_predictive(f, var, pm.output.likelihood,
                                 None if pm.output.sigma is None else pm.output.sigma**2)
    out = {"f": (("new_obs",), np.asarray(f)[:, 0]), "var_f": (("new_obs",), np.asarray(var)[:, 0])}
    if pm.output.likelihood == "bernoulli":
        lp = np.asarray(pred.log_probs)
        out.update(p=(("new_obs",), np.exp(lp[:, 1])), log_p1=(("new_obs",), lp[:, 1]), log_p0=(("new_obs",), lp[:, 0]))
    elif pm.output.likelihood == "gaussian":
        out["var_y"] = (("new_obs",), np.asarray(pred.var).reshape(f.shape[0], -1)[:, 0])
    ds = xr.Dataset(out, coords={"new_obs": np.arange(f.shape[0])})
    ds.attrs.update(likelihood=pm.output.likelihood, subspace=g.attrs.get("subspace", ""), rank=int(g["P"].shape[1]))
    return ds
