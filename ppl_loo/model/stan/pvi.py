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

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics.pvi import Terms
from ppl_loo.model.build import category_index, pvi_model
from ppl_loo.model.stan.posterior import StanPosterior
from ppl_loo.stan.model import StanModel

__all__ = ["is_stan_model", "stan_pvi_model"]

_NAME_RE = re.compile(r"^([^.]+)((?:\.\d+)*)$")


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
        n_key = _detect_n_obs(data)
    n = int(np.asarray(data[n_key]))
    if obs_keys is None:
        obs_keys = [k for k, v in data.items() if k != n_key and np.ndim(v) >= 1 and np.shape(v)[0] == n]
    return bridge, data, n_key, tuple(obs_keys)


def _detect_n_obs(data) -> str:
    leading = {np.shape(v)[0] for v in data.values() if np.ndim(v) >= 1}
    cands = [k for k, v in data.items()
             if np.ndim(v) == 0 and not isinstance(v, bool) and float(np.asarray(v)).is_integer()
             and int(np.asarray(v)) >= 1 and int(np.asarray(v)) in leading]
    if len(cands) == 1:
        return cands[0]
    if "N" in cands:
        return "N"
    raise ValueError(
        f"cannot tell which data entry is the number of observations (candidates {cands}); build the model "
        "with pl.StanModel(code, data, n_obs='N')."
    )


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


def _subset(data, n_key, obs_keys, idx, replace=None):
    """The data restricted to observations ``idx`` (a list), optionally with ``replace`` entries."""
    out = dict(data)
    for k in obs_keys:
        arr = np.asarray(data[k])
        out[k] = arr[np.asarray(idx, dtype=int)]
    out[n_key] = len(idx)
    if replace:
        out.update(replace)
    return out


def _host_density(model, x, grad):
    x = np.ascontiguousarray(x, dtype=np.float64)
    if grad:
        lp, g = model.log_density_gradient(x)
        return np.asarray(lp, dtype=np.float64), np.asarray(g, dtype=np.float64)
    return np.asarray(model.log_density(x), dtype=np.float64)


def _vjp_callback(host_fn, out_shape_fn):
    """A JAX function ``theta (M, d) -> out`` from ``host_fn(x) -> (value, jacobian)`` with a
    custom VJP (``jacobian``: ``(*value.shape, d)``)."""

    def shapes(theta):
        out = out_shape_fn(theta.shape[0])
        return (jax.ShapeDtypeStruct(out, jnp.float64),
                jax.ShapeDtypeStruct(out + (theta.shape[-1],), jnp.float64))

    def both(theta):
        return jax.pure_callback(host_fn, shapes(theta), theta, vmap_method="sequential")

    @jax.custom_vjp
    def f(theta):
        return both(theta)[0]

    def fwd(theta):
        value, jac = both(theta)
        return value, jac

    def bwd(jac, ct):
        axes = tuple(range(1, ct.ndim))
        return (jnp.einsum("m...,m...d->md", ct, jac) if axes else ct[:, None] * jac,)

    f.defvjp(fwd, bwd)
    return f


