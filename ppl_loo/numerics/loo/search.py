"""The per-observation search and its compiled map over observations (Chang et al. v3 section 3.6, "AdaptiveIS(i)").

``prepare`` computes the per-run block statistics once; ``search`` builds the candidate table of
one observation (:mod:`ppl_loo.numerics.loo.candidates`), runs the known-answer checks
(:mod:`ppl_loo.numerics.loo.checks`) and selects the candidate to report
(:mod:`ppl_loo.numerics.loo.selection`); :func:`mapped_search` jit-compiles it once and maps it
over the flagged observations in vectorized chunks.
"""


from typing import NamedTuple

import jax
import jax.numpy as jnp

from ppl_loo.numerics.loo.candidates import CandidateTable, candidate_table
from ppl_loo.numerics.loo.checks import (
    candidate_checks,
    chain_se,
    change_of_variables_check,
    mcse_log_mean,
    per_chain_elpd,
)
from ppl_loo.numerics.loo.config import EngineConfig, groups_of
from ppl_loo.numerics.loo.context import EngineData, SearchContext, block_stats, embed, obs_context, search_context
from ppl_loo.numerics.loo.mm_iter import mm_iter_states
from ppl_loo.numerics.loo.proposals import make_proposal
from ppl_loo.numerics.loo.selection import select_candidate
from ppl_loo.numerics.loo.weights import psis_identity
from ppl_loo.numerics.transforms import DiagAffine, dense

__all__ = ["ObsResult", "build_engine", "mapped_search", "search_observation", "observation_result",
           "candidate_points"]


class ObsResult(NamedTuple):
    """Per-observation output of the search (arrays carry a leading observation axis when mapped)."""

    k: jnp.ndarray  # (C,) score: max of the k-hats of the weights and of the elpd numerator
    k_w: jnp.ndarray  # (C,) k-hat of the weights alone (the papers' criterion)
    elpd: jnp.ndarray  # (C,) elpd_i of every candidate
    usable: jnp.ndarray  # (C,) map invertible at every draw and transformation applicable
    n_noninvertible: jnp.ndarray  # (C,) draws with signed det <= 0
    best: jnp.ndarray  # () index of the chosen candidate
    lw: jnp.ndarray  # (2S,) smoothed log weights of the chosen candidate over [draws, images]
    ll_phi: jnp.ndarray  # (2S,) log-likelihood of i at [draws, images] (draw part unused: -inf weight)
    mcse: jnp.ndarray  # (C,) Monte Carlo SE of every candidate's elpd_i
    ess: jnp.ndarray  # (C,) effective sample size 1 / sum w^2 of every candidate's smoothed weights
    max_log_ratio: jnp.ndarray  # (C,) max over points of log p(x | D) / q(x) (0 where not checked)
    identity_ok: jnp.ndarray  # (C,) the change-of-variables check passed (or does not apply)
    log_mean_ratio: jnp.ndarray  # (C,) log of the mean over points of p(x | D) / q(x) (exactly 0 in expectation)
    se_log_mean_ratio: jnp.ndarray  # (C,) its Monte Carlo standard error (delta method)
    elpd_chains: jnp.ndarray  # (C, n_chains) elpd_i of every candidate from each chain's points alone
    se: jnp.ndarray  # (C,) reported Monte Carlo SE: the larger of ``mcse`` and the spread over chains
    dev: jnp.ndarray  # (C,) log mean ratio minus its exact expectation (0, or -log 2 for a mixture)
    checks_ok: jnp.ndarray  # (C,) the normalizer and the in-sample bound checks passed (``candidate_checks``)
    corroborated: jnp.ndarray  # () ``best`` passes every check and a candidate of another group agrees with it
    #: (``select_candidate``; a fact about the candidates, which the verdict weighs with the other evidence)
    se_best: jnp.ndarray  # () the reported SE of ``best``: its own, and the spread of the corroborated candidates
    tv: jnp.ndarray  # (C,) total variation between the weight each draw (and its image) carries and plain PSIS's


def observation_result(sc: SearchContext, ll0, tab: CandidateTable, is_mixture) -> ObsResult:
    """Checks, Monte Carlo errors and the selection over one observation's candidate table."""
    cfg, S = sc.cfg, sc.theta.shape[0]
    k = jnp.maximum(tab.k_w, tab.k_num)
    # k-hat judges the tail of the weights, not a collapse of their bulk: a map that sends most
    # draws where the LOO density is negligible can show a small k on the few that remain.
    ess = 1.0 / jnp.sum(jnp.exp(2.0 * tab.lw), axis=-1)
    max_log_ratio, identity_ok = change_of_variables_check(tab.ratio_max, tab.n_points, sc.posterior_draws)
    usable = (tab.applicable & (tab.n_bad == 0) & jnp.isfinite(k) & jnp.isfinite(tab.elpd) & (ess >= cfg.min_ess)
              & identity_ok)
    mcse = jax.vmap(mcse_log_mean, in_axes=(0, 0, None))(tab.lw, tab.ll_pool, cfg.r_eff)
    elpd_chains = per_chain_elpd(tab.log_w, tab.ll_pool, cfg.n_chains)
    se = jnp.maximum(mcse, chain_se(elpd_chains))
    dev = tab.lmr + jnp.where(jnp.asarray(is_mixture), jnp.log(2.0), 0.0)
    checks_ok = (candidate_checks(dev, tab.se_lmr, tab.elpd, mcse, ll0) if sc.posterior_draws
                 else jnp.ones_like(usable))
    _, _, lw_psis = psis_identity((sc.logp0 - ll0 - sc.log_q0)[None, :], ll0[None, :], cfg.r_eff)
    tv = 0.5 * jnp.sum(jnp.abs(jnp.exp(tab.lw[:, :S]) + jnp.exp(tab.lw[:, S:]) - jnp.exp(lw_psis)), axis=-1)
    best, corroborated, se_best = select_candidate(usable & checks_ok & (k <= cfg.k_threshold), usable, k, tab.elpd, se,
                                              dev, groups_of(cfg), tv)
    return ObsResult(k, tab.k_w, tab.elpd, usable, tab.n_bad, best, tab.lw[best], tab.ll_pool[best], mcse, ess,
                     max_log_ratio, identity_ok, tab.lmr, tab.se_lmr, elpd_chains, se, dev, checks_ok, corroborated,
                     se_best, tv)


