"""Building a :class:`~ppl_loo.model.protocol.Model` from a backend adapter, and the small pieces
every backend's PVI terms share."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.jax_settings import uses_x64
from ppl_loo.model.protocol import GLMStructure, Layout, Model, Observations, Output, ReluStructure

__all__ = ["Compiled", "from_adapter", "pvi_model", "batch", "simulate_terms", "category_index", "coordinate_labels",
           "output_of"]


class Compiled:
    """The programs compiled for one model (``Model.compiled``): each built on its first use and reused after.

    Call it as ``compiled(name, key, build)``: the program ``build()`` kept under ``(name, key)``. A model's
    adapter keeps its own (:attr:`ppl_loo.adapters.jax.base.PosteriorModel.compiled_programs`), so that every
    :class:`Model` built from the adapter shares its programs and they are released with it; a PVI model has one
    of its own. (A module-level table keyed weakly on the adapter would not release them: the programs refer to
    the adapter's functions, so the table's values would keep its keys alive.)
    """

    __slots__ = ("_programs", "__weakref__")

    def __init__(self):
        self._programs = {}

    def __call__(self, name: str, key, build):
        """The program ``build()`` kept under ``(name, key)`` (``key`` hashable), built now if there is none."""
        table = self._programs.setdefault(name, {})
        if key not in table:
            table[key] = build()
        return table[key]

    def __len__(self):
        """How many programs are kept."""
        return sum(len(table) for table in self._programs.values())

    def __repr__(self):
        return f"Compiled({ {name: len(table) for name, table in self._programs.items()} })"


def _layout(adapter, labels) -> Layout:
    names = tuple(getattr(adapter, "param_names", None) or ())
    dims = dict(getattr(adapter, "param_dims", None) or {})
    return Layout(int(adapter.dim), names, dims, tuple(labels or ()), adapter.constrain, adapter.unconstrain)


def from_adapter(adapter, *, kind: str, labels=()) -> Model:
    """The :class:`Model` of a :class:`~ppl_loo.adapters.jax.base.PosteriorModel` adapter (the LOO fields).

    The adapter's bound methods become the model's functions; its structure, adapted block, metadata and
    after-LOO functions (predictive mean, CDF, simulator) are copied. ``kind`` names the backend in messages
    (``"JAX"``, ``"PyMC"``, ``"Stan"``). The model's ``compiled`` programs are the adapter's
    (:attr:`~ppl_loo.adapters.jax.base.PosteriorModel.compiled_programs`), so that they serve every later call
    with the same adapter.
    """
    shape = tuple(adapter.obs_shape) if tuple(getattr(adapter, "obs_shape", ())) else (int(adapter.n_obs),)
    obs = Observations(str(adapter.var_name), tuple(adapter.obs_dims), shape, int(adapter.n_obs),
                       getattr(adapter, "observed", None), discrete=tuple(getattr(adapter, "discrete_data", ())),
                       entries=dict(getattr(adapter, "observation_entries", None) or {}))
    mean = getattr(adapter, "predicted_mean", None) or getattr(adapter, "predicted_probability", None)
    return Model(
        kind=kind, layout=_layout(adapter, labels), obs=obs, coords=dict(getattr(adapter, "coords", None) or {}),
        logp=adapter.logp, loglik=adapter.loglik, loglik_i=adapter.loglik_i, loo_logp=adapter.loo_logp,
        log_var_target=adapter.log_var_target if adapter.has_var_target else None,
        log_density=adapter.log_density, log_density_and_grad=adapter.log_density_and_grad,
        log_lik=adapter.log_lik, line_cache=adapter.line_cache, line_eval=adapter.line_eval,
        refit_draws=adapter.refit_draws, mixture_draws=getattr(adapter, "mixture_draws", None),
        structure=adapter.structure,
        output=output_of(adapter.structure) or getattr(adapter, "output", None),
        adapt_index=None if adapter.adapt_index is None else np.asarray(adapter.adapt_index),
        factorizes=bool(adapter.factorizes), is_jax=bool(adapter.is_jax), has_var_target=bool(adapter.has_var_target),
        notes={}, predictive_mean=mean, predicted_probability=_predicted_probability(adapter),
        pit_cdf=getattr(adapter, "pit_cdf", None), discrete_outcome=getattr(adapter, "discrete_outcome", None),
        simulate=getattr(adapter, "replicated_data", None) if adapter.factorizes else None,
        batched_refit_density=getattr(adapter, "batched_refit_density", None),
        take_callback_error=adapter.take_callback_error,
        cancel=adapter.request_cancel if adapter.cancellable else None,
        compiled=adapter.compiled_programs,
    )


def _predicted_probability(adapter):
    """The adapter's ``predicted_probability``, or None where it has none (its observed variable is not Bernoulli)."""
    fn = getattr(adapter, "predicted_probability", None)
    return fn if fn is not None and getattr(adapter, "has_predicted_probability", True) else None


def _design(X, X_train, what):
    """New inputs as rows of the training design: the same columns, or all but its constant column
    (inserted where the training design has it)."""
    X = np.asarray(X, dtype=np.float64)
    q = X_train.shape[1]
    if X.ndim == 2 and X.shape[1] == q:
        return X
    const = [j for j in range(q) if np.all(X_train[:, j] == 1.0)]
    if X.ndim == 2 and X.shape[1] == q - 1 and const:
        return np.insert(X, const[0], 1.0, axis=1)
    raise ValueError(f"X has shape {X.shape}; the {what} takes rows of {q} inputs"
                     + (f" (or {q - 1}, without its constant column)" if const else "") + ".")


