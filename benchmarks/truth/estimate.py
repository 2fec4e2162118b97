"""``log p(y_i | y_-i)`` from a refit without ``i``, robustly, with its Monte Carlo error.

Three estimators of the same number (``l_i = p(y_i | theta)``):

- ``naive``: ``log mean_s l_i(theta_s)`` over the refit draws alone. Biased low (in log space) when
  ``l_i`` spans orders of magnitude over those draws: the few draws that carry the mean are rare.
  MCSE by the delta method with the effective sample size of ``l_i`` over the refit's chains.
- ``bridge``: the optimal bridge between the refit draws and the main fit's draws
  (:func:`ppl_loo.numerics.bridge.bridge_log_ratio`, Meng & Wong 1996): each set of draws is used
  where it is good. MCSE from Fruhwirth-Schnatter's (2004) relative error with effective sample
  sizes; also the spread of the bridge estimates of chain pairs (refit chain c with main chain c),
  a check on the formula.
- ``stepping stones`` (a few observations): a ladder of tempered fits ``p_-i l_i^beta`` from the
  refit (beta = 0) to the main fit (beta = 1), bridged rung to rung.

The truth used to score the LOO methods is the exact value where the problem has one (closed form,
quadrature), else the bridge estimate.
"""

from __future__ import annotations

import numpy as np

from ppl_loo.numerics.bridge import bridge_log_ratio, effective_size, log_mean_exp, stepping_stones


def naive(ll_refit):
    """``(estimate, mcse)`` of ``log mean l`` over the refit draws ``(chains, draws)``."""
    ll = np.asarray(ll_refit, dtype=float)
    est = log_mean_exp(ll)
    lik = np.exp(ll - np.max(ll))
    ess = effective_size(lik)
    return float(est), float(np.std(lik) / np.sqrt(ess) / np.mean(lik))


def bridge(ll_refit, ll_full):
    """Bridge estimate and MCSE, plus the chain-pair spread (``sd / sqrt(pairs)``)."""
    ll_refit, ll_full = np.asarray(ll_refit, float), np.asarray(ll_full, float)
    est = bridge_log_ratio(ll_refit, ll_full)
    pairs = min(ll_refit.shape[0], ll_full.shape[0])
    if pairs >= 2:
        per = [bridge_log_ratio(ll_refit[c], ll_full[c], ess=False).log_ratio for c in range(pairs)]
        spread = float(np.std(per, ddof=1) / np.sqrt(pairs))
    else:
        spread = float("nan")
    return est.log_ratio, est.mcse, spread


def truth_record(ll_refit, ll_full, diagnostics):
    """Everything the suite stores for one refit."""
    nv, nse = naive(ll_refit)
    bv, bse, bspread = bridge(ll_refit, ll_full)
    return {"naive": nv, "naive_mcse": nse, "bridge": bv, "bridge_mcse": bse, "bridge_chain_spread": bspread,
            "lpd_full": float(log_mean_exp(ll_full)), **diagnostics}


def stones_record(rungs, betas):
    est = stepping_stones(rungs, betas)
    return {"stepping_stones": est.log_ratio, "stepping_stones_mcse": est.mcse, "betas": list(map(float, betas))}