def stan_pvi_model(model, *, simulator=None, observed=None, categories=None):
    """The :class:`~ppl_loo.model.Model` of a ``pl.StanModel`` or ``StanPosterior`` with its PVI terms."""
    bridge, data, n_key, obs_keys = _parts(model)
    n = int(np.asarray(data[n_key]))
    cls = type(bridge)
    seed = int(getattr(bridge, "seed", 1234))
    d = bridge.dim
    notes = {}

    def instance(dat, what):
        try:
            m = cls(bridge.code, dat, seed=seed, n_threads=1)
        except Exception as err:
            raise ValueError(f"PVI needs the program on {what}, and Stan refused: {err}. Declare the number "
                             f"of observations {n_key!r} with <lower=0>.") from err
        if m.dim != d:
            raise ValueError(
                f"the program has {m.dim} parameters on {what} but {d} on the full data: its parameter "
                "dimension depends on the number of observations, so the predictive of one observation is not "
                "a function of one parameter vector. Write the model as a pl.JaxModel or in PyMC for PVI."
            )
        return m

    prior_model = instance(_subset(data, n_key, obs_keys, []), "no data (N = 0)")
    single = [instance(_subset(data, n_key, obs_keys, [i]), f"observation {i} alone (N = 1)") for i in range(n)]

    def host_loglik(x):
        x = np.asarray(x, dtype=np.float64)
        lp0, g0 = _host_density(prior_model, x, True)
        ll = np.empty((x.shape[0], n))
        jac = np.empty((x.shape[0], n, d))
        for i, m in enumerate(single):  # one batched call per observation (no loop over draws)
            lp, g = _host_density(m, x, True)
            ll[:, i] = lp - lp0
            jac[:, i] = g - g0
        return ll, jac

    def host_joint(x):
        return _host_density(bridge, np.asarray(x, dtype=np.float64), True)

    def host_prior(x):
        return _host_density(prior_model, np.asarray(x, dtype=np.float64), True)

    loglik = _vjp_callback(host_loglik, lambda M: (M, n))
    logp = _vjp_callback(host_joint, lambda M: (M,))
    log_prior = _vjp_callback(host_prior, lambda M: (M,))

    # the decomposition must reproduce the full program
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, d))
    ll, _ = host_loglik(x)
    lp_full, _ = host_joint(x)
    lp0, _ = host_prior(x)
    gap = np.max(np.abs(ll.sum(axis=1) + lp0 - lp_full))
    if not np.isfinite(gap) or gap > 1e-6 * (1.0 + np.max(np.abs(lp_full))):
        raise ValueError(
            f"the program's log density is not the sum of one term per observation plus a prior (off by {gap:.3g} "
            f"at test points): its transformed data may use all observations, the likelihood may not factorize, or "
            f"obs_keys {list(obs_keys)} may miss an entry indexed by observation. PVI scores each observation's "
            "predictive, which needs that decomposition."
        )

    # ------------------------------------------------------------------ outcomes, categories
    y = None
    if observed is not None:
        notes["observed"] = str(observed)
        if observed not in obs_keys:
            raise ValueError(f"observed={observed!r} is not a data entry indexed by observation ({list(obs_keys)}).")
        y = np.asarray(data[observed], dtype=np.float64)
        if y.ndim != 1:
            raise ValueError(f"observed={observed!r} has shape {y.shape}; PVI on Stan models scores scalar outcomes.")
    else:
        notes["crps"] = notes["quadratic"] = ("pass observed= (the data entry holding the outcome) for this score "
                                              "on a Stan model")

    probs = probs_eval = None
    cats = None
    if y is not None:
        declared_int = _declared_int(bridge.code, observed)
        if categories is not None:
            cats = np.unique(np.asarray(categories))
        elif declared_int and set(np.unique(y)) <= {0.0, 1.0}:
            cats = np.array([0, 1])
        elif declared_int:
            notes["quadratic"] = (f"pass categories= (every possible value of the integer outcome {observed!r}, "
                                  "sorted) for the quadratic score")
        else:
            notes["quadratic"] = (f"the outcome {observed!r} is not declared int (continuous); the quadratic score is "
                                  "for categorical outcomes")
    if cats is not None:
        y_index = category_index(y, cats, f"data[{observed!r}]")
        as_int = np.all(cats == np.round(cats))
        per_cat = [[instance(_subset(data, n_key, obs_keys, [i],
                                     {observed: np.asarray([int(c) if as_int else float(c)])}),
                             f"observation {i} with outcome {c}") for i in range(n)] for c in cats]

        def host_probs(x):
            x = np.asarray(x, dtype=np.float64)
            lp0, g0 = _host_density(prior_model, x, True)
            p = np.empty((x.shape[0], n, len(cats)))
            jac = np.empty((x.shape[0], n, len(cats), d))
            for j, models in enumerate(per_cat):
                for i, m in enumerate(models):
                    lp, g = _host_density(m, x, True)
                    p[:, i, j] = np.exp(lp - lp0)
                    jac[:, i, j] = p[:, i, j, None] * (g - g0)
            return p, jac

        total = host_probs(np.random.default_rng(1).normal(size=(2, d)))[0].sum(axis=-1)
        if not np.allclose(total, 1.0, atol=1e-6):
            raise ValueError(f"the categories {cats.tolist()} do not cover the outcomes of {observed!r}: their "
                             f"probabilities sum to {total.min():.4g}..{total.max():.4g}, not 1. Pass every possible "
                             "outcome as categories=.")
        probs = _vjp_callback(host_probs, lambda M: (M, n, len(cats)))
        probs_eval = jax.jit(probs)
    else:
        y_index = None

    # ------------------------------------------------------------------ simulator (CRPS)
    sim = predict = None
    if simulator is not None and y is not None:
        names = bridge.constrained_param_names(include_tp=True, include_gq=True)
        cols = {}
        for j, name in enumerate(names):
            m = _NAME_RE.match(name)
            if m and m.group(1) == simulator:
                cols[name] = j
        want = [f"{simulator}.{k + 1}" for k in range(n)]
        if not cols or any(w not in cols for w in want) or len(cols) != n:
            raise ValueError(
                f"simulator={simulator!r} must name a generated quantity with one entry per observation ({n}); "
                f"add for example `array[{n_key}] real {simulator} = normal_rng(mu, sigma);` to the program's "
                "generated quantities."
            )
        idx = np.array([cols[w] for w in want])

        def draw(x, s):
            out = bridge.param_constrain(np.ascontiguousarray(x), include_tp=True, include_gq=True, seed=int(s))
            return np.asarray(out, dtype=np.float64)[:, idx]

        def host_sim(x, s):
            x = np.asarray(x, dtype=np.float64)
            s = int(np.asarray(s))
            y0 = draw(x, s)
            jac = np.empty((x.shape[0], n, d))
            h = 1e-6 * (1.0 + np.abs(x))
            for k in range(d):  # central differences in the same RNG streams (batched over draws)
                e = np.zeros(d)
                e[k] = 1.0
                hk = h[:, k:k + 1]
                jac[:, :, k] = (draw(x + hk * e, s) - draw(x - hk * e, s)) / (2.0 * hk)
            return y0, jac

        def seed_of(key):
            return jax.random.randint(key, (), 0, 2**31 - 1)

        def sim_fn(theta, key):
            s = seed_of(key)

            @jax.custom_vjp
            def f(th):
                return both(th)[0]

            def both(th):
                shapes = (jax.ShapeDtypeStruct((th.shape[0], n), jnp.float64),
                          jax.ShapeDtypeStruct((th.shape[0], n, d), jnp.float64))
                return jax.pure_callback(host_sim, shapes, th, s, vmap_method="sequential")

            def fwd(th):
                return both(th)

            def bwd(jac, ct):
                return (jnp.einsum("mn,mnd->md", ct, jac),)

            f.defvjp(fwd, bwd)
            return f(theta)

        def predict_host(x, s):
            return draw(np.asarray(x, dtype=np.float64), int(np.asarray(s)))

        def predict_fn(theta, key):
            return jax.pure_callback(predict_host, jax.ShapeDtypeStruct((theta.shape[0], n), jnp.float64),
                                     theta, seed_of(key), vmap_method="sequential")

        predict = predict_fn
        test = draw(np.zeros((4, d)), 1)
        if np.all(test == np.round(test)):
            notes["crps"] = (f"the generated quantity {simulator!r} takes integer values (a discrete *_rng), which is "
                             "not pathwise differentiable; the CRPS gradient does not apply. Use score='log'")
        else:
            sim = sim_fn
    elif simulator is None:
        notes.setdefault("crps", "pass simulator='y_rep', the generated quantity with one *_rng draw per observation")

    terms = Terms(n, loglik=loglik, logp=logp, log_prior=log_prior, probs=probs, simulate=sim,
                  y=None if y is None else jnp.asarray(y), y_index=None if y_index is None else jnp.asarray(y_index))

    dims = bridge.get_dims(include_tp=True, include_gq=False)
    param_dims = {k: tuple(f"{k}_dim_{j}" for j in range(len(s))) for k, s in dims.items()}

    def constrain(theta):
        vals = bridge.param_constrain(np.asarray(theta, dtype=np.float64), include_tp=True)
        return bridge.split_constrained(vals, include_tp=True)

    var_name = getattr(model, "var_name", None) or (getattr(bridge, "loo_options", None) or {}).get("log_lik") or "log_lik"
    return pvi_model(
        kind="Stan", source=model, loo_adapter=model if getattr(model, "is_jax", False) else None, dim=d, n_obs=n, labels=list(bridge.unconstrained_param_names()), terms=terms,
        constrain=constrain, unconstrain=lambda post: _unconstrain(model, bridge, post),
        param_names=tuple(dims), param_dims=param_dims, coords={}, var_name=str(var_name),
        obs_dims=(f"{var_name}_dim_0",), obs_shape=(n,), y=y, categories=cats,
        eval_loglik=jax.jit(loglik), eval_probs=probs_eval, eval_predict=predict, notes=notes,
    )


def _unconstrain(model, bridge, posterior):
    """Unconstrained draws from a posterior group with Stan's variable names."""
    if hasattr(model, "unconstrain"):
        return model.unconstrain(posterior)
    if hasattr(posterior, "children") and "posterior" in posterior.children:
        posterior = posterior["posterior"]
    if hasattr(posterior, "to_dataset"):
        posterior = posterior.to_dataset()
    cols = []
    for name in bridge.constrained_param_names(include_tp=False, include_gq=False):
        m = _NAME_RE.match(name)
        var = m.group(1)
        idx = tuple(int(k) for k in m.group(2).split(".")[1:]) if m.group(2) else ()
        if var not in posterior:
            raise ValueError(f"parameter {var!r} is not in the posterior (variables: {list(posterior.data_vars)})")
        a = np.asarray(posterior[var].transpose("chain", "draw", ...).values, dtype=np.float64)
        cols.append(a[(slice(None), slice(None), *(k - 1 for k in idx))].reshape(-1))
    return bridge.param_unconstrain(np.stack(cols, axis=-1))
