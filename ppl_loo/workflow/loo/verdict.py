"""The verdict of ``pl.loo``: one pure function from the evidence the stages produced to the answer per observation
(``docs/method.md``, sections 4, 5 and 8).

The stages of ``pl.loo`` (:mod:`.stages`) each return immutable evidence: plain PSIS, the convergence of each
observation's log-likelihood draws, the adaptive search's candidates and diagnostics, the second opinions (mixture
importance sampling, tempered SMC) and the refits. :func:`verdict` turns whatever exists into the estimate, SE,
k-hat, transformation, evidence, ``doubtful`` flag and reason of every observation; it is the only writer of those
fields, and choosing what the next stage runs on is calling it on what exists so far (:attr:`Verdict.unsettled`).

The rules, in order:

1. Plain PSIS settles an observation alone when the search has no reason to look at it (``Evidence.examine``
   False: k-hat low and influence low, :func:`~ppl_loo.workflow.loo.plain.flag_observations`) and its draws
   converged. An examined observation is settled by plain PSIS alone only after the search found nothing that
   contradicts it (its k-hat at most 0.5, its ESS fine: :func:`search_decision`).
2. The search vouches alone where two independently built transformations agree (``"adapted"``).
3. Estimates from independent draws that agree vouch together (:mod:`ppl_loo.workflow.loo.vouch.rule`), and a
   passing mixture estimate vouches alone where nothing credible contradicts it. Estimates both within
   :data:`~ppl_loo.workflow.loo.vouch.rule.NEGLIGIBLE_NATS` of 0 never contradict each other.
4. Convergence is judged per estimate: the draws vouch for observation ``i`` only where the rank-normalized R-hat of
   ``log p(y_i | theta)`` is at most :data:`~ppl_loo.workflow.loo.inputs.RHAT_VOUCH` and its bulk ESS at least
   :data:`MIN_LL_ESS` (:func:`convergence`); a fit whose parameters have not mixed at all (largest R-hat above
   :data:`RHAT_NOT_MIXED`) vouches for nothing.
5. A vouched estimate is precise: its SE at most :data:`VOUCH_MAX_SE`, else the next stage runs on it, and where no
   stage brings it there the observation is doubtful (a refit settles it).
6. A refit that converged settles its observation; one that did not leaves it doubtful.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from ppl_loo.numerics.loo import AGREE_Z, PLAIN_LIKE_TV, PLAIN_VOUCH_K
from ppl_loo.workflow.exact.refit import refit_converged
from ppl_loo.workflow.loo.inputs import RHAT_NOT_MIXED, RHAT_VOUCH, rank_rhat
from ppl_loo.workflow.loo.messages import nats
from ppl_loo.workflow.loo.plain import pointwise_reasons
from ppl_loo.workflow.loo.vouch.rule import negligible, settle

__all__ = ["Pointwise", "Convergence", "Evidence", "Rules", "Verdict", "verdict", "convergence", "search_decision",
           "VOUCH_MAX_SE", "MIN_LL_ESS"]

#: the largest Monte Carlo SE (nats) at which one estimate settles an observation: two SEs either side of it span
#: one nat, the size of a difference in one ``elpd_i`` that changes a model comparison's conclusion; above it the
#: next stage runs, and an observation no stage brings below it is doubtful
VOUCH_MAX_SE = 0.25
#: the draws vouch for an observation only where the bulk ESS of its log-likelihood draws is at least this
#: (Vehtari et al. 2021: below 100 the R-hat and the Monte Carlo SE themselves are unreliable)
MIN_LL_ESS = 100.0


@dataclass
class Pointwise:
    """The answer per observation while :func:`verdict` builds it; starts as plain PSIS (:meth:`from_plain`)."""

    elpd: np.ndarray
    k: np.ndarray
    mcse: np.ndarray
    n_eff: np.ndarray
    transform: np.ndarray
    hbar: np.ndarray
    doubtful: np.ndarray
    use_adapted: np.ndarray
    identity_failed: np.ndarray  # candidates whose weights failed the change-of-variables check
    refit: np.ndarray
    #: the search's selected candidate where it passes every check with k-hat at most the threshold, corroborated
    #: or not (NaN elsewhere): a second opinion can confirm it (:mod:`ppl_loo.workflow.loo.vouch.rule`)
    cand_elpd: np.ndarray = None
    cand_se: np.ndarray = None
    cand_k: np.ndarray = None
    cand_label: np.ndarray = None

    @classmethod
    def from_plain(cls, plain):
        n = plain.k.shape[0]
        return cls(plain.elpd.copy(), plain.k.copy(), plain.mcse.copy(), plain.n_eff.copy(),
                   np.full(n, "psis", dtype=object), np.full(n, np.nan), np.zeros(n, bool), np.zeros(n, bool),
                   np.zeros(n, int), np.zeros(n, bool), np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan),
                   np.full((n, 2), None, dtype=object))


class Convergence(NamedTuple):
    """Whether the posterior draws can vouch for each observation (:func:`convergence`)."""

    rhat: np.ndarray  # (n,) rank-normalized split R-hat of log p(y_i | theta); NaN where undefined
    ess: np.ndarray  # (n,) its bulk ESS
    ok: np.ndarray  # (n,) bool
    max_rhat: float  # the parameters' largest R-hat (reported, and a fit above RHAT_NOT_MIXED vouches for nothing)
    max_rhat_var: Any  # where it is, "name[index]", or None


class Evidence(NamedTuple):
    """What the stages produced so far; every field is read only.

    ``examine``: the observations plain PSIS alone does not settle (the search's targets); ``search``: observation ->
    the search's result (candidates and diagnostics, :class:`~ppl_loo.numerics.loo.ObsResult` fields as arrays);
    ``opinions``: the second opinions that ran (:class:`~ppl_loo.workflow.loo.vouch.rule.Opinion`, mixture first);
    ``refits``: observation -> refit record (:func:`~ppl_loo.workflow.exact.refit.run_refits`)."""

    plain: Any
    conv: Convergence
    examine: np.ndarray
    search: MappingProxyType = MappingProxyType({})
    labels: tuple = ()
    opinions: tuple = ()
    refits: MappingProxyType = MappingProxyType({})

    def with_search(self, results, labels):
        """A copy with the search's ``results`` (observation -> result) added."""
        return self._replace(search=MappingProxyType({**self.search, **results}), labels=tuple(labels))

    def with_opinion(self, opinion):
        return self._replace(opinions=self.opinions + (opinion,))

    def with_refits(self, records):
        return self._replace(refits=MappingProxyType({**self.refits, **records}))


class Rules(NamedTuple):
    """The settings the verdict applies (from :class:`~ppl_loo.numerics.loo.EngineConfig`)."""

    k_threshold: float
    min_ess: float
    r_eff: float
    approx: bool
    max_se: float = VOUCH_MAX_SE


class Verdict(NamedTuple):
    """The answer per observation (arrays over the flat observations)."""

    elpd: np.ndarray
    mcse: np.ndarray
    k: np.ndarray
    n_eff: np.ndarray
    transform: np.ndarray
    hbar: np.ndarray
    use_adapted: np.ndarray
    identity_failed: np.ndarray
    refit: np.ndarray
    doubtful: np.ndarray
    evidence: np.ndarray
    reason: np.ndarray

    @property
    def unsettled(self):
        """What the next stage should run on: the doubtful observations that no refit has settled."""
        return self.doubtful & ~self.refit


def convergence(ll, n_chains, max_rhat=float("nan"), max_rhat_var=None, approx=False) -> Convergence:
    """Per observation: whether its log-likelihood draws mixed (R-hat at most
    :data:`~ppl_loo.workflow.loo.inputs.RHAT_VOUCH`, bulk ESS at least :data:`MIN_LL_ESS`), as
    :class:`Convergence`.

    ``ll`` ``(S, n)`` chain-major; ``max_rhat``: the parameters' largest R-hat
    (:func:`~ppl_loo.workflow.loo.inputs.max_rhat_of`): above :data:`RHAT_NOT_MIXED` no observation is vouched for
    by the draws. Draws of an approximation (``approx``) are independent: every observation passes. With one chain
    (R-hat undefined) the ESS alone decides.
    """
    from arviz_stats.base import array_stats

    ll = np.asarray(ll, dtype=np.float64)
    S, n = ll.shape
    if approx:
        return Convergence(np.full(n, np.nan), np.full(n, float(S)), np.ones(n, bool), max_rhat, max_rhat_var)
    a = ll.reshape(n_chains, S // n_chains, n)
    rhat = rank_rhat(a)
    if a.shape[1] >= 4:
        with np.errstate(invalid="ignore", divide="ignore"):
            ess = np.asarray(array_stats.ess(a, chain_axis=0, draw_axis=1, method="bulk"), dtype=float)
    else:
        ess = np.full(n, np.nan)
    const = np.ptp(ll, axis=0) == 0  # a constant term: exact whatever the draws
    ok = (~(rhat > RHAT_VOUCH) & ~(ess < MIN_LL_ESS)) | const
    if max_rhat > RHAT_NOT_MIXED:
        ok[:] = const
    return Convergence(rhat, ess, ok, float(max_rhat), max_rhat_var)


def search_decision(pw, i, r, plain, rules, labels):
    """The search's word on observation ``i`` (``r``: its result) in ``pw``: the corroborated candidate where there
    is one (two transformations agree); else plain PSIS, vouched for only where its own k-hat is at most 0.5 (finite
    variance of the weights) and the threshold, its ESS is fine, and no candidate that passes every check and moved
    the weights (total variation at least ``PLAIN_LIKE_TV``) contradicts it; ``doubtful`` where neither holds."""
    if not rules.approx:
        pw.identity_failed[i] = int(np.sum(~np.asarray(r["identity_ok"])))
    best = int(r["best"])
    good = bool(r["usable"][best] and r["checks_ok"][best] and r["k"][best] <= rules.k_threshold)
    # the search's corroborated candidate vouches where no candidate failed the change-of-variables check
    trusted = bool(r["corroborated"]) and pw.identity_failed[i] == 0
    if good and pw.identity_failed[i] == 0:
        pw.cand_elpd[i], pw.cand_se[i], pw.cand_k[i] = float(r["elpd"][best]), float(r["se"][best]), float(r["k"][best])
        pw.cand_label[i] = labels[best]
    if trusted:
        pw.use_adapted[i] = True
        pw.elpd[i], pw.k[i], pw.mcse[i] = float(r["elpd"][best]), float(r["k"][best]), float(r["se_best"])
        pw.n_eff[i] = float(r["ess"][best]) * rules.r_eff
        pw.transform[i], pw.hbar[i] = labels[best]
    else:  # no corroborated adapted candidate: the plain PSIS values stay
        pw.transform[i] = "psis" if good else "failed"
    moved_ok = r["usable"] & r["checks_ok"] & (r["k"] <= rules.k_threshold) & ~(r["tv"] < PLAIN_LIKE_TV)
    contradicts = ((np.abs(r["elpd"] - plain.elpd[i]) > AGREE_Z * np.hypot(r["se"], pw.mcse[i]))
                   & ~negligible(r["elpd"], plain.elpd[i]))
    plain_ok = bool(plain.k[i] <= min(rules.k_threshold, PLAIN_VOUCH_K) and pw.n_eff[i] >= rules.min_ess
                    and pw.identity_failed[i] == 0 and not np.any(moved_ok & contradicts))
    if not trusted and plain_ok:
        pw.transform[i] = "psis"
    pw.doubtful[i] = not (trusted or plain_ok)


def verdict(ev: Evidence, rules: Rules) -> Verdict:
    """The answer per observation from the evidence ``ev`` (nothing in ``ev`` is changed): the rules of the module
    docstring, in their order."""
    plain, conv = ev.plain, ev.conv
    pw = Pointwise.from_plain(plain)
    for i, r in ev.search.items():
        search_decision(pw, int(i), r, plain, rules, ev.labels)
    waiting = np.asarray(ev.examine, bool).copy()  # examined, not yet searched: plain PSIS alone does not settle it
    waiting[list(ev.search)] = False
    pw.doubtful |= waiting | ~conv.ok
    # a NaN or infinite estimate is never vouched for (k = -inf: exactly uniform weights, a constant term)
    pw.doubtful |= np.isnan(pw.k) | (pw.k == np.inf) | ~np.isfinite(pw.elpd)
    evidence, notes = settle(pw, plain, rules.k_threshold, list(ev.opinions), converged=conv.ok)
    evidence = np.asarray(evidence, dtype=object)
    notes = np.asarray(notes, dtype=object)
    imprecise = ~pw.doubtful & ~(pw.mcse <= rules.max_se)
    for i in np.flatnonzero(imprecise):
        notes[i] = (f"{evidence[i]} gives {nats(pw.elpd[i])} ± {nats(pw.mcse[i])}, an SE above the "
                    f"{rules.max_se:g} nats at which one estimate settles an observation")
    pw.doubtful |= imprecise
    evidence[imprecise] = ""
    for i, rec in ev.refits.items():
        pw.elpd[i], pw.mcse[i] = rec["elpd_i"], rec["mcse"]
        pw.transform[i], pw.hbar[i], pw.k[i] = "refit", np.nan, np.nan  # no importance sampling: no k-hat
        pw.refit[i], pw.use_adapted[i] = True, False
        pw.doubtful[i] = not refit_converged(rec)
        evidence[i] = "" if pw.doubtful[i] else "refit"
    evidence[pw.doubtful] = ""
    reason = _reasons(pw, ev, rules, waiting, notes)
    return Verdict(pw.elpd, pw.mcse, pw.k, pw.n_eff, pw.transform.astype(str), pw.hbar, pw.use_adapted,
                   pw.identity_failed, pw.refit, pw.doubtful, evidence.astype(str), reason)


def _reasons(pw, ev, rules, waiting, notes):
    """Why each doubtful observation is doubtful, in words (``""`` elsewhere)."""
    plain, conv = ev.plain, ev.conv
    n = pw.k.shape[0]
    reason = np.full(n, "", dtype=object)
    _, plain_reason = pointwise_reasons(plain.k, rules.k_threshold, plain.log_ratios)
    for i in np.flatnonzero(pw.doubtful & pw.refit):
        rec = ev.refits.get(int(i), {})
        reason[i] = (f"the refit without it did not converge (R-hat of log p(y_i | theta) "
                     f"{rec.get('rhat_loglik', float('nan')):.3f}, at most {RHAT_VOUCH} needed; largest parameter "
                     f"R-hat {rec.get('rhat_max', float('nan')):.3f}, at most {RHAT_NOT_MIXED}); more refit draws "
                     "(refit_options) may settle it")
    for i in np.flatnonzero(pw.doubtful & ~pw.refit):
        k = pw.k[i]
        if not conv.ok[i]:
            text = _unconverged_text(conv, i)
        elif pw.transform[i] == "mixture" and not notes[i]:
            text = "only mixture importance sampling passed its checks, and nothing independent confirms it"
        elif pw.identity_failed[i]:
            text = "the draws fail the change-of-variables check of the adapted proposals"
        elif not np.isfinite(pw.elpd[i]):
            text = "elpd_i is not finite"
        elif np.isnan(k) or k == np.inf:
            text = plain_reason[i] or f"k-hat {k} could not be estimated"
        elif waiting[i]:
            text = f"plain PSIS alone does not settle it (k-hat {plain.k[i]:.2f}) and the search did not run"
        elif pw.transform[i] == "failed":
            text = f"no proposal reached k-hat {rules.k_threshold:.2f} (best {k:.2f}; plain PSIS {plain.k[i]:.2f})"
        elif pw.transform[i] in ("mixture", "smc"):
            text = ""
        elif pw.transform[i] == "psis" and int(i) not in ev.search:
            text = f"plain PSIS (k-hat {plain.k[i]:.2f}) is not confirmed" + (" by the other estimates of it"
                                                                               if notes[i] else "")
        else:
            text = f"no adapted proposal was independently confirmed (k-hat {k:.2f}; plain PSIS {plain.k[i]:.2f})"
        if plain_reason[i] and plain_reason[i] not in text and "could not be estimated" in plain_reason[i]:
            text += f"; plain PSIS: {plain_reason[i]}"
        if notes[i]:
            text = f"{text}; {notes[i]}" if text else str(notes[i])
        reason[i] = text
    return reason.astype(str)


def _unconverged_text(conv, i):
    if conv.max_rhat > RHAT_NOT_MIXED:
        return (f"the posterior draws have not mixed (R-hat {conv.max_rhat:.3f} for {conv.max_rhat_var}, above "
                f"{RHAT_NOT_MIXED})")
    if conv.rhat[i] > RHAT_VOUCH:
        return f"its log-likelihood draws have not converged (R-hat {conv.rhat[i]:.3f}, above {RHAT_VOUCH})"
    return f"its log-likelihood draws have a bulk ESS of {conv.ess[i]:.0f}, below {MIN_LL_ESS:.0f}"
