"""What the PyMC adapter reads from a ``pymc.Model`` when it is built: its free variables and their value
variables, the observed variable, the forward transforms, the observation layout and the note on a
detected GLM (:class:`~ppl_loo.adapters.pymc.adapter.PyMCModel`)."""

from __future__ import annotations

from collections.abc import Callable

from ppl_loo.adapters.pymc.graph import jaxify

__all__ = ["free_variables", "observed_variable_name", "constrained_placeholders", "forward_transforms",
           "bernoulli_var_target", "observation_layout", "glm_note"]


def free_variables(model) -> tuple[list, list]:
    """The free random variables of ``model`` and their value variables, in ``model.value_vars`` order.

    Raises
    ------
    ValueError
        A free random variable is discrete, or there is none.
    """
    from pytensor.tensor.type import discrete_dtypes

    discrete = [rv.name for rv in model.free_RVs if rv.type.dtype in discrete_dtypes]
    if discrete:
        raise ValueError(
            f"free random variable(s) {discrete} are discrete; ppl_loo needs continuous "
            "parameters (gradients in the unconstrained space). Marginalize them out (for "
            "example with pymc_extras.marginalize) or make them observed."
        )
    free_rvs = list(model.free_RVs)
    value_vars = [model.rvs_to_values[rv] for rv in free_rvs]
    if [v.name for v in value_vars] != [v.name for v in model.value_vars]:
        # model.value_vars follows free_RVs; keep its order to be safe
        order = {v.name: k for k, v in enumerate(model.value_vars)}
        pairs = sorted(zip(free_rvs, value_vars), key=lambda p: order[p[1].name])
        free_rvs = [p[0] for p in pairs]
        value_vars = [p[1] for p in pairs]
    if not free_rvs:
        raise ValueError("the model has no free random variables; there is nothing to adapt.")
    return free_rvs, value_vars


def observed_variable_name(model, var_name: str | None) -> str:
    """``var_name`` checked against the observed variables of ``model``; the only one when None.

    Raises
    ------
    ValueError
        The model has no observed variable, several and ``var_name`` is None, or none named
        ``var_name``.
    """
    obs_names = [rv.name for rv in model.observed_RVs]
    if not obs_names:
        raise ValueError("the model has no observed variable, so there is no likelihood for LOO.")
    if var_name is None:
        if len(obs_names) > 1:
            raise ValueError(
                f"the model has several observed variables {obs_names}; pass var_name= to "
                "choose the one whose pointwise log-likelihood LOO uses."
            )
        var_name = obs_names[0]
    if var_name not in obs_names:
        raise ValueError(
            f"var_name={var_name!r} is not an observed variable of the model; observed "
            f"variables: {obs_names}."
        )
    return str(var_name)


def constrained_placeholders(free_rvs, shapes, suffix: str) -> dict:
    """A PyTensor tensor ``{name}{suffix}`` of the constrained shape of each free variable, by variable."""
    import pytensor.tensor as pt

    return {
        rv: pt.tensor(name=f"{rv.name}{suffix}", dtype=rv.type.dtype, shape=shapes[rv.name])
        for rv in free_rvs
    }


def forward_transforms(model, free_rvs, shapes) -> Callable:
    """JAX function ``(*constrained values) -> value-variable values`` (the forward value transforms).

    A transform whose parameters depend on other free variables (for example an interval bounded
    by another parameter) uses their given constrained values.
    """
    from pytensor.graph.replace import graph_replace

    holders = constrained_placeholders(free_rvs, shapes, "_constrained")
    forwards = []
    for rv in free_rvs:
        tr = model.rvs_to_transforms.get(rv)
        if tr is None:
            forwards.append(holders[rv])
        else:
            out = tr.forward(holders[rv], *rv.owner.inputs)
            forwards.append(graph_replace(out, dict(holders), strict=False))
    return jaxify([holders[rv] for rv in free_rvs], forwards)


def bernoulli_var_target(model, obs_rv, value_vars) -> Callable | None:
    """Variance-descent target of a Bernoulli observation, or None for other distributions.

    The complement probability ``f_i = p^(1-y) (1-p)^y`` (paper S.9), i.e. the likelihood of the
    flipped outcome, as a JAX function of the value variables (elementwise log).
    """
    if type(obs_rv.owner.op).__name__ != "BernoulliRV":
        return None
    from pymc.logprob.basic import logp as rv_logp

    obs_value = model.rvs_to_values[obs_rv]
    flipped = model.replace_rvs_by_values([rv_logp(obs_rv, 1 - obs_value)])[0]
    return jaxify(value_vars, [flipped])


def observation_layout(var_name, ll_shape, data_shape, dims, loo_log_density) -> tuple[bool, tuple, tuple]:
    """``(factorizes, obs_shape, obs_dims)`` of the observed variable.

    Parameters
    ----------
    var_name : str
        The observed variable (for messages and default dim names).
    ll_shape : tuple
        Shape of its elementwise log-likelihood.
    data_shape : tuple or None
        Shape of its data (None when unknown).
    dims : tuple
        Its dims in the model (may be empty).
    loo_log_density : callable or None
        The user's leave-one-out density.

    Raises
    ------
    ValueError
        The likelihood does not factorize and there is no ``loo_log_density``, or
        ``loo_log_density`` is not callable.
    """
    nonfactor = data_shape is not None and (
        (len(ll_shape) == 0 and len(data_shape) > 0) or ll_shape != data_shape[: len(ll_shape)]
    )
    if nonfactor:
        if loo_log_density is None:
            raise ValueError(
                f"the likelihood of observed variable {var_name!r} does not factorize into one "
                f"term per observation (elementwise logp has shape {ll_shape}, the data "
                f"{data_shape}), e.g. one multivariate distribution over all observations, so "
                "there is no pointwise log-likelihood to leave out. Exact LOO needs the "
                "leave-one-out density: write loo_log_density(values, i) -> log p(params) + "
                "log p(y_-i | params) (a JAX function of the constrained values, a dict by "
                "variable name) and call pl.loo(data, ppl_loo.models.PyMCModel(model, "
                "loo_log_density=loo_log_density))."
            )
        obs_shape = (int(data_shape[-1]),) if len(data_shape) else (1,)
        obs_dims = (dims[-1],) if dims else (f"{var_name}_dim_{max(len(data_shape) - 1, 0)}",)
        return False, obs_shape, obs_dims
    if not callable(loo_log_density) and loo_log_density is not None:
        raise ValueError("loo_log_density must be a callable (values, i) -> scalar.")
    dims = dims[: len(ll_shape)]
    obs_dims = dims if len(dims) == len(ll_shape) else tuple(
        f"{var_name}_dim_{k}" for k in range(len(ll_shape))
    )
    return loo_log_density is None, ll_shape, obs_dims


def glm_note(glm, dim: int) -> str:
    """What was detected: ``"Bernoulli-logit linear predictor in q of d parameters, quadratic prior ..."``."""
    return (
        f"Bernoulli-logit linear predictor in {glm.block.size} of {dim} parameters"
        + (", quadratic prior" if glm.quadratic else "")
        + (" with a constant" if glm.constant_hessian else "")
        + (" diagonal" if glm.hessian_diag is not None else "")
        + (" Hessian" if glm.constant_hessian else "")
    )
