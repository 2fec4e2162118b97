"""Why the engine's final answer fails where a candidate's k-hat is below 0.7.

``LooResult.candidates`` holds every candidate's k-hats and elpd_i but not the other conditions
the engine requires of the proposal it uses (an effective sample size ``1 / sum w^2`` of at least
``min(100, S/10)``, an invertible map at every draw, a finite elpd numerator k-hat). This reruns
the engine's own compiled search (the object ``pl.loo`` cached on the model) for the observations
in question and reports those quantities for the candidates whose weights' k-hat is <= 0.7.
This uses private engine state (``res._engine``, ``model._ppl_loo_engines``); it is a diagnostic
of the benchmark, not an API.
"""

from __future__ import annotations

import numpy as np


def why_failed(res, model, obs, threshold=0.7):
    import jax.numpy as jnp

    eng = res._engine
    obs = [int(i) for i in obs]
    if not obs:
        return []
    entries = [v for k, v in model.__dict__.get("_ppl_loo_engines", {}).items() if k[0] == eng.config]
    if not entries:
        return [{"obs": i, "error": "engine cache not found"} for i in obs]
    _, _, mapped, _ = entries[0]
    batch = [k for k in model.__dict__["_ppl_loo_engines"] if k[0] == eng.config][0][2]
    out = []
    for start in range(0, len(obs), batch):
        idx = np.asarray(obs[start:start + batch])
        pad = np.concatenate([idx, np.repeat(idx[-1:], batch - len(idx))])
        r = mapped(eng.edata, jnp.asarray(pad), jnp.asarray(eng.ll[:, pad].T))
        for j, i in enumerate(idx):
            k_w, k = np.asarray(r.k_w[j]), np.asarray(r.k[j])
            ess, usable, nbad = np.asarray(r.ess[j]), np.asarray(r.usable[j]), np.asarray(r.n_noninvertible[j])
            good = np.flatnonzero(k_w <= threshold)
            cands = [{"candidate": list(eng.labels[c]), "k_weights": float(k_w[c]), "k": float(k[c]),
                      "ess": float(ess[c]), "usable": bool(usable[c]), "n_noninvertible": int(nbad[c])}
                     for c in good[np.argsort(k_w[good])][:5]]
            out.append({"obs": int(i), "k_psis": float(np.asarray(res.pareto_k_psis).ravel()[i]),
                        "candidates_k_weights_le_threshold": cands,
                        "max_ess_of_those": float(np.max(ess[good])) if len(good) else None,
                        "min_ess_required": float(eng.config.min_ess)})
    return out