def output_of(structure) -> Output | None:
    """The :class:`Output` of a declared structure (Bernoulli-logit GLM or one-hidden-layer ReLU net), or None."""
    if isinstance(structure, GLMStructure) and structure.family == "bernoulli_logit":
        X0, idx = np.asarray(structure.X, dtype=np.float64), np.asarray(structure.beta_index)
        off = 0.0 if structure.offset is None else np.asarray(structure.offset, dtype=np.float64)

        def glm(theta, X=None):
            if X is None:
                return (jnp.asarray(X0) @ theta[idx] + off)[:, None]
            return (jnp.asarray(_design(X, X0, "linear predictor")) @ theta[idx])[:, None]

        return Output(glm, "bernoulli")
    if isinstance(structure, ReluStructure) and structure.family == "bernoulli_logit":
        X0, h = np.asarray(structure.X, dtype=np.float64), structure.hidden
        w1, w2, b2 = (np.asarray(structure.w1_index), np.asarray(structure.w2_index), int(structure.b2_index))

        def net(theta, X=None):
            Xa = jnp.asarray(X0 if X is None else _design(X, X0, "network"))
            W1 = theta[w1].reshape(h, X0.shape[1])
            return (jax.nn.relu(Xa @ W1.T) @ theta[w2] + theta[b2])[:, None]

        return Output(net, "bernoulli")
    return None


def pvi_model(*, kind, dim, n_obs, labels, terms, constrain, unconstrain, param_names, param_dims, coords,
              var_name, obs_dims, obs_shape, y=None, observed=None, categories=None, eval_loglik=None, eval_probs=None,
              eval_predict=None, notes=None, log_lik_bound=None, loo_adapter=None) -> Model:
    """A :class:`Model` with the PVI fields (``terms``, ``eval_*``) of a backend (the ``eval_*``
    functions hand arrays to the caller, so they run in float64 whoever calls them).

    ``y``: the observed outcomes as the PVI terms use them (``terms.y``); ``observed``: the same as the
    backend holds them (their own dtype and shape, ``Observations.observed``; default ``y``).
    ``loo_adapter``: the backend's LOO adapter where there is one (the LOO fields come from it, so
    that ``pl.loo`` can use the same model); models without a likelihood (``SimulatorModel``) or
    given as a bare Stan program have none.
    """
    notes = dict(notes or {})
    layout = Layout(int(dim), tuple(param_names), dict(param_dims), tuple(labels), constrain, unconstrain)
    obs = Observations(str(var_name), tuple(obs_dims), tuple(obs_shape), int(n_obs),
                       y if observed is None else observed, None if categories is None else np.asarray(categories),
                       notes.get("observed"))
    evals = {name: None if fn is None else uses_x64(fn) for name, fn in
             (("eval_loglik", eval_loglik), ("eval_probs", eval_probs), ("eval_predict", eval_predict))}
    # programs of its own: the PVI terms (simulator, probs, observed) are this call's
    pvi = dict(kind=kind, layout=layout, obs=obs, coords=dict(coords or {}), terms=terms, notes=notes,
               log_lik_bound=None if log_lik_bound is None else np.asarray(log_lik_bound, dtype=np.float64),
               compiled=Compiled(), **evals)
    if loo_adapter is not None:
        loo = from_adapter(loo_adapter, kind=kind, labels=labels)
        return loo._replace(**{**pvi, "obs": obs._replace(discrete=loo.obs.discrete, entries=loo.obs.entries)})
    return Model(**pvi, logp=None if terms.logp is None else _first(terms.logp))


def _first(batched):
    """A per-draw function from a batched one (used only for ``Model.logp`` of PVI-only models)."""

    def one(theta):
        return batched(theta[None, :])[0]

    return one


def batch(fn):
    """``f(theta (d,)) -> x`` to ``(M, d) -> (M, ...)``."""
    return jax.vmap(fn)


def simulate_terms(sim_one, vector):
    """``(theta (M, d), key) -> (M, n[, k])`` from a per-draw simulator ``sim_one(theta, key)``."""

    def simulate(theta, key):
        keys = jax.random.split(key, theta.shape[0])
        out = jax.vmap(sim_one)(theta, keys)
        return out.reshape((theta.shape[0], -1, out.shape[-1]) if vector else (theta.shape[0], -1))

    return simulate


def category_index(y, categories, what):
    """Index of every observed value in the sorted ``categories``; raises on a value outside them."""
    cats = np.asarray(categories)
    y = np.asarray(y).reshape(-1)
    idx = np.searchsorted(cats, y)
    idx = np.clip(idx, 0, len(cats) - 1)
    bad = cats[idx] != y
    if bad.any():
        raise ValueError(
            f"{what}: {int(bad.sum())} observation(s) take values outside the categories {cats.tolist()} "
            f"(for example {y[bad][:3].tolist()}); pass categories= with every possible outcome."
        )
    return idx


def coordinate_labels(blocks) -> list:
    """One label per coordinate of the unconstrained vector ``theta``.

    Parameters
    ----------
    blocks : iterable of (str, tuple)
        ``(label, unconstrained shape)`` of each block of ``theta``, in order.

    Returns
    -------
    list of str
        The label of a scalar block (``"sigma_log__"``), else one ``"beta[0,1]"`` per element in
        C order.
    """
    out = []
    for label, shape in blocks:
        if shape == ():
            out.append(label)
        else:
            out.extend(f"{label}[{','.join(map(str, idx))}]" for idx in np.ndindex(*shape))
    return out