def search_observation(sc: SearchContext, i, ll0) -> ObsResult:
    """Every candidate of observation ``i``, checked and selected (Chang et al. v3 section 3.6, "AdaptiveIS(i)").

    Parameters
    ----------
    sc : SearchContext
        The draws, their block statistics and the static pieces of the search.
    i : int or jax.Array
        Flat index of the observation (traced under :func:`mapped_search`).
    ll0 : jax.Array, shape ``(S,)``
        ``log l_i`` at the draws.

    Returns
    -------
    ObsResult
        Every candidate's scores and checks, the chosen one's weights and whether it is corroborated.
    """
    tab, is_mixture = candidate_table(sc, i, ll0)
    return observation_result(sc, ll0, tab, is_mixture)


def candidate_points(sc: SearchContext, i, ll0, full_name, step):
    """Pooled points ``[theta; phi]`` (shape ``(2S, d)``) of one candidate, matching ``ObsResult.lw``."""
    theta = sc.theta
    if full_name == "mm_iter":
        A, R, _, _ = mm_iter_states(sc, i, jnp.asarray(ll0), int(step))
        phi = theta + dense(embed(sc, DiagAffine(A[-1], R[-1] - 1.0)), theta)
        return jnp.concatenate([theta, phi], axis=0)
    steps = jnp.asarray([step], dtype=theta.dtype)
    prop, _, _ = make_proposal(sc, full_name, i, jnp.asarray(ll0), obs_context(sc, jnp.asarray(ll0)), steps)
    phi = theta + step * dense(embed(sc, prop.delta), theta)
    return jnp.concatenate([theta, phi], axis=0)


def build_engine(model, cfg: EngineConfig, posterior_draws=True, log_q_fn=None):
    """Return ``search(data, i, ll0) -> ObsResult`` and ``points(data, i, ll0, name, step)``.

    Parameters
    ----------
    model : PosteriorModel
        JAX-traceable model (``model.is_jax``), used only through ``adapt_index``, ``structure``,
        ``factorizes``, ``logp``, ``loglik_i``, ``loo_logp``, ``has_var_target``,
        ``log_var_target`` and ``line_eval``.
    cfg : EngineConfig
    posterior_draws : bool
        True for draws from the posterior itself. For draws from an approximation, mixture
        proposals (``*_mix``) need the approximation's log density as a function.
    log_q_fn : callable, optional
        ``log q(theta)`` of one unconstrained draw (JAX), for draws from an approximation.

    Returns
    -------
    search : callable
        ``search(data, i, ll0) -> ObsResult``; ``search.prepare(data)`` fills ``data.stats`` once
        per run (:func:`mapped_search` calls it outside the map over observations).
    points : callable
        ``points(data, i, ll0, full_name, step)``: the pooled points of one candidate.

    The draws enter as an :class:`EngineData` argument (never as closure constants, which XLA
    would try to constant-fold), so one compilation serves every observation.
    """

    def prepare(data: EngineData) -> EngineData:
        """``data`` with its :class:`BlockStats` filled (call once, outside the map over observations)."""
        return data if data.stats is not None else data._replace(stats=block_stats(model, data))

    def context(data):
        return search_context(model, cfg, posterior_draws, log_q_fn, prepare(data))

    def search(data, i, ll0):
        return search_observation(context(data), i, ll0)

    def points(data, i, ll0, full_name, step):
        return candidate_points(context(data), i, ll0, full_name, step)

    search.prepare = prepare
    return search, points


def mapped_search(search, batch_size=1):
    """``f(data, idx, cols)``: ``search`` jit-compiled and mapped over observations ``idx``.

    ``cols`` holds each observation's log-likelihood at the draws, shape ``(len(idx), S)``. The map
    is vectorized in chunks of ``batch_size`` observations (``jax.lax.map``), trading memory for
    speed.
    """
    prepare = getattr(search, "prepare", lambda data: data)

    def run(data, idx, cols):
        data = prepare(data)  # per-run statistics once, not once per observation
        return jax.lax.map(lambda a: search(data, a[0], a[1]), (idx, cols), batch_size=batch_size)

    return jax.jit(run)
