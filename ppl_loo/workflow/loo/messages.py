"""What ``pl.loo`` tells the user when it cannot vouch for an estimate, and what to do next."""

from __future__ import annotations

import warnings

import numpy as np

from ppl_loo.workflow.loo.inputs import RHAT_VOUCH, obs_labels

__all__ = ["nats", "warn_unconverged", "warn_doubtful", "warn_identity", "warn_refits_not_converged",
           "warn_refit_budget",
           "warn_plain",
           "warn_identical_chains"]

_REFIT = "pl.loo(data, model, refit='doubtful', random_seed=...)"
#: below this magnitude a value in nats is printed with :data:`SIGNIFICANT` significant digits, not two decimals
SMALL = 0.01
SIGNIFICANT = 3


def nats(x):
    """A value in nats (an ``elpd_i``, its SE, a part of ``elpd_loo``) for a message: two decimals, or
    :data:`SIGNIFICANT` significant digits where its magnitude is below :data:`SMALL` (``-1.23e-08``, ``0.00412``),
    so that no nonzero value prints as ``0.00``."""
    x = float(x)
    return f"{x:.2f}" if not np.isfinite(x) or abs(x) >= SMALL or x == 0 else f"{x:.{SIGNIFICANT}g}"


def _warn(message, stacklevel=4):
    warnings.warn(message, UserWarning, stacklevel=stacklevel)


def warn_unconverged(max_rhat, where, n_doubtful, which=""):
    """The draws have not converged: every observation not settled otherwise is doubtful (``which``: the first
    of them, with their reasons)."""
    _warn(f"The posterior draws have not converged: R-hat {max_rhat:.3f} for {where} (above "
          f"{RHAT_VOUCH}, Vehtari et al. 2021). Importance sampling from them, plain PSIS and every adapted "
          f"proposal alike, can be off by more than its Monte Carlo error whatever its k-hat, so all "
          f"{n_doubtful} observation(s) not settled by estimates from other draws (the mixture run, when it ran and "
          f"passed its checks: res.evidence) or refit are doubtful (res.doubtful{': ' + which if which else ''}). "
          f"Run longer or more chains (or reparameterize) and call pl.loo again, or refit: {_REFIT}.")


def warn_doubtful(pw, k_threshold, which=""):
    """Observations the evidence does not settle (``which``: the first of them, with their reasons), counted by why:
    draws that did not converge, an estimate too imprecise, estimates that disagree or none at all."""
    doubtful = pw.doubtful
    reasons = np.asarray(pw.reason, dtype=str)[doubtful]
    n_unconv = int(sum("have not converged" in r or "bulk ESS" in r or "have not mixed" in r for r in reasons))
    n_imprecise = int(sum("an SE above" in r for r in reasons))
    n_failed = int(np.sum((pw.transform == "failed") & doubtful))
    parts = [f"{n} {what}" for n, what in (
        (n_unconv, "whose log-likelihood draws did not converge"),
        (n_imprecise, "whose best estimate is too imprecise to settle them"),
        (n_failed, f"where no adapted proposal reached Pareto k {k_threshold:.2f}"))
        if n]
    rest = int(np.sum(doubtful)) - n_unconv - n_imprecise - n_failed
    if rest > 0:
        parts.append(f"{rest} where no two independent estimates agree")
    _warn(f"{int(np.sum(doubtful))} observation(s) are doubtful (res.doubtful; why, per observation: res.reason): "
          f"{'; '.join(parts)}. Their elpd_i can be off by more than its Monte Carlo error. Together they carry "
          f"{nats(np.sum(pw.elpd[doubtful]))} of elpd_loo{' (' + which + ')' if which else ''}. Exact LOO: "
          f"{_REFIT} "
          "refits the model without each of them.")


def warn_identity(n_identity, n_searched, worst):
    """Candidate maps that moved draws to a density ratio the posterior cannot give (change of variables)."""
    _warn(f"The posterior draws fail the change-of-variables check for {n_identity} of {n_searched} adapted "
          f"observation(s): moving the draws by a candidate map raised the posterior density ratio "
          f"p(T theta)|J|/p(theta) of a draw to exp({worst:.0f}), which has probability below 1e-6 for draws "
          "from this model's posterior (its mean must be 1). The draws do not represent the posterior in "
          "those directions (unconverged or stuck chains, a multimodal posterior, or draws of another "
          "model), so importance sampling from them, plain PSIS included, can be off by more than its "
          "k-hat suggests. Those candidates were not used and the observations are marked doubtful "
          "(res.doubtful). Check R-hat and ESS, run longer or more chains, or refit without them.")


def warn_refits_not_converged(bad, worst):
    """Refits whose draws did not converge stay doubtful."""
    _warn(f"refit: the refits of observation(s) {bad} did not converge (R-hat of a parameter or of "
          f"log p(y_i | theta) above {RHAT_VOUCH}, up to {worst:.3f}); they stay doubtful. Pass "
          "second_opinions={'refit_options': {...}} with more draws or warmup.")


def warn_refit_budget(skipped):
    """The refit time budget ran out."""
    _warn(f"refit: the time budget was spent before {len(skipped)} doubtful observation(s) "
          f"{skipped[:10]}{' ...' if len(skipped) > 10 else ''} could be refit; they keep "
          "their importance-sampling estimate (res.doubtful).")


def warn_plain(ref0, k, doubtful, reason, k_threshold):
    """Plain PSIS-LOO (``pl.loo(data)``): observations with k-hat above the threshold (what
    ``arviz_stats.loo`` warns), NaN or infinite, named with their reasons."""
    k = np.asarray(k, dtype=float)
    high = np.flatnonzero(doubtful & np.isfinite(k) & (k > k_threshold))
    odd = np.flatnonzero(doubtful & ~(np.isfinite(k) & (k > k_threshold)))
    parts = []
    if high.size:
        parts.append(f"Estimated shape parameter of Pareto distribution is greater than {k_threshold:.2f} for "
                     f"{high.size} observation(s) ({obs_labels(ref0, high)}): importance sampling is less likely "
                     "to work well there, the marginal posterior and the LOO posterior being very different.")
    if odd.size:
        shown = "; ".join(f"{obs_labels(ref0, [i])}: {reason[i]}" for i in odd[:5])
        parts.append(f"{odd.size} observation(s) have no usable Pareto k-hat ({shown}"
                     f"{' ...' if odd.size > 5 else ''}).")
    parts.append("They are doubtful (res.doubtful, res.reason). pl.loo(data, model) adapts the importance-sampling "
                 "proposal for them (and refit='doubtful' refits the model without each).")
    _warn(" ".join(parts))


def warn_identical_chains(pairs):
    """The same chain given twice (e.g. one CSV file passed twice): R-hat and ESS would count it twice."""
    shown = ", ".join(f"{a} and {b}" for a, b in pairs[:5])
    _warn(f"posterior chains {shown} hold identical draws (the same chain given twice, e.g. the same CSV file "
          "passed twice): R-hat looks perfect and the effective sample size counts the draws twice. Drop the "
          "duplicate (data.isel(chain=[...])) or pass the other chain's output.")
