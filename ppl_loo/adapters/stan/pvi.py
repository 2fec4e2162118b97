"""PVI quantities of a compiled Stan program, through the in-process bridge.

A Stan program gives one number, the log density of all its data. PVI needs more:

- ``log p(y_i | theta)`` for every observation *with its gradient* (the log score and its
  reparameterization gradient). The same compiled program is instantiated on the data of one
  observation (``N = 1``) and on no data (``N = 0``): ``log p(y_i|theta) = lp_{y_i}(theta) - lp_0(theta)``
  and the prior (with the Jacobian) is ``lp_0``. Each term costs one observation, so a step costs
  ``n`` batched bridge calls of ``O(1)`` work per draw (data deletion would cost ``O(n^2)``). The
  decomposition is checked once against the full program (``sum_i + prior == full``); programs
  whose transformed data use all observations, or whose parameter dimension depends on ``N``,
  are refused with the reason.
- Category probabilities (quadratic score): the single-observation programs with the outcome
  replaced by every category (``observed=`` names the outcome's data entry).
- A simulator (CRPS): a generated quantity with one ``*_rng`` draw per observation
  (``simulator="y_rep"``), evaluated by ``param_constrain`` with a seed per step. Draw ``s`` of a
  batch uses the RNG stream ``(seed, s + 1)``, so with the seed held fixed the draw is a
  deterministic function of ``theta`` (common random numbers); its derivative is taken by central
  finite differences in the same stream. For continuous ``*_rng`` by transformation (``normal_rng``:
  ``mu + sigma z``) this is the pathwise derivative of Table 1; discrete draws are refused.

Every quantity enters JAX through ``jax.pure_callback`` with a ``jax.custom_vjp`` whose residual is
the Jacobian computed in the same host call.
"""

from __future__ import annotations

import json
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.adapters.stan import data as stan_data
from ppl_loo.adapters.stan.posterior import StanPosterior
from ppl_loo.model.build import category_index, pvi_model
from ppl_loo.numerics.vi.objective import Terms
from ppl_loo.stan_bridge.model import StanModel

__all__ = ["is_stan_model", "stan_pvi_model"]


def is_stan_model(model) -> bool:
    """A ``pl.StanModel`` (the bridge) or a ``StanPosterior``."""
    return isinstance(model, (StanModel, StanPosterior))


def _parts(model):
    """``(bridge, data dict, n_obs key, obs_keys)`` of a StanModel or StanPosterior."""
    bridge = getattr(model, "bridge", model)
    data = getattr(bridge, "data", None)
    if not isinstance(data, dict):
        data = json.loads(bridge.data_json)
    opts = getattr(bridge, "loo_options", None) or {}
    n_key = getattr(model, "n_obs_key", None) or opts.get("n_obs")
    obs_keys = getattr(model, "obs_keys", None) or opts.get("obs_keys")
    if n_key is None:
        n_key = stan_data.detect_n_obs(data, prefer="N", whole_floats=True)
    if obs_keys is None:
        obs_keys = stan_data.observation_keys(data, n_key, int(np.asarray(data[n_key])))
    return bridge, data, n_key, tuple(obs_keys)


def _declared_int(code, name) -> bool:
    """Whether the data block declares ``name`` with an integer type (``int`` / ``array[...] int``)."""
    m = re.search(r"\bdata\s*\{(.*?)\}", re.sub(r"//[^\n]*|/\*.*?\*/", "", code, flags=re.DOTALL), flags=re.DOTALL)
    if not m:
        return False
    for stmt in m.group(1).split(";"):
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", stmt)
        if words and words[-1] == name:
            return "int" in words[:-1]
    return False


