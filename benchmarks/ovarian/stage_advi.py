"""Mean-field ADVI fits of both models and LOO through the variational weights (Eq. 13).

The project's own variational code (``ppl_loo/numerics/vi/families.py``, ``pl.pvi``) was not
committed when this benchmark was written, so the fits use NumPyro's SVI with an ``AutoNormal``
guide (mean-field Gaussian in the unconstrained space, one-particle ELBO gradients, Adam), which
is what Stan's ``variational`` (meanfield ADVI) fits:

- LR: the non-centered horseshoe program (``LogisticRegression.numpyro_model()``, the
  parameterization of ``stan_models/logistic_horseshoe.stan``); ``q`` is mean-field over
  ``(beta0, z, log lam, log tau_raw, log caux)``. The draws are mapped to the JAX model's
  unconstrained space (centered ``beta = z lam_tilde tau``), where ``q`` has the density
  ``log q(theta) = log q_nc(u(theta)) - sum_j log(lam_tilde_j tau)`` (the Jacobian of
  ``z = beta / (lam_tilde tau)``; the other blocks are shifts).
- ReLU net: mean-field over all weights, already the JAX model's space.

``pl.loo(data, model, log_q=<JAX callable>)`` then uses the weights of Eq. 13 (``chi``: the
target is the LOO posterior, the proposal the images of ``q``).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from diagnose import engine_arrays
from ovarian_common import jax_model, log, save_json

SEED = {"logistic": 11, "relu": 12}


def _normal_logpdf(x, loc, scale):
    import jax.numpy as jnp

    return -0.5 * ((x - loc) / scale) ** 2 - jnp.log(scale) - 0.5 * jnp.log(2 * jnp.pi)


def numpyro_relu(model):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def f():
        theta = numpyro.sample("theta", dist.Normal(0.0, model.prior_scale).expand([model.dim]).to_event(1))
        numpyro.factor("loglik", jnp.sum(model.loglik(theta)))

    return f


def fit_advi(name, model, cfg, seed):
    """SVI with AutoNormal. Returns ``(theta (S, d), log_q callable, info dict)``."""
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.infer.initialization import init_to_median

    nmodel = model.numpyro_model() if name == "logistic" else numpyro_relu(model)
    guide = AutoNormal(nmodel, init_loc_fn=init_to_median(num_samples=15), init_scale=0.1)
    svi = SVI(nmodel, guide, numpyro.optim.Adam(cfg["lr"]), Trace_ELBO())
    t0 = time.perf_counter()
    result = svi.run(jax.random.PRNGKey(seed), cfg["steps"], progress_bar=False)
    wall = time.perf_counter() - t0
    params = result.params
    loc = {k[: -len("_auto_loc")]: np.asarray(v) for k, v in params.items() if k.endswith("_auto_loc")}
    scale = {k[: -len("_auto_scale")]: np.asarray(v) for k, v in params.items() if k.endswith("_auto_scale")}
    rng = np.random.default_rng(seed)
    S = cfg["draws"]
    u = {k: loc[k] + scale[k] * rng.standard_normal((S,) + np.shape(loc[k])) for k in loc}
    log_q_direct = sum(np.sum(-0.5 * ((u[k] - loc[k]) / scale[k]) ** 2 - np.log(scale[k]) - 0.5 * np.log(2 * np.pi),
                              axis=tuple(range(1, u[k].ndim))) for k in u)
    losses = np.asarray(result.losses)
    info = {"method": "NumPyro SVI, AutoNormal (mean-field Gaussian), Trace_ELBO (1 particle), Adam",
            "steps": cfg["steps"], "lr": cfg["lr"], "draws": S, "seed": seed, "wall_s": wall,
            "final_loss_mean_last_1000": float(np.mean(losses[-1000:])), "loss_first": float(losses[0])}
    if name == "relu":
        theta = u["theta"]
        l_t, s_t = jnp.asarray(loc["theta"]), jnp.asarray(scale["theta"])

        def log_q(th):
            return jnp.sum(_normal_logpdf(th, l_t, s_t))

        log_jac = np.zeros(S)
    else:
        sg, slab = model.scale_global, model.slab_scale
        lam, tau_raw, caux = np.exp(u["lam"]), np.exp(u["tau_raw"]), np.exp(u["caux"])
        tau = sg * tau_raw
        c2 = slab**2 * caux
        lt = np.sqrt(c2[:, None] * lam**2 / (c2[:, None] + tau[:, None] ** 2 * lam**2))
        beta = u["z"] * lt * tau[:, None]
        theta = np.asarray(model.unconstrain({"beta0": u["beta0"], "beta": beta, "lam": lam, "tau": tau, "caux": caux}))
        log_jac = -np.sum(np.log(lt * tau[:, None]), axis=1)
        p, q = model.p, model.q
        P = {k: (jnp.asarray(loc[k]), jnp.asarray(scale[k])) for k in loc}
        log_sg = float(np.log(sg))

        def log_q(th):
            b0, b = th[0], th[1:q]
            u_lam, u_tau, u_caux = th[q:q + p], th[q + p], th[q + p + 1]
            c2_ = slab**2 * jnp.exp(u_caux)
            lam_ = jnp.exp(u_lam)
            tau_ = jnp.exp(u_tau)
            lt_ = jnp.sqrt(c2_ * lam_**2 / (c2_ + tau_**2 * lam_**2))
            z = b / (lt_ * tau_)
            return (_normal_logpdf(b0, *P["beta0"]) + jnp.sum(_normal_logpdf(z, *P["z"]))
                    + jnp.sum(_normal_logpdf(u_lam, *P["lam"])) + _normal_logpdf(u_tau - log_sg, *P["tau_raw"])
                    + _normal_logpdf(u_caux, *P["caux"]) - jnp.sum(jnp.log(lt_ * tau_)))

    lq = np.asarray(jax.vmap(log_q)(jnp.asarray(theta)))
    info["max_abs_log_q_callable_vs_direct"] = float(np.max(np.abs(lq - (log_q_direct + log_jac))))
    return theta, log_q, info


def run(cfg, cdir, out, logfile, models):
    import jax
    import xarray as xr
    from scipy.special import logsumexp

    import ppl_loo as pl

    for name in models:
        path = cdir / f"advi_{name}.json"
        if path.exists():
            continue
        model = jax_model(name)
        theta, log_q, info = fit_advi(name, model, cfg["advi"], SEED[name])
        log(f"advi {name}: {info['steps']} steps in {info['wall_s']:.0f} s, "
            f"final -ELBO {info['final_loss_mean_last_1000']:.1f}", logfile)
        post = {k: np.asarray(v)[None] for k, v in model.constrain(theta).items()}
        dims = model.param_dims
        data = xr.DataTree.from_dict({"posterior": xr.Dataset(
            {k: (("chain", "draw") + tuple(dims.get(k, ())), v) for k, v in post.items()})})
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the search alone, as in the peers stage (Eq. 13 weights against the refits)
            res = pl.loo(data, model, log_q=log_q, progressbar=False, search={"transforms": cfg["advi"]["transforms"]},
                         second_opinions={"mixture": False, "smc": False})
        wall = time.perf_counter() - t0
        _, ll_eng, lw_psis = engine_arrays(res, data, model)
        elpd_plain = logsumexp(lw_psis + ll_eng.T, axis=1)  # Eq. 13 with the identity map
        k = np.asarray(res.pareto_k).ravel()
        k_psis = np.asarray(res.pareto_k_psis).ravel()
        # the authors' "variational=True" mode trusts q as the posterior; its identity-map version is
        # plain PSIS-LOO on the ADVI draws (weights 1 / p(y_i | theta)), what a user gets from
        # arviz_stats.loo on an ADVI fit
        ll_q = np.asarray(model.log_lik(jax.numpy.asarray(theta)))
        data_q = data.copy()
        data_q["log_likelihood"] = xr.DataTree(xr.Dataset({"y": (("chain", "draw", "obs_id"), ll_q[None])}))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trusted = pl.loo(data_q)
        np.savez(cdir / f"advi_{name}_draws.npz", theta=theta)
        lq0 = np.asarray(jax.vmap(log_q)(jax.numpy.asarray(theta)))
        logp0 = np.asarray(jax.vmap(model.logp)(jax.numpy.asarray(theta)))
        save_json(path, {"model": name, "fit": info, "loo_wall_s": wall, "loo_transforms": cfg["advi"]["transforms"],
                         "elpd_i": np.asarray(res.elpd_i).ravel(),
                         "elpd_i_plain": elpd_plain, "k": k, "k_psis": k_psis, "elpd": float(res.elpd),
                         "elpd_plain": float(np.sum(elpd_plain)), "above_0.7_plain": int(np.sum(k_psis > 0.7)),
                         "above_0.7_adaptive": int(np.sum(k > 0.7)),
                         "failed": int(np.sum(np.asarray(res.transform).ravel() == "failed")),
                         "transform": [str(t) for t in np.asarray(res.transform).ravel()],
                         "elpd_i_q_as_posterior": np.asarray(trusted.elpd_i).ravel(),
                         "k_q_as_posterior": np.asarray(trusted.pareto_k).ravel(),
                         "above_0.7_q_as_posterior": int(np.sum(np.asarray(trusted.pareto_k) > 0.7)),
                         "k_hat_q_vs_posterior": _khat_q(logp0 - lq0)})
        log(f"advi {name}: LOO (Eq. 13) plain k > 0.7: {int(np.sum(k_psis > 0.7))}, adaptive: {int(np.sum(k > 0.7))}; "
            f"{wall:.0f} s", logfile)


def _khat_q(log_ratio):
    """Pareto k of ``p / q`` over the ADVI draws: how far q is from the full posterior."""
    import jax.numpy as jnp

    from ppl_loo.numerics.psis import psislw

    _, k = psislw(jnp.asarray(log_ratio)[None], 1.0)
    return float(np.asarray(k)[0])
