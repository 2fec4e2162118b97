"""Why the engine's final answer fails where a candidate's k-hat is below 0.7.

``LooResult.candidates`` holds every candidate's k-hats and elpd_i but not the other conditions
the engine requires of the proposal it uses (an effective sample size ``1 / sum w^2`` of at least
``min(100, S/10)``, an invertible map at every draw, a finite elpd numerator k-hat). This reruns
the engine's compiled search (``ppl_loo.workflow.loo.engine``, with the settings stored in the result)
for the observations in question and reports those quantities for the candidates whose weights'
k-hat is <= 0.7. It is a diagnostic of the benchmark, not an API.
"""

from __future__ import annotations

import numpy as np


def engine_arrays(res, data, model):
    """``(theta, ll, lw_psis)``: the unconstrained draws ``(S, d)``, their log-likelihood ``(S, n)`` and the
    plain-PSIS log weights ``(n, S)`` of a stored result, rebuilt from ``data`` with ``model``."""
    import jax.numpy as jnp

    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()), dtype=np.float64)
    ll = np.asarray(model.log_lik(jnp.asarray(theta)))
    lw_psis = np.asarray(res.log_weights.transpose("chain", "draw", ...).values).reshape(ll.shape).T
    return theta, ll, lw_psis


def why_failed(res, model, obs, threshold=0.7, data=None):
    import jax.numpy as jnp

    from ppl_loo.workflow.loo.engine import compiled_engine, config_from_plain, engine_data

    obs = [int(i) for i in obs]
    if not obs:
        return []
    cfg, posterior_draws = config_from_plain(res.engine_config)
    batch = min(8, len(obs))
    _, _, mapped, _ = compiled_engine(model, cfg, posterior_draws, batch)
    theta, ll, _ = engine_arrays(res, data, model)
    log_q = None if res.log_q is None else res.log_q.transpose("chain", "draw").values
    edata = engine_data(model, theta, res.engine_config, log_q)
    labels = res.candidates["labels"]
    out = []
    for start in range(0, len(obs), batch):
        idx = np.asarray(obs[start:start + batch])
        pad = np.concatenate([idx, np.repeat(idx[-1:], batch - len(idx))])
        r = mapped(edata, jnp.asarray(pad), jnp.asarray(ll[:, pad].T))
        for j, i in enumerate(idx):
            k_w, k = np.asarray(r.k_w[j]), np.asarray(r.k[j])
            ess, usable, nbad = np.asarray(r.ess[j]), np.asarray(r.usable[j]), np.asarray(r.n_noninvertible[j])
            good = np.flatnonzero(k_w <= threshold)
            cands = [{"candidate": list(labels[c]), "k_weights": float(k_w[c]), "k": float(k[c]),
                      "ess": float(ess[c]), "usable": bool(usable[c]), "n_noninvertible": int(nbad[c])}
                     for c in good[np.argsort(k_w[good])][:5]]
            out.append({"obs": int(i), "k_psis": float(np.asarray(res.pareto_k_psis).ravel()[i]),
                        "candidates_k_weights_le_threshold": cands,
                        "max_ess_of_those": float(np.max(ess[good])) if len(good) else None,
                        "min_ess_required": float(cfg.min_ess)})
    return out