def _host_density(model, x, grad):
    """Log density ``(M,)`` of ``model`` at the draws ``x`` (with ``grad``: and its gradient ``(M, d)``)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if grad:
        lp, g = model.log_density_gradient(x)
        return np.asarray(lp, dtype=np.float64), np.asarray(g, dtype=np.float64)
    return np.asarray(model.log_density(x), dtype=np.float64)


def _host_value_and_grad(model, x):
    """``(lp (M,), grad (M, d))`` of one program at the draws ``x``."""
    return _host_density(model, x, True)


def _vjp_bwd(jac, ct):
    """Cotangent ``(M, d)`` of ``theta`` from the Jacobian residual and the output cotangent."""
    axes = tuple(range(1, ct.ndim))
    return (jnp.einsum("m...,m...d->md", ct, jac) if axes else ct[:, None] * jac,)


def _vjp_callback(host_fn, out_shape_fn, *args):
    """A JAX function ``theta (M, d) -> value`` of a host function, with a custom VJP.

    Parameters
    ----------
    host_fn : callable
        ``host_fn(x, *args) -> (value, jacobian)`` on NumPy arrays, ``jacobian`` of shape
        ``(*value.shape, d)``.
    out_shape_fn : callable
        ``M -> value.shape``.
    *args
        Further (JAX) arguments of ``host_fn``, not differentiated (a seed).

    Returns
    -------
    callable
        ``theta -> value``, differentiable in reverse mode through ``jacobian``.
    """

    def both(theta):
        out = out_shape_fn(theta.shape[0])
        shapes = (jax.ShapeDtypeStruct(out, jnp.float64), jax.ShapeDtypeStruct(out + (theta.shape[-1],), jnp.float64))
        return jax.pure_callback(host_fn, shapes, theta, *args, vmap_method="sequential")

    @jax.custom_vjp
    def f(theta):
        return both(theta)[0]

    f.defvjp(both, _vjp_bwd)
    return f


# ---------------------------------------------------------------------- single-observation programs
class _Programs:
    """The program on the data of one observation at a time, as PVI needs it.

    Parameters
    ----------
    bridge : StanModel
        The program on the full data.
    data : dict
        Its data.
    n_key : str
        The entry holding the number of observations.
    obs_keys : tuple of str
        The entries indexed by observation.
    """

    def __init__(self, bridge, data, n_key, obs_keys):
        self.bridge, self.data, self.n_key, self.obs_keys = bridge, data, n_key, obs_keys
        self.n = int(np.asarray(data[n_key]))
        self.dim = bridge.dim
        self.seed = int(getattr(bridge, "random_seed", 1234))
        self.prior = self.instance([], "no data (N = 0)")
        self.single = [self.instance([i], f"observation {i} alone (N = 1)") for i in range(self.n)]

    def instance(self, idx, what, replace=None):
        """The program on the observations ``idx`` (with ``replace`` entries), of the full dimension."""
        dat = stan_data.observation_data(self.data, self.n_key, self.obs_keys, idx, replace)
        try:
            m = type(self.bridge)(self.bridge.code, dat, random_seed=self.seed, n_threads=1)
        except Exception as err:
            raise ValueError(f"PVI needs the program on {what}, and Stan refused: {err}. Declare the number "
                             f"of observations {self.n_key!r} with <lower=0>.") from err
        if m.dim != self.dim:
            raise ValueError(
                f"the program has {m.dim} parameters on {what} but {self.dim} on the full data: its parameter "
                "dimension depends on the number of observations, so the predictive of one observation is not "
                "a function of one parameter vector. Write the model as a pl.JaxModel or in PyMC for PVI."
            )
        return m

    def host_loglik(self, x):
        """``(log p(y_i | x) (M, n), its gradient (M, n, d))``: one batched call per observation."""
        x = np.asarray(x, dtype=np.float64)
        lp0, g0 = _host_value_and_grad(self.prior, x)
        ll = np.empty((x.shape[0], self.n))
        jac = np.empty((x.shape[0], self.n, self.dim))
        for i, m in enumerate(self.single):  # one batched call per observation (no loop over draws)
            lp, g = _host_value_and_grad(m, x)
            ll[:, i] = lp - lp0
            jac[:, i] = g - g0
        return ll, jac

    def check_decomposition(self):
        """Raise unless the sum of the observation terms plus the prior reproduces the full program."""
        x = np.random.default_rng(0).normal(size=(3, self.dim))
        ll, _ = self.host_loglik(x)
        lp_full, _ = _host_value_and_grad(self.bridge, x)
        lp0, _ = _host_value_and_grad(self.prior, x)
        gap = np.max(np.abs(ll.sum(axis=1) + lp0 - lp_full))
        if not np.isfinite(gap) or gap > 1e-6 * (1.0 + np.max(np.abs(lp_full))):
            raise ValueError(
                f"the program's log density is not the sum of one term per observation plus a prior (off by "
                f"{gap:.3g} at test points): its transformed data may use all observations, the likelihood may "
                f"not factorize, or obs_keys {list(self.obs_keys)} may miss an entry indexed by observation. PVI "
                "scores each observation's predictive, which needs that decomposition."
            )


# ---------------------------------------------------------------------- outcomes, categories
def _outcome(data, observed, obs_keys, notes):
    """The observed outcomes ``(n,)`` (``None`` without ``observed``); notes what needs them."""
    if observed is None:
        notes["crps"] = notes["quadratic"] = ("pass observed= (the data entry holding the outcome) for this score "
                                              "on a Stan model")
        return None
    notes["observed"] = str(observed)
    if observed not in obs_keys:
        raise ValueError(f"observed={observed!r} is not a data entry indexed by observation ({list(obs_keys)}).")
    y = np.asarray(data[observed], dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"observed={observed!r} has shape {y.shape}; PVI on Stan models scores scalar outcomes.")
    return y


def _categories(code, observed, y, categories, notes):
    """The sorted categories of the outcome (``None`` where the quadratic score does not apply)."""
    declared_int = _declared_int(code, observed)
    if categories is not None:
        return np.unique(np.asarray(categories))
    if declared_int and set(np.unique(y)) <= {0.0, 1.0}:
        return np.array([0, 1])
    if declared_int:
        notes["quadratic"] = (f"pass categories= (every possible value of the integer outcome {observed!r}, "
                              "sorted) for the quadratic score")
    else:
        notes["quadratic"] = (f"the outcome {observed!r} is not declared int (continuous); the quadratic score is "
                              "for categorical outcomes")
    return None


def _host_probs(programs, per_cat, x):
    """``(p (M, n, C), dp/dx (M, n, C, d))``: the probability of every category of every observation."""
    x = np.asarray(x, dtype=np.float64)
    lp0, g0 = _host_value_and_grad(programs.prior, x)
    p = np.empty((x.shape[0], programs.n, len(per_cat)))
    jac = np.empty((x.shape[0], programs.n, len(per_cat), programs.dim))
    for j, models in enumerate(per_cat):
        for i, m in enumerate(models):
            lp, g = _host_value_and_grad(m, x)
            p[:, i, j] = np.exp(lp - lp0)
            jac[:, i, j] = p[:, i, j, None] * (g - g0)
    return p, jac


def _category_probs(programs, observed, cats):
    """The JAX function of the category probabilities ``(M, n, C)``, checked to sum to one."""
    as_int = np.all(cats == np.round(cats))
    per_cat = [[programs.instance([i], f"observation {i} with outcome {c}",
                                  {observed: np.asarray([int(c) if as_int else float(c)])})
                for i in range(programs.n)] for c in cats]
    host = partial(_host_probs, programs, per_cat)
    total = host(np.random.default_rng(1).normal(size=(2, programs.dim)))[0].sum(axis=-1)
    if not np.allclose(total, 1.0, atol=1e-6):
        raise ValueError(f"the categories {cats.tolist()} do not cover the outcomes of {observed!r}: their "
                         f"probabilities sum to {total.min():.4g}..{total.max():.4g}, not 1. Pass every possible "
                         "outcome as categories=.")
    n, n_cats = programs.n, len(cats)
    return _vjp_callback(host, lambda M: (M, n, n_cats))


# ---------------------------------------------------------------------- simulator (CRPS)
def _simulator_columns(bridge, simulator, n, n_key):
    """Columns of ``param_constrain(include_tp, include_gq)`` holding ``simulator[1..n]``."""
    cols = stan_data.flat_columns(bridge, simulator)
    want = [f"{simulator}.{k + 1}" for k in range(n)]
    if not cols or any(w not in cols for w in want) or len(cols) != n:
        raise ValueError(
            f"simulator={simulator!r} must name a generated quantity with one entry per observation ({n}); "
            f"add for example `array[{n_key}] real {simulator} = normal_rng(mu, sigma);` to the program's "
            "generated quantities."
        )
    return np.array([cols[w] for w in want])


def _draw(bridge, idx, x, s):
    """The simulator's draws ``(M, n)`` at ``x`` in the RNG streams of seed ``s``."""
    out = bridge.param_constrain(np.ascontiguousarray(x, dtype=np.float64), include_tp=True, include_gq=True,
                                 random_seed=int(np.asarray(s)))
    return np.asarray(out, dtype=np.float64)[:, idx]


