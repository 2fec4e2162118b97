"""``pl.loo_subsample(data, model)``: the subsample's elpd_loo_i as :func:`ppl_loo.loo` reports them (plain
PSIS, the adaptive search on the flagged observations of the subsample, ``doubtful`` where neither can be
vouched for), the model's log-likelihood evaluated at the subsample only (and at the posterior mean for
``approximation="plpd"``)."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import xarray as xr
from scipy.special import logsumexp

from ppl_loo.adapters.as_model import as_model
from ppl_loo.numerics.loo import EngineConfig, candidate_labels
from ppl_loo.numerics.psis import khat_threshold
from ppl_loo.workflow.loo.adapt import Candidates, check_transforms, run_search
from ppl_loo.workflow.loo.draws import LooDraws
from ppl_loo.workflow.loo.inputs import (
    MIN_DRAWS,
    SAMPLE_DIMS,
    align_obs_dims,
    check_finite,
    check_posterior_draws,
    get_log_likelihood,
    identical_chains,
    max_rhat_of,
    obs_labels,
    stan_labelled,
)
from ppl_loo.workflow.loo.loo import DEFAULT_TRANSFORMS, check_hbar
from ppl_loo.workflow.loo.messages import warn_doubtful, warn_identical_chains, warn_plain, warn_unconverged
from ppl_loo.workflow.loo.plain import flag_observations, logmeanexp, plain_psis, pointwise_reasons
from ppl_loo.workflow.loo.verdict import RHAT_NOT_MIXED, Evidence, Rules, convergence, verdict
from ppl_loo.workflow.subsample.estimate import choose_observations, combine, lpd_of, make_result, select_columns
from ppl_loo.workflow.subsample.plain import sample_r_eff

__all__ = ["model_subsample", "SubsampleColumns"]

#: groups of DataTrees whose draws come from an approximation (pl.pvi, pl.laplace, pl.qnvb, CmdStan variational)
_APPROX_GROUPS = ("pvi", "laplace", "qnvb", "variational")
_OFF_MODEL = "The draws may be outside the model's support or from a different model."


class SubsampleColumns:
    """The ``(S, n)`` log-likelihood of which only the subsample's columns are held: ``ll[:, i]`` for flat
    observation indices ``i`` of the subsample (what :func:`~ppl_loo.workflow.loo.adapt.run_search` reads)."""

    def __init__(self, values, idx, n):
        self.values, self.shape = values, (values.shape[0], int(n))
        self._order = np.argsort(idx)
        self._sorted = np.asarray(idx)[self._order]

    def __getitem__(self, key):
        rows, cols = key
        pos = np.searchsorted(self._sorted, np.asarray(cols))
        if np.any(pos >= self._sorted.size) or np.any(self._sorted[np.minimum(pos, self._sorted.size - 1)] != cols):
            raise IndexError("SubsampleColumns: an observation outside the subsample was asked for.")
        return self.values[rows][:, self._order[pos]]


def model_subsample(data, model, observations, approximation, estimator, var_name, seed, reff, k_threshold, opts):
    """The model path of :func:`ppl_loo.loo_subsample` (``opts``: the adaptive search's options)."""
    for group in _APPROX_GROUPS:
        if group in data.children:
            raise ValueError(f"data: its draws come from an approximation (group {group!r}); pl.loo_subsample "
                             "weights draws as posterior (MCMC) draws. Use pl.loo(data, model) for these draws.")
    check_posterior_draws(data)
    pairs = identical_chains(data)
    if pairs:
        warn_identical_chains(pairs)
    if opts["adapt"] not in ("auto", "all", "flagged", "none"):
        raise ValueError(f"search: adapt={opts['adapt']!r}: use 'auto', 'all', 'flagged' or 'none'.")
    names = check_transforms(opts["transforms"], DEFAULT_TRANSFORMS)
    hbar = check_hbar(opts["hbar"])
    model = as_model(model, var_name=var_name, data=data)
    var_name = var_name or model.var_name
    theta = np.asarray(model.unconstrain(data["posterior"].to_dataset()), dtype=np.float64)
    check_finite(theta, "the unconstrained posterior draws", "Check the posterior group for NaN/inf draws.")
    S, n = theta.shape[0], int(model.n_obs)
    if S < MIN_DRAWS:
        raise ValueError(f"only {S} posterior draws: PSIS needs at least {MIN_DRAWS} (use hundreds).")
    theta_j = jnp.asarray(theta)
    ref0 = _template(data, var_name, model, n)
    approx_all = _approximation(data, model, theta_j, approximation, var_name, n)
    idx, counts = choose_observations(observations, n, estimator, seed, approx_all)
    ll = _log_lik_columns(model, theta_j, idx, n)
    check_finite(ll, f"the pointwise log-likelihood {var_name!r} at the subsample", _OFF_MODEL)
    _compare_stored(data, var_name, model, n, idx, ll)
    logp0, grad = model.log_density_and_grad(theta_j)
    check_finite(np.asarray(logp0), "the model's log density at the posterior draws", _OFF_MODEL)
    r_eff = sample_r_eff(data, S, reff, f"log_likelihood[{var_name!r}]")
    n_chains = int(data["posterior"].sizes.get("chain", 1))
    draws = LooDraws(theta, logp0, grad, ll, logp0, None, False, r_eff, n_chains, var_name)
    k_thr = khat_threshold(S) if k_threshold is None else float(k_threshold)
    cfg = EngineConfig(tuple(names), hbar, float(r_eff), opts["jacobian"],
                       min_ess=min(100.0, S / 10.0) if opts["min_ess"] is None else float(opts["min_ess"]),
                       n_chains=n_chains, k_threshold=float(k_thr))
    plain, flagged, results, cands = _search(model, draws, cfg, idx, n, opts)
    pw, reason = _vouch(draws, plain, flagged, results, cfg, data, opts["adapt"] == "none", model)
    _warn_doubtful(pw, ref0, idx, reason, k_thr, opts["adapt"] == "none")
    elpd, sub_se, se, p = combine(estimator, pw.elpd, logmeanexp(ll) - pw.elpd, approx_all, idx, counts, n)
    pointwise = {"elpd_i": (pw.elpd, np.nan), "pareto_k": (pw.k, np.nan), "p_loo_i": (logmeanexp(ll) - pw.elpd,
                 np.nan), "pareto_k_psis": (plain.k, np.nan), "mcse_elpd_i": (pw.mcse, np.nan),
                 "transform": (pw.transform.astype(str), ""), "doubtful": (pw.doubtful, False),
                 "reason": (reason, ""), "searched": (flagged, False)}
    summary = dict(elpd=elpd, se=se, subsampling_se=sub_se, p=p, n_samples=S, warning=bool(np.any(pw.doubtful)),
                   good_k=k_thr, estimator=estimator, approximation=approximation, var_name=var_name,
                   adapted=bool(flagged.any()), candidates=cands.as_dict())
    return make_result(ref0, idx, counts, approx_all, pointwise, summary)


def _search(model, draws, cfg, idx, n, opts):
    """Plain PSIS on the subsample, then the adaptive search on its flagged observations (positions in
    the subsample; the engine sees their flat indices and reads their columns of the log-likelihood)."""
    S = draws.ll.shape[0]
    plain = plain_psis(draws)
    adapt = opts["adapt"]
    if adapt == "none":
        flagged = np.zeros(len(idx), bool)
    else:
        flagged = flag_observations(plain, S, cfg.k_threshold, adapt, opts["influence_threshold"], n_total=n)
    pos = np.flatnonzero(flagged)
    cols = draws._replace(ll=SubsampleColumns(draws.ll, idx, n))
    results = run_search(model, cols, cfg, idx[pos], opts["batch_size"], opts["progressbar"],
                         opts.get("client", False)) if pos.size else []
    cands = Candidates.empty(candidate_labels(cfg), len(idx), draws.n_chains, len(pos), S)
    for j, (i, r) in enumerate(zip(pos, results)):
        cands.record(i, j, r, False)
    return plain, flagged, dict(zip(pos.tolist(), results)), cands


def _vouch(draws, plain, flagged, results, cfg, data, no_search, model=None):
    """The verdict on the subsample as :func:`ppl_loo.loo` gives it without second opinions (plain PSIS's rule with
    ``adapt="none"``): ``(verdict, reason)``."""
    max_rhat, where = max_rhat_of(data, stan_labelled(data, model))
    conv = convergence(draws.ll, draws.n_chains, max_rhat, where)
    ev = Evidence(plain, conv, flagged).with_search(results, candidate_labels(cfg))
    v = verdict(ev, Rules(cfg.k_threshold, cfg.min_ess, cfg.r_eff, False))
    reason = v.reason
    if no_search:
        doubtful, plain_reason = pointwise_reasons(plain.k, cfg.k_threshold, plain.log_ratios, plain.elpd)
        doubtful = np.asarray(doubtful, bool) & conv.ok
        reason = np.where(doubtful, plain_reason, reason).astype(str)
        v = v._replace(doubtful=v.doubtful | doubtful, transform=np.where(doubtful, "failed", v.transform))
    if v.doubtful.all() and (~conv.ok).all() and max_rhat > RHAT_NOT_MIXED:
        warn_unconverged(max_rhat, where, int(v.doubtful.sum()))
    return v, reason


def _warn_doubtful(pw, ref0, idx, reason, k_threshold, no_search):
    bad = np.flatnonzero(pw.doubtful)
    if not bad.size or bad.size == pw.doubtful.size and "converged" in reason[bad[0]]:
        return
    if no_search:  # plain PSIS on the subsample: the message of pl.loo(data), at the flat indices of the data
        n = int(np.prod(ref0.shape)) if ref0.ndim else 1
        k, doubtful, why = np.full(n, np.nan), np.zeros(n, bool), np.full(n, "", dtype=object)
        k[idx], doubtful[idx], why[idx] = pw.k, pw.doubtful, reason
        warn_plain(ref0, k, doubtful, why, k_threshold)
        return
    which = "; ".join(f"{obs_labels(ref0, [idx[j]])}: {reason[j]}" for j in bad[:5])
    warn_doubtful(pw, k_threshold, which + (f"; and {bad.size - 5} more" if bad.size > 5 else ""))


def _stored(data, var_name, model, n):
    """The stored log-likelihood DataArray of ``var_name`` in the model's dim order, if it fits ``n``."""
    try:
        da = get_log_likelihood(data, var_name)
    except ValueError:
        return None
    if da is None or int(np.prod([da.sizes[d] for d in da.dims if d not in SAMPLE_DIMS])) != n:
        return None
    return align_obs_dims(da, model.obs_dims, f"log_likelihood[{da.name!r}]")


def _compare_stored(data, var_name, model, n, idx, ll):
    """Warn when the stored log-likelihood of the subsample differs from the model's at the same draws (the
    tolerance of :func:`~ppl_loo.workflow.loo.draws.compare_log_lik`: 1e-6 relative, or the CSV's digits)."""
    stored = _stored(data, var_name, model, n)
    if stored is None:
        return
    arr = np.asarray(select_columns(stored, idx).values, dtype=np.float64).reshape(ll.shape)
    sig = getattr(data, "attrs", {}).get("sig_figs")
    rtol = 10.0 ** (2 - int(sig)) if sig is not None and 0 < int(sig) < 15 else 1e-6
    diff = float(np.nanmax(np.abs(arr - ll)))
    if diff > rtol * (1.0 + float(np.nanmax(np.abs(ll)))):
        warnings.warn(f"the stored log_likelihood[{var_name!r}] differs from the model's by up to {diff:.3g} at the "
                      "same draws (on the subsample); ppl_loo uses the model's values. Check that the model and its "
                      "data are the ones that produced the draws.", UserWarning, stacklevel=4)


def _template(data, var_name, model, n):
    """A DataArray over the observation dims (the stored log-likelihood's, else the model's)."""
    da = _stored(data, var_name, model, n)
    if da is not None:
        return da.isel(chain=0, draw=0, drop=True).rename(var_name)
    shape = tuple(model.obs_shape) if model.obs_shape else (n,)
    dims = tuple(model.obs_dims)[: len(shape)] if len(model.obs_dims or ()) >= len(shape) else tuple(
        f"{var_name}_dim_{j}" for j in range(len(shape)))
    mc = model.coords or {}
    coords = {d: np.asarray(mc[d]) for d, k in zip(dims, shape) if d in mc and len(mc[d]) == k}
    return xr.DataArray(np.zeros(shape), dims=dims, coords=coords, name=var_name)


def _log_lik_columns(model, theta_j, idx, n, max_values=2**25):
    """``(S, m)`` log-likelihood of the subsample, by chunks of draws: the adapters evaluate every observation
    before selecting, so a chunk holds at most ``max_values`` values (256 MB)."""
    S = theta_j.shape[0]
    step = int(max(1, min(S, max_values // max(n, 1))))
    obs = jnp.asarray(idx)
    parts = [np.asarray(model.log_lik(theta_j[s:s + step], obs=obs), dtype=np.float64) for s in range(0, S, step)]
    return np.concatenate(parts, axis=0)


def _lpd_from_model(model, theta_j, n, max_values=2**25):
    """``log mean_s p(y_i | theta_s)`` from the model's log-likelihood, by chunks of draws of at most
    ``max_values`` values (256 MB), so that ``S x n`` is never held at once."""
    S = theta_j.shape[0]
    step = int(max(1, min(S, max_values // max(n, 1))))
    acc = None
    for start in range(0, S, step):
        part = logsumexp(np.asarray(model.log_lik(theta_j[start:start + step]), dtype=np.float64), axis=0)
        acc = part if acc is None else np.logaddexp(acc, part)
    return acc - np.log(S)


def _approximation(data, model, theta_j, approximation, var_name, n):
    """elpd_loo approximation of every observation: ``"lpd"`` from the stored log-likelihood (else the
    model's at every draw), ``"plpd"``: the model's log-likelihood at the posterior mean (the mean of the
    constrained draws, as ``arviz_stats`` and R ``loo``)."""
    if approximation == "lpd":
        stored = _stored(data, var_name, model, n)
        values = lpd_of(stored) if stored is not None else _lpd_from_model(model, theta_j, n)
    else:
        post = data["posterior"].to_dataset()
        mean = post.mean(SAMPLE_DIMS).expand_dims(chain=[0], draw=[0])
        theta_bar = np.asarray(model.unconstrain(mean), dtype=np.float64)
        values = np.asarray(model.log_lik(jnp.asarray(theta_bar)), dtype=np.float64)[0]
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    check_finite(values, f"the {approximation!r} approximation of {var_name!r}", _OFF_MODEL)
    return values
