"""The vouching rule of ``pl.loo``: which evidence vouches for each ``elpd_i`` (``docs/method.md``, section 8).

An observation is vouched for when estimates from independent draws agree within :data:`AGREE_Z` combined Monte
Carlo SEs, or when both are within :data:`NEGLIGIBLE_NATS` of 0 (:func:`negligible`: a disagreement no total can
see). The estimates are

- the engine's, from the posterior draws: plain PSIS (its k-hat at most the threshold) or the adapted proposal the
  search selected (:mod:`ppl_loo.workflow.loo.adapt`); the search already vouches on its own where its k-hat is at most
  0.5 (``"psis"``) or two independently built transformations agree (``"adapted"``);
- mixture importance sampling, from one extra MCMC run (:mod:`.mixture`);
- tempered SMC from the posterior draws to the LOO posterior (:mod:`.smc`);
- a refit (``refit=``, the last resort, :mod:`ppl_loo.workflow.exact.refit`).

Where two agree, the reported value is their precision-weighted mean; its SE is the larger of their SEs with their
difference added in quadrature (:func:`_pooled`: agreement cannot rule out a bias below the less precise estimate's
resolution, and the mean follows the narrower one). Estimates from the posterior draws count only as a second
opinion to an estimate from other draws when the posterior draws have not converged (R-hat), and SMC started from
such draws counts not at all; the mixture run is judged by its own diagnostics. A search-vouched estimate that a
passing mixture estimate contradicts becomes doubtful. Where no other estimate exists (plain PSIS and the search
found nothing usable, SMC did not run or did not pass), a passing mixture estimate vouches alone (``"mixture"``):
its weights are bounded, so its variance is finite, and its own diagnostics passed (R-hat, ESS, divergences of the
mixture run; for vouching alone, also its parameters' R-hat: ``Opinion.alone``), and it is not above plain PSIS's
estimate by more than :data:`JENSEN_Z` of its SEs (plain importance sampling from the posterior is biased upward:
:func:`mixture_alone_ok`). The same where the only other estimates come from posterior draws that have not
converged: they vouch for nothing on their own, and their disagreement is no evidence against an estimate from draws
whose own diagnostics passed. Where credible estimates exist and disagree, a passing mixture estimate is reported,
still doubtful.

``res.evidence`` names what vouched: ``"psis"``, ``"adapted"`` (two transformations), ``"psis+mixture"``,
``"adapted+mixture"``, ``"psis+smc"``, ``"adapted+smc"``, ``"mixture+smc"``, ``"mixture"`` (alone), ``"refit"``;
``""`` where doubtful.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ppl_loo.numerics.loo import AGREE_Z, PLAIN_VOUCH_K
from ppl_loo.workflow.loo.messages import nats

__all__ = ["Opinion", "settle", "engine_candidates", "agree", "negligible", "mixture_alone_ok", "JENSEN_Z",
           "NEGLIGIBLE_NATS"]

#: a mixture estimate that vouches alone may be at most this many of its SEs above plain PSIS's (one-sided: 2.3%
#: of unbiased estimates are above an exact plain estimate; plain PSIS is biased upward, so fewer):
#: :func:`mixture_alone_ok`
JENSEN_Z = 2.0
#: two estimates of one ``elpd_i`` that are both within this many nats of 0 (a LOO predictive probability above
#: 0.99) never contradict each other, whatever their SEs: whichever is right, the observation moves ``elpd_loo`` by
#: less than this, a hundredth of the nat at which one ``elpd_i`` changes a comparison (``VOUCH_MAX_SE``), while the
#: SEs of estimates so close to 0 are often far smaller still and would call such a difference many SEs
NEGLIGIBLE_NATS = 0.01


class Opinion(NamedTuple):
    """An independent estimate per observation: ``elpd``, ``mcse`` and ``ok`` (it may vouch), over all ``n``;
    ``alone``: its run passed every diagnostic, its parameters' R-hat included, so that a passing estimate may
    vouch without a second one (the mixture run; :func:`settle`)."""

    name: str
    elpd: np.ndarray
    mcse: np.ndarray
    ok: np.ndarray
    alone: bool = False


def agree(a, sa, b, sb, z=AGREE_Z):
    """``|a - b| <= z * sqrt(sa^2 + sb^2)``, or both negligible (:func:`negligible`); False where anything is
    NaN."""
    with np.errstate(invalid="ignore"):
        return (np.abs(np.asarray(a) - np.asarray(b)) <= z * np.hypot(sa, sb)) | negligible(a, b)


def negligible(a, b):
    """Whether the estimates ``a`` and ``b`` of one ``elpd_i`` are both within :data:`NEGLIGIBLE_NATS` of 0, so
    that their disagreement cannot change any total (False where either is NaN)."""
    with np.errstate(invalid="ignore"):
        return (np.abs(np.asarray(a, dtype=float)) <= NEGLIGIBLE_NATS) & (np.abs(np.asarray(b, dtype=float))
                                                                           <= NEGLIGIBLE_NATS)


def _pooled(a, sa, b, sb):
    """The value two agreeing estimates vouch for, and its honest SE.

    The value is their precision-weighted mean. Its SE is not the textbook ``1 / sqrt(1/sa^2 + 1/sb^2)``, which
    holds only if neither estimate is biased, and the agreement test cannot see a bias smaller than what the less
    precise of the two resolves: on the truth suite's wide horseshoe (``benchmarks/truth``), searched estimates
    with SE 0.015 agreed with mixture estimates of SE 0.05 and, pooled at SE 0.014, were 3-6 SEs off the refits
    (15 silent failures of 76). So the SE is the larger of the two SEs with their difference added in quadrature:
    if one of them is biased by ``delta``, ``E[(a - b)^2] = delta^2 + sa^2 + sb^2``, and the precision-weighted
    mean, close to the narrower estimate, can carry nearly all of ``delta``. The exact-answer leverage models keep
    their errors (max 0.12 nats), since the values do not change.
    """
    wa, wb = 1.0 / np.maximum(sa, 1e-12) ** 2, 1.0 / np.maximum(sb, 1e-12) ** 2
    return (wa * a + wb * b) / (wa + wb), np.sqrt(np.maximum(sa, sb) ** 2 + (a - b) ** 2)


def mixture_alone_ok(elpd, se, plain_elpd, z=JENSEN_Z):
    """Whether a passing mixture estimate may vouch alone: not above plain PSIS's estimate from the posterior
    draws by more than :data:`JENSEN_Z` of its SEs (a NaN plain estimate does not object, nor one that with the
    mixture estimate is :func:`negligible`).

    Plain importance sampling from the posterior estimates ``exp(-elpd_i) = E_post[1 / p(y_i | theta)]`` by a
    sample mean, unbiased, so by Jensen's inequality its ``-log`` is biased upward: ``E[elpd_i plain] >=
    elpd_i`` (Pareto smoothing, which truncates the largest weights, only adds to it). A mixture estimate clearly
    above it has most likely under-sampled the part of the mixture where observation ``i``'s LOO posterior
    lives, a miss its own diagnostics cannot see. On the truth suite's wide horseshoe (a main fit with R-hat
    1.05), the one mixture estimate of 18 that vouched alone and was more than 3 combined SEs off the refits
    (+0.044 nats) was 2.6 of its SEs above plain PSIS; the others were at most 1.2 above it.
    """
    return bool(negligible(elpd, plain_elpd)) or not (np.isfinite(plain_elpd) and elpd > plain_elpd + z * se)


def engine_candidates(pw, plain, i, k_threshold):
    """The engine's estimates of observation ``i`` as second opinions, ``(name, elpd, se, label, k)``: the search's
    selected candidate where it passes every check with k-hat at most the threshold (corroborated or not), and
    plain PSIS where its k-hat is at most the threshold."""
    out = []
    if pw.identity_failed[i]:
        return out
    if np.isfinite(pw.cand_elpd[i]) and np.isfinite(pw.cand_se[i]):
        out.append(("adapted", pw.cand_elpd[i], pw.cand_se[i], tuple(pw.cand_label[i]), pw.cand_k[i]))
    if plain.k[i] <= k_threshold and np.isfinite(plain.elpd[i]) and np.isfinite(plain.mcse[i]):
        out.append(("psis", plain.elpd[i], plain.mcse[i], ("psis", np.nan), plain.k[i]))
    return out


def settle(pw, plain, k_threshold, opinions, converged):
    """Apply the rule to ``pw`` (a :class:`~ppl_loo.workflow.loo.verdict.Pointwise` after the search) in place.

    Parameters
    ----------
    pw : Pointwise
    plain : the plain-PSIS results (``k``).
    k_threshold : float
    opinions : list of Opinion
        The second opinions that ran, in order of preference (mixture first, then SMC).
    converged : bool or array of bool (n,)
        Whether the posterior draws converged, per observation (the draws of its log-likelihood).

    Returns
    -------
    (evidence, notes)
        ``evidence`` (n,) as in the module docstring; ``notes`` (n,): what the second opinions said where the
        observation stays doubtful (appended to ``res.reason``).
    """
    n = pw.elpd.shape[0]
    converged = np.broadcast_to(np.asarray(converged, bool), (n,))
    vouched = ~pw.doubtful & converged
    evidence = np.where(vouched, np.where(pw.use_adapted, "adapted", "psis"), "").astype(object)
    notes = np.full(n, "", dtype=object)
    for op in opinions:  # a passing second opinion that contradicts a search-vouched estimate: doubtful
        bad = vouched & op.ok & ~agree(pw.elpd, pw.mcse, op.elpd, op.mcse)
        for i in np.flatnonzero(bad):
            notes[i] = (f"{op.name} gives {nats(op.elpd[i])} ± {nats(op.mcse[i])}, against {evidence[i]} "
                        f"{nats(pw.elpd[i])} ± {nats(pw.mcse[i])}")
        vouched &= ~bad
        evidence[bad] = ""
    # what only two maps of the same draws vouch for where plain PSIS failed (k-hat above 0.5), and a passing
    # second opinion confirms: pooled, with the SE of :func:`_pooled`, since maps of the same draws can miss the
    # same part of the LOO posterior and agree with each other while both are off
    risky = vouched & (evidence == "adapted") & (np.asarray(plain.k, dtype=float) > PLAIN_VOUCH_K)
    for op in opinions:
        for i in np.flatnonzero(risky & op.ok & agree(pw.elpd, pw.mcse, op.elpd, op.mcse)):
            pw.elpd[i], pw.mcse[i] = _pooled(pw.elpd[i], pw.mcse[i], op.elpd[i], op.mcse[i])
            evidence[i] = f"adapted+{op.name}"
            risky[i] = False
    for i in np.flatnonzero(~vouched):
        _settle_one(pw, i, engine_candidates(pw, plain, i, k_threshold), opinions, bool(converged[i]), evidence,
                    notes, float(plain.elpd[i]))
    pw.doubtful[:] = evidence == ""
    return evidence.astype(str), notes.astype(str)


def _settle_one(pw, i, engine, opinions, converged, evidence, notes, plain_elpd):
    """The most precise agreeing pair for a doubtful observation ``i`` (the smallest SE of their pooled estimate):
    one of the engine's estimates with a second opinion, or two second opinions; else a passing mixture estimate
    alone where nothing else has an estimate (or only the unconverged draws do) and it is not above plain PSIS's
    (:func:`mixture_alone_ok`); else, still doubtful, the engine's estimate that passes every check where the draws
    converged or where the mixture estimate alone is the one in doubt, or the first passing second opinion's value."""
    cands = list(engine)
    best = None  # the agreeing pair whose pooled estimate is the most precise (the first such pair on a tie)
    for op in opinions:
        if not op.ok[i] or (op.name == "smc" and not converged):
            continue
        for name, e, s, label, k in cands:
            if agree(e, s, op.elpd[i], op.mcse[i]):
                value, se = _pooled(e, s, op.elpd[i], op.mcse[i])
                if best is None or se < best[1]:
                    best = (value, se, label, k, name, op.name)
        cands.append((op.name, op.elpd[i], op.mcse[i], (op.name, np.nan), np.nan))
    if best is not None:
        pw.elpd[i], pw.mcse[i], (pw.transform[i], pw.hbar[i]), pw.k[i] = best[:4]
        pw.use_adapted[i] = best[4] == "adapted"
        evidence[i] = f"{best[4]}+{best[5]}"
        return
    passing = [op for op in opinions if op.ok[i] and (op.name != "smc" or converged)]
    if not passing:
        return
    if passing[0].name == "mixture":
        pw.elpd[i], pw.mcse[i], pw.transform[i], pw.hbar[i] = passing[0].elpd[i], passing[0].mcse[i], "mixture", np.nan
        pw.use_adapted[i], pw.k[i] = False, np.nan
        # nothing else has an estimate, or only the unconverged draws (which vouch for nothing on their own, so
        # their disagreement is no evidence against the mixture run): nothing credible contradicts the mixture's
        if len(passing) == 1 and (not engine or not converged):
            mix = passing[0]
            if mix.alone and mixture_alone_ok(mix.elpd[i], mix.mcse[i], plain_elpd):
                evidence[i] = "mixture"
                return
            why = (f"above plain PSIS's {nats(plain_elpd)} by more than {JENSEN_Z:g} SEs, which importance sampling "
                   "from the posterior draws overestimates: the mixture run likely missed part of the LOO posterior"
                   if mix.alone else "the mixture run's parameters have not all converged (R-hat), so it vouches "
                   "only where a second estimate agrees")
            notes[i] = "; ".join([f"mixture {nats(mix.elpd[i])} ± {nats(mix.mcse[i])} alone: {why}"] + _said(engine))
            if engine:  # the value shown is not the one this note doubts: the engine's, even from unconverged draws
                _show_engine(pw, i, engine[0])
            return
    if engine and converged:  # still doubtful: the value shown is the engine's estimate that passes every check
        _show_engine(pw, i, engine[0])
    said = "; ".join([f"{op.name} {nats(op.elpd[i])} ± {nats(op.mcse[i])}" for op in passing] + _said(engine))
    notes[i] = f"no two independent estimates agree ({said})"


def _show_engine(pw, i, candidate):
    """Show the engine's estimate ``candidate`` (``(name, elpd, se, (transform, hbar), k)``) for observation ``i``."""
    name, e, s, label, k = candidate
    pw.elpd[i], pw.mcse[i], (pw.transform[i], pw.hbar[i]), pw.k[i] = e, s, label, k
    pw.use_adapted[i] = name == "adapted"


def _said(engine):
    """The engine's estimates of one observation, in words."""
    return [f"{name} {nats(e)} ± {nats(s)}" for name, e, s, _, _ in engine]