def _host_sim(bridge, idx, x, s):
    """The draws and their Jacobian ``(M, n, d)`` by central differences in the same RNG streams."""
    x = np.asarray(x, dtype=np.float64)
    s = int(np.asarray(s))
    y0 = _draw(bridge, idx, x, s)
    d = x.shape[-1]
    jac = np.empty((x.shape[0], len(idx), d))
    h = 1e-6 * (1.0 + np.abs(x))
    for k in range(d):  # central differences in the same RNG streams (batched over draws)
        e = np.zeros(d)
        e[k] = 1.0
        hk = h[:, k:k + 1]
        jac[:, :, k] = (_draw(bridge, idx, x + hk * e, s) - _draw(bridge, idx, x - hk * e, s)) / (2.0 * hk)
    return y0, jac


def _seed_of(key):
    """The bridge's RNG seed drawn from a JAX key."""
    return jax.random.randint(key, (), 0, 2**31 - 1)


def _simulate(bridge, idx, theta, key):
    """Simulator draws ``(M, n)`` at ``theta``, differentiable (pathwise, common random numbers)."""
    n = len(idx)
    return _vjp_callback(partial(_host_sim, bridge, idx), lambda M: (M, n), _seed_of(key))(theta)


def _predict(bridge, idx, theta, key):
    """Simulator draws ``(M, n)`` at ``theta`` (not differentiated)."""
    return jax.pure_callback(partial(_draw, bridge, idx), jax.ShapeDtypeStruct((theta.shape[0], len(idx)), jnp.float64),
                             theta, _seed_of(key), vmap_method="sequential")


