"""Known-answer checks of a candidate and its Monte Carlo errors (``docs/method.md``, section 4).

The change-of-variables check, the normalizer and in-sample-bound checks, the delta-method
standard errors and the per-chain estimates whose spread is part of the reported SE.
"""


import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

__all__ = ["LOG_MARKOV_ALPHA", "NORMALIZER_Z", "NORMALIZER_TOL", "candidate_checks", "chain_se",
           "change_of_variables_check", "log_mean_ratio", "mcse_log_mean", "per_chain_elpd"]

# Change-of-variables check (this project). For draws from p and any invertible map T, the ratio
# r = p(T theta) |J_T(theta)| / p(theta) has mean exactly 1 (the unnormalized density's constant
# cancels), and so has p / q_mix over the pooled points of a mixture; by Markov's inequality a
# maximum over L points above L / alpha has probability at most alpha. A larger maximum proves that
# the draws are not distributed as the model's posterior in the direction of that map (unconverged
# or stuck chains, draws from another model) or that the Jacobian is wrong: its weights are not
# importance weights, whatever their k-hat says. alpha = 1e-6.
LOG_MARKOV_ALPHA = float(np.log(1e6))

#: the normalizer check's tolerance: standard errors of the log mean ratio, plus a negligible bias (nats)
NORMALIZER_Z = 3.0
NORMALIZER_TOL = 1e-3


def change_of_variables_check(raw_ratio_max, n_points, posterior_draws):
    """``(max_log_ratio, ok)`` per candidate; only for draws from the posterior (with draws
    from an approximation ``q`` the ratio's mean is the unknown normalizer of ``p``)."""
    if not posterior_draws:
        return jnp.zeros_like(raw_ratio_max), jnp.ones(raw_ratio_max.shape, bool)
    ok = ~(raw_ratio_max > jnp.log(n_points) + LOG_MARKOV_ALPHA)
    return jnp.where(jnp.isfinite(raw_ratio_max), raw_ratio_max, 0.0), ok


def mcse_log_mean(lw, ll, r_eff):
    """Delta-method Monte Carlo SE of ``log sum_k w_k l_k`` (self-normalized IS)."""
    w = jnp.exp(lw)
    lmax = jnp.max(jnp.where(jnp.isfinite(lw), ll, -jnp.inf))
    lik = jnp.exp(jnp.where(jnp.isfinite(lw), ll - lmax, -jnp.inf))
    est = jnp.sum(w * lik)
    var = jnp.sum(w**2 * (lik - est) ** 2) / r_eff
    return jnp.sqrt(var) / est


def log_mean_ratio(log_r, r_eff):
    """``log mean_x r(x)`` and its delta-method SE for log ratios ``(C, L)`` (``-inf`` allowed).

    For points from ``q`` and ``r = p / q`` the mean is exactly 1 in expectation (the normalizer
    of ``p`` cancels in the ratio of posterior densities), so the log mean is 0 up to Monte Carlo
    error: the self-normalized estimate divides this number out, and a value far from 0 shows a
    proposal that did not cover the posterior, or draws that do not represent it.
    """
    L = log_r.shape[-1]
    m = jnp.max(log_r, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    r = jnp.exp(log_r - m)
    mean = jnp.mean(r, axis=-1)
    sd = jnp.std(r, axis=-1)
    lmr = jnp.log(mean) + m[..., 0]
    se = sd / (mean * jnp.sqrt(L * r_eff))
    return lmr, se


def per_chain_elpd(lw, ll_pool, n_chains):
    """Each candidate's estimate from the points of one chain at a time, ``(C, n_chains)``.

    The pooled points are ``[draws; images]`` with the draws chain-major (an image belongs to the
    chain of its draw). ``lw`` are the *raw* log weights, renormalized within the chain: Pareto
    smoothing regularizes the tail and so hides the rare draw that one chain saw and the others
    did not, which is what the spread over chains is there to show.
    """
    C, L = lw.shape
    S = L // 2
    if n_chains < 2 or S % n_chains:
        return jnp.full((C, 1), jnp.nan)
    D = S // n_chains
    lw4 = lw.reshape(C, 2, n_chains, D).transpose(0, 2, 1, 3).reshape(C, n_chains, 2 * D)
    ll4 = ll_pool.reshape(C, 2, n_chains, D).transpose(0, 2, 1, 3).reshape(C, n_chains, 2 * D)
    return logsumexp(lw4 + ll4, axis=-1) - logsumexp(lw4, axis=-1)


def chain_se(elpd_chains):
    """Standard error of the mean of the per-chain estimates (0 with one chain)."""
    n = elpd_chains.shape[-1]
    if n < 2:
        return jnp.zeros(elpd_chains.shape[:-1])
    sd = jnp.std(elpd_chains, axis=-1, ddof=1)
    return jnp.where(jnp.isfinite(sd), sd, 0.0) / jnp.sqrt(n)


def candidate_checks(dev, se_dev, elpd, mcse, ll0):
    """Known-answer checks of a candidate (this project; ``docs/method.md``, section 4).

    - **Normalizer**: for draws from the posterior the mean of ``p(x | D) / q(x)`` over the points
      is exactly 1 (1/2 for a mixture as the engine writes its density): ``dev`` must be 0 within
      ``NORMALIZER_Z`` standard errors. The self-normalized estimate divides this mean out and
      hides it; a mean far from 1 means the points do not cover the posterior (or the draws do not
      represent it), and the candidate's elpd is then biased, optimistically in the truth suite.
    - **In-sample bound**: ``p(y_i | y_-i) <= p(y_i | y)`` exactly (``E_full[l] = E_-i[l^2] / E_-i[l]``),
      so ``elpd_i`` cannot exceed ``lpd_i = log mean_s l_i(theta_s)`` beyond its Monte Carlo error.
    """
    lpd = logsumexp(ll0) - jnp.log(ll0.shape[0])
    normalizer = jnp.abs(dev) <= NORMALIZER_Z * se_dev + NORMALIZER_TOL
    bound = elpd <= lpd + 2.0 * mcse
    return normalizer & bound