def _simulator(bridge, simulator, n, n_key, notes):
    """``(simulate, predict)`` of the generated quantity ``simulator``; ``simulate`` is None when discrete."""
    idx = _simulator_columns(bridge, simulator, n, n_key)
    test = _draw(bridge, idx, np.zeros((4, bridge.dim)), 1)
    if np.all(test == np.round(test)):
        notes["crps"] = (f"the generated quantity {simulator!r} takes integer values (a discrete *_rng), which is "
                         "not pathwise differentiable; the CRPS gradient does not apply. Use score='log'")
        return None, partial(_predict, bridge, idx)
    return partial(_simulate, bridge, idx), partial(_predict, bridge, idx)


# ---------------------------------------------------------------------- the model
def _unconstrain(model, bridge, posterior):
    """Unconstrained draws from a posterior group with Stan's variable names."""
    if hasattr(model, "unconstrain"):
        return model.unconstrain(posterior)
    return stan_data.unconstrain_draws(bridge, posterior)


def _layout_fields(model, bridge, n):
    """The keywords of :func:`~ppl_loo.model.build.pvi_model` that describe parameters and observations."""
    dims = bridge.get_dims(include_tp=True, include_gq=False)
    options = getattr(bridge, "loo_options", None) or {}
    var_name = getattr(model, "var_name", None) or options.get("log_likelihood") or "log_lik"
    return dict(
        dim=bridge.dim, n_obs=n, labels=list(bridge.unconstrained_param_names()),
        constrain=partial(stan_data.constrain_draws, bridge), unconstrain=partial(_unconstrain, model, bridge),
        param_names=tuple(dims), param_dims=stan_data.dim_names(dims), coords={}, var_name=str(var_name),
        obs_dims=(f"{var_name}_dim_0",), obs_shape=(n,),
    )


def stan_pvi_model(model, *, simulator=None, observed=None, categories=None):
    """The :class:`~ppl_loo.model.Model` of a ``pl.StanModel`` or ``StanPosterior`` with its PVI terms.

    Parameters
    ----------
    model : StanModel or StanPosterior
        The program with its data.
    simulator : str, optional
        Generated quantity with one ``*_rng`` draw per observation (CRPS).
    observed : str, optional
        Data entry holding the outcome (CRPS, quadratic score).
    categories : array_like, optional
        Every possible value of an integer outcome (quadratic score).

    Returns
    -------
    Model
        With ``terms``, ``eval_*`` and ``notes`` on the scores that do not apply.
    """
    bridge, data, n_key, obs_keys = _parts(model)
    programs = _Programs(bridge, data, n_key, obs_keys)
    n = programs.n
    notes = {}
    loglik = _vjp_callback(programs.host_loglik, lambda M: (M, n))
    logp = _vjp_callback(partial(_host_value_and_grad, bridge), lambda M: (M,))
    log_prior = _vjp_callback(partial(_host_value_and_grad, programs.prior), lambda M: (M,))
    programs.check_decomposition()

    y = _outcome(data, observed, obs_keys, notes)
    cats = probs = y_index = None
    if y is not None:
        cats = _categories(bridge.code, observed, y, categories, notes)
    if cats is not None:
        y_index = category_index(y, cats, f"data[{observed!r}]")
        probs = _category_probs(programs, observed, cats)
    sim = predict = None
    if simulator is not None and y is not None:
        sim, predict = _simulator(bridge, simulator, n, n_key, notes)
    elif simulator is None:
        notes.setdefault("crps", "pass simulator='y_rep', the generated quantity with one *_rng draw per observation")

    terms = Terms(n, loglik=loglik, logp=logp, log_prior=log_prior, probs=probs, simulate=sim,
                  y=None if y is None else jnp.asarray(y), y_index=None if y_index is None else jnp.asarray(y_index))
    return pvi_model(
        kind="Stan", loo_adapter=model if getattr(model, "is_jax", False) else None, terms=terms,
        y=y, categories=cats, eval_loglik=jax.jit(loglik), eval_probs=None if probs is None else jax.jit(probs),
        eval_predict=predict, notes=notes, **_layout_fields(model, bridge, n),
    )
