"""``LooResult``: an ``arviz_stats`` ``ELPDDataLOO`` with the pointwise extras of adaptive LOO."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr
from arviz_stats.utils import ELPDDataLOO
from xarray import DataArray

from ppl_loo.workflow.loo.categories import CATEGORIES, SHORT, category_counts, observation_categories
from ppl_loo.workflow.loo.inputs import RHAT_NOT_MIXED, RHAT_VOUCH, obs_label_list, with_stan_labels
from ppl_loo.workflow.loo.messages import nats

__all__ = ["LooResult", "loo_datatree"]

#: DataArrays over the observation dims, written as variables of the result's node
POINTWISE = ("elpd_i", "p_loo_i", "pareto_k", "pareto_k_psis", "transform", "hbar_used", "mcse_elpd_i", "n_eff_i",
             "influence", "doubtful", "reason", "refit", "searched", "influence_pareto_k", "approx_ok", "evidence")
#: DataArrays over other dims (draws, adapted observations)
WEIGHTS = ("log_weights", "log_q", "adapted_log_weights", "kept_draws", "kept_log_weights")
#: summary numbers and strings, written as attrs (None as "", booleans as 0/1)
SUMMARY = {"elpd": float, "se": float, "p": float, "good_k": float, "n_samples": int, "n_data_points": int,
           "warning": bool, "scale": str, "approx_posterior": bool, "max_rhat": float, "max_rhat_var": str,
           "var_name": str, "approximation": str, "pareto_k_q": float, "stan_labels": bool, "n_params": int,
           "conventions": str}


@dataclass(kw_only=True, repr=False)
class LooResult(ELPDDataLOO):
    """Adaptive PSIS-LOO-CV result.

    Works everywhere an ``arviz_stats`` LOO result does (``arviz_stats.compare``, printing), and
    carries pointwise extras as DataArrays over the observation dims of the log-likelihood
    variable:

    - ``elpd_i``, ``p_loo_i``: pointwise elpd and effective number of parameters;
    - ``pareto_k``: k-hat after adaptation; ``pareto_k_psis``: k-hat of plain PSIS;
    - ``transform``: the transformation used (``"psis"`` where none was needed, ``"failed"``
      where none reached the threshold; then the lowest-k candidate is still used);
    - ``hbar_used``: its step (NaN for ``"psis"``; the damping for ``newton*``, the number of
      iterations for ``mm_iter``);
    - ``mcse_elpd_i``: Monte Carlo standard error of ``elpd_i``; ``n_eff_i``: effective sample
      size of its weights (times ``r_eff``); :attr:`mcse_elpd_loo`: the Monte Carlo SE of ``elpd_loo``
      (R ``loo``'s ``mcse_loo``, printed below the table);
    - ``influence``: posterior variance of the observation's log-likelihood, the
      non-k criterion that also triggers adaptation (see :func:`ppl_loo.loo`);
    - ``doubtful``: True where the engine cannot vouch for the estimate (``docs/method.md``,
      section 5: the rule and its effect on the ground-truth suite); such an observation's
      ``elpd_i`` is the plain PSIS value unless a refit replaced it. An observation whose log-likelihood draws
      have not converged (R-hat above 1.01 or bulk ESS below 100; every one when the parameters' ``max_rhat`` is
      above 1.1) is doubtful unless estimates from other draws settle it; so is one whose best estimate has an SE
      above 0.25 nats (``docs/method.md``, section 9);
    - ``reason``: why an observation is doubtful, in words (``""`` where nothing is wrong), e.g.
      ``"k-hat 1.10 above 0.70: ..."`` or ``"k-hat nan could not be estimated: 93% of the draws tie ..."``;
      every NaN or infinite ``elpd_i`` or ``pareto_k`` (other than ``-inf``: exactly uniform weights, a
      constant log-likelihood; and NaN ``pareto_k`` where no importance sampling gave ``elpd_i``: a refit, mixture
      or SMC estimate) has one, and ``warning`` is then True;
    - ``max_rhat``: the largest rank-normalized split R-hat over the posterior variables (NaN for
      draws of an approximation) and ``max_rhat_var``, where it is;
    - ``refit``: True where ``elpd_i`` comes from refitting the model without the observation
      (``pl.loo(..., refit=...)``); its ``pareto_k`` is NaN (no importance sampling; ``pareto_k_psis``
      keeps plain PSIS's); ``refit_info`` has each refit's sampler, its settings (``chains``, ``warmup``,
      ``draws``, ``adapt``), divergences, R-hats (``rhat_loglik`` of ``log p(y_i | theta)``, ``rhat_max`` of
      the parameters) and wall time;
    - ``searched``: True where the adaptive search examined the observation;
    - ``evidence``: what vouches for ``elpd_i`` (``docs/method.md``, section 8;
      :mod:`ppl_loo.workflow.loo.vouch.rule`): ``"psis"``, ``"adapted"`` (two transformations agree),
      ``"psis+mixture"``, ``"adapted+mixture"``, ``"mixture+smc"``, ``"adapted+smc"``, ``"psis+smc"``,
      ``"mixture"`` (the mixture estimate alone, where nothing credible contradicts it), ``"refit"``; ``""`` where
      the observation is doubtful. ``mixture_info`` / ``smc_info``: the diagnostics
      of the second opinions that ran (the mixture run's chains, draws, seconds, divergences, max R-hat, and per
      observation its estimate, SE and whether it passed its checks; SMC's particles, tempering steps,
      acceptance), None where they did not run;
    - ``n_params``: the number of parameters (the model's unconstrained dimension; None without a model):
      ``p_loo`` above it by more than twice its SE (:attr:`p_loo_se`) is, by the ``loo`` glossary (Vehtari et
      al.), likely a sign of a badly misspecified model, and :meth:`trust_lines` says so;
    - :attr:`categories` and :attr:`counts`: what happened to each observation, one category each (``"psis"``:
      plain PSIS alone; ``"adapted"``: the ``elpd_i`` shown came from an adapted proposal of the search, confirmed
      by a second opinion or not, i.e. ``evidence`` names ``"adapted"``; ``"second_opinion"``: mixture importance
      sampling or SMC vouched for it without an adapted proposal; ``"refit"``; ``"doubtful"``), the one definition
      of every count ``print(res)``, :func:`ppl_loo.compare` (``n_adapted``, ``n_second_opinion``, ``n_doubtful``,
      ``n_refit``), the HTML report and ``ppl-loo loo --json`` show;
    - ``stan_labels``: observations are named as Stan names them (``log_lik[8]``, 1-based, the CmdStan CSV column
      ``log_lik.8``) in messages and :meth:`obs_labels`, for draws from Stan; else by their coordinate values;
    - for draws of an approximation (``pl.laplace``, ``pl.qnvb``, ``pl.pvi``, or ``log_q=``):
      ``approximation`` (its method), ``pareto_k_q`` (k-hat of ``p / q`` over the draws: whether
      ``q`` is good enough as a proposal for the posterior itself, Yao et al. 2018; ``-inf`` when
      ``p / q`` is constant, i.e. ``q`` is the posterior; ``inf`` when one draw carries nearly all the
      weight and no tail can be fitted) and ``approx_ok``
      (per observation: the plain Eq. 13 weights ``p(theta | y_-i) / q(theta)`` have k-hat at most
      ``good_k``, so ``q`` alone was good enough there; elsewhere the adaptive proposals, the cavity
      proposals of the approximation, or ``refit=`` decide);
    - ``log_weights``: the plain-PSIS smoothed log weights over ``(chain, draw, *obs dims)`` (as
      ``arviz_stats.loo``); ``adapted_log_weights``: for each observation whose ``elpd_i`` uses an
      adapted proposal (coordinate ``adapted``: its flat index; ``adapted_transform``,
      ``adapted_hbar``: the proposal), its smoothed log weights over the ``2 S`` pooled points
      ``[draws; images]``; ``log_q``: the approximation's log density at the draws (draws of an
      approximation only); ``engine_config``: the search's settings as plain values. With the model,
      these rebuild the weighted points (:func:`ppl_loo.loo_expectations`, :func:`ppl_loo.loo_roc`).

    The result is plain data: it pickles, and :meth:`to_datatree` / :meth:`from_datatree` write and
    read it as a DataTree node (``pl.add_loo`` stores that node as group ``loo``), e.g. in a netCDF
    file.
    """

    pareto_k_psis: DataArray = None
    transform: DataArray = None
    hbar_used: DataArray = None
    mcse_elpd_i: DataArray = None
    influence: DataArray = None
    doubtful: DataArray = None
    reason: DataArray = None
    refit: DataArray = None
    refit_info: Any = None
    candidates: Any = None  # per-observation table of every (transform, hbar) k-hat and elpd_i
    max_rhat: float = float("nan")
    max_rhat_var: str | None = None
    var_name: str | None = None
    searched: DataArray = None
    adapted_log_weights: DataArray = None
    kept_draws: DataArray = None
    kept_log_weights: DataArray = None
    log_q: DataArray = None
    engine_config: dict | None = None
    approximation: str | None = None
    pareto_k_q: float = float("nan")
    approx_ok: DataArray = None
    evidence: DataArray = None
    mixture_info: Any = None
    smc_info: Any = None
    stan_labels: bool = False  # observations labelled as Stan does (log_lik[8], 1-based): draws from Stan
    n_params: int | None = None  # the model's unconstrained dimension (p_loo above it: misspecification)
    conventions: str | None = None  # plain PSIS-LOO's conventions ("arviz" or "R"); None for a result with a model

    _display_kind = "loo"

    def _header(self):
        header = super()._header()
        if self.transform is not None:
            header += "\n" + "\n".join(self.trust_lines())
        return header

    def _footer(self):
        footer = super()._footer()
        if self.mcse_elpd_i is not None and "\n------\n" in footer:
            footer = footer.replace("\n------\n", "\n------\n" + self.mcse_line() + "\n", 1)
        if self.pareto_k is None or self.good_k is None:
            return footer
        n_nan = int(np.isnan(np.asarray(self.pareto_k.values, dtype=float)).sum())
        if n_nan:
            footer += (f"\n{n_nan} observation(s) have no Pareto k-hat (NaN: elpd_i from a refit, mixture or SMC, "
                       "not importance sampling); the counts above are of the others")
        return footer

    @property
    def mcse_elpd_loo(self):
        """The Monte Carlo SE of ``elpd_loo``: ``sqrt(sum(mcse_elpd_i**2))`` (R ``loo``'s ``mcse_loo``; the
        observations' estimates use the same draws, and their errors are taken as independent, as R does). NaN where
        an observation is doubtful (R: NA where a k-hat is above the threshold): its Monte Carlo SE understates its
        error; NaN without pointwise values."""
        if self.mcse_elpd_i is None:
            return float("nan")
        if self.doubtful is not None and bool(np.any(self.doubtful.values)):
            return float("nan")
        se = np.asarray(self.mcse_elpd_i.values, dtype=np.float64).ravel()
        return float(np.sqrt(np.sum(se**2)))

    def mcse_line(self):
        """The line ``print(res)`` shows below the table, as R ``loo``'s print: ``"MCSE of elpd_loo is 0.12."``, or
        why there is none."""
        value = self.mcse_elpd_loo
        if np.isfinite(value):
            return f"MCSE of elpd_loo is {value:.2f}."
        if self.mcse_elpd_i is not None and self.doubtful is not None and bool(np.any(self.doubtful.values)):
            return ("MCSE of elpd_loo is NA: doubtful observations (res.reason) have Monte Carlo SEs that understate "
                    "their error.")
        return f"MCSE of elpd_loo is {value:.2f}."

    @property
    def categories(self):
        """What happened to each observation (flat, in the order of ``res.elpd_i.values.ravel()``), one of
        ``"psis"`` (plain PSIS alone), ``"adapted"`` (``elpd_i`` from an adapted proposal of the search: ``evidence``
        ``"adapted"``, ``"adapted+mixture"``, ``"adapted+smc"``), ``"second_opinion"`` (vouched for by mixture
        importance sampling or SMC without an adapted proposal), ``"refit"``, ``"doubtful"``
        (:func:`~ppl_loo.workflow.loo.categories.observation_categories`, the one rule behind every count that
        ``print(res)``, :func:`ppl_loo.compare`, the HTML report and ``ppl-loo loo --json`` show)."""
        return observation_categories(self)

    @property
    def counts(self):
        """``{category: number of observations}`` of :attr:`categories`, every category (zeros included): the
        counts ``print(res)``, :func:`ppl_loo.compare` (``n_adapted``, ...), the report and ``--json`` show."""
        return category_counts(self.categories)

    def counts_line(self):
        """The first line of :meth:`trust_lines`: the observations counted by :attr:`categories`."""
        counts = self.counts
        return (f"Adaptive importance sampling (ppl_loo), {sum(counts.values())} observations: "
                + ", ".join(f"{counts[k]} {CATEGORIES[k]}" for k in CATEGORIES))

    def trust_lines(self):
        """What was adapted, refit and doubtful (:meth:`counts_line`), which observations (:meth:`problem_lines`),
        and how much of ``elpd_loo`` the refit and doubtful ones carry."""
        elpd_i = np.asarray(self.elpd_i.values, dtype=float).ravel()
        cats = self.categories
        lines = [self.counts_line()]
        lines += self.problem_lines()
        lines += self.evidence_lines()
        for cat in ("refit", "doubtful"):
            mask = cats == cat
            if mask.any():
                part = float(elpd_i[mask].sum())
                lines.append(f"{int(mask.sum())} {CATEGORIES[cat]}: they carry {nats(part)} of elpd_loo "
                             f"{self.elpd:.2f} ({100 * part / self.elpd if self.elpd else float('nan'):.0f}%)")
        if self.approximation:
            ok = self._flag("approx_ok")
            lines.append(f"Draws from a {self.approximation} approximation q: k-hat of p/q {self.pareto_k_q:.2f}; "
                         f"q alone good enough (k of p(theta|y_-i)/q <= {self.good_k:.2f}) for {int(ok.sum())} of "
                         f"{ok.size} observations")
        lines += self.p_loo_lines()
        if self.max_rhat > RHAT_NOT_MIXED:
            lines.append(f"The draws have not mixed (R-hat {self.max_rhat:.3f} for {self.max_rhat_var}, above "
                         f"{RHAT_NOT_MIXED}): no estimate from them alone is vouched for.")
        elif self.max_rhat > RHAT_VOUCH:
            lines.append(f"The largest parameter R-hat is {self.max_rhat:.3f} ({self.max_rhat_var}), above "
                         f"{RHAT_VOUCH}: "
                         "the draws vouch only for observations whose log-likelihood draws converged.")
        if self._flag("doubtful").any() and self.conventions is not None:  # plain PSIS-LOO, without a model
            lines.append("Doubtful observations keep plain PSIS's estimate (res.reason says why); with the model, "
                         "pl.loo(data, model) adapts the importance-sampling proposal for them and checks it with "
                         "independent evidence, and refit='doubtful' refits the model without each.")
        elif self._flag("doubtful").any():
            lines.append("Doubtful observations keep the estimate from the posterior draws (plain PSIS or the "
                         "search's; the mixture estimate where only it passed its checks; res.reason gives every "
                         "estimate); pl.loo(..., refit='doubtful', random_seed=...) replaces them by exact refits.")
        return lines

    @property
    def looic(self):
        """R ``loo``'s ``looic``: ``-2 elpd_loo``."""
        return -2.0 * float(self.elpd)

    @property
    def se_looic(self):
        """R ``loo``'s SE of ``looic``: twice the SE of ``elpd_loo``."""
        return 2.0 * float(self.se)

    @property
    def estimates(self):
        """R ``loo``'s ``estimates`` table: rows ``elpd_loo``, ``p_loo``, ``looic``; columns ``Estimate``, ``SE``."""
        import pandas as pd

        return pd.DataFrame({"Estimate": [float(self.elpd), float(self.p), self.looic],
                             "SE": [float(self.se), self.p_loo_se, self.se_looic]},
                            index=["elpd_loo", "p_loo", "looic"])

    @property
    def p_loo_se(self):
        """The SE of ``p_loo``: ``sqrt(n)`` times the sample SD of ``p_loo_i`` (R ``loo``'s ``se_p_loo``)."""
        p_loo_i = getattr(self, "p_loo_i", None)
        if p_loo_i is None:
            return float("nan")
        vals = np.asarray(p_loo_i.values, dtype=float).ravel()
        return float(np.sqrt(vals.size) * np.std(vals, ddof=1)) if vals.size > 1 else float("nan")

    def p_loo_lines(self):
        """A line when ``p_loo`` exceeds the number of parameters ``n_params`` by more than twice its SE: the
        ``loo`` glossary (Vehtari et al.) reads ``p_loo`` well above ``p`` as a likely sign of a badly misspecified
        model; an excess within the Monte Carlo and sampling noise of ``p_loo`` says nothing."""
        p = self.n_params
        se = self.p_loo_se
        if p is None or not np.isfinite(self.p) or not self.p - p > 2 * (se if np.isfinite(se) else 0.0):
            return []
        n = self.n_data_points
        hint = (f" With p small relative to n = {n}, posterior predictive checks are likely to show it too; an "
                "overdispersed model or more structure (nonlinearity, a mixture) may help." if n and p < n / 5 else "")
        return [f"p_loo {self.p:.1f} (SE {se:.1f}) is above the model's {p} parameter(s) by {self.p - p:.1f}, more "
                "than twice its SE: by the loo glossary (Vehtari et al.), p_loo well above p is likely to indicate "
                f"that the model is badly misspecified.{hint}"]

    def obs_labels(self, idx=None, limit=None):
        """The user's labels of the flat observation indices ``idx`` (every observation when None):
        ``["log_lik[8]", ...]`` for Stan draws (1-based, the CSV column ``log_lik.8``), ``["y[obs_id='a']", ...]``
        (coordinate values) otherwise."""
        ref0 = self.elpd_i.rename(self.var_name or "")
        ref0 = with_stan_labels(ref0, self.stan_labels)
        if idx is not None:
            idx = [int(i) for i in np.atleast_1d(idx)][:limit]
        elif limit is not None:
            idx = list(range(min(int(limit), int(ref0.size))))
        return obs_label_list(ref0, idx)

    def pareto_k_ids(self, threshold=None, after=False):
        """Flat indices (0-based) of the observations whose Pareto k-hat is above ``threshold`` (default
        ``good_k``), as R's ``loo::pareto_k_ids``: plain PSIS's k-hat (``after=False``) or the k-hat of the
        estimate reported (``after=True``: the adapted proposal's; NaN, never above, for a mixture, SMC or
        refit estimate). :meth:`obs_labels` names them."""
        thr = self.good_k if threshold is None else float(threshold)
        k = self.pareto_k if after else (self.pareto_k_psis if self.pareto_k_psis is not None else self.pareto_k)
        kv = np.asarray(k.values, dtype=float).ravel()
        with np.errstate(invalid="ignore"):
            return np.flatnonzero(kv > thr)

    def pareto_k_table(self, after=False):
        """R ``loo``'s ``pareto_k_table``: how many observations (and what share) have a Pareto k-hat in
        ``(-Inf, good_k]`` (good), ``(good_k, 1]`` (bad) and ``(1, Inf)`` (very bad), as a pandas DataFrame with the
        columns ``count`` and ``pct``; plain PSIS's k-hat (``after=False``) or the reported estimate's
        (``after=True``), where a fourth row counts the estimates without one (a refit, mixture importance sampling
        or SMC: NaN k-hat)."""
        import pandas as pd

        k = self.pareto_k if after else (self.pareto_k_psis if self.pareto_k_psis is not None else self.pareto_k)
        kv = np.asarray(k.values, dtype=float).ravel()
        g = float(self.good_k)
        with np.errstate(invalid="ignore"):
            counts = {f"(-Inf, {g:.2f}] (good)": int(np.sum(kv <= g)),
                      f"({g:.2f}, 1] (bad)": int(np.sum((kv > g) & (kv <= 1))),
                      "(1, Inf) (very bad)": int(np.sum(kv > 1))}
        if after:
            counts["no k-hat (refit, mixture, SMC)"] = int(np.sum(np.isnan(kv)))
        table = pd.DataFrame({"count": list(counts.values())}, index=list(counts))
        table["pct"] = 100.0 * table["count"] / max(kv.size, 1)
        return table

    def problem_lines(self, limit=5):
        """The observations :meth:`flagged` (not plain PSIS alone: adapted, vouched by a second opinion, refit or
        doubtful; or plain PSIS's k-hat above the threshold), counted and the first ``limit`` named as the user
        names them, worst first (doubtful, refit, second opinion, adapted; by plain k-hat), with what became of
        each (the estimate reported, its SE, what vouches for it), then where to find the rest."""
        if self.transform is None:
            return []
        mask = self.flagged()
        if not mask.any():
            return []
        cats = self.categories
        k0 = np.asarray((self.pareto_k_psis if self.pareto_k_psis is not None else self.pareto_k).values,
                        dtype=float).ravel()
        order = [int(i) for cat in ("doubtful", "refit", "second_opinion", "adapted", "psis")
                 for i in sorted(np.flatnonzero(mask & (cats == cat)), key=lambda j: -np.nan_to_num(k0[j], nan=9.0))]
        elpd = np.asarray(self.elpd_i.values, dtype=float).ravel()
        se = np.asarray(self.mcse_elpd_i.values, dtype=float).ravel() if self.mcse_elpd_i is not None else None
        tr = np.asarray(self.transform.values).astype(str).ravel()
        ev = (np.asarray(self.evidence.values).astype(str).ravel() if self.evidence is not None else None)
        parts = []
        for i, label in zip(order[:limit], self.obs_labels(order, limit)):
            fate = SHORT[cats[i]] + (f": {ev[i]}" if ev is not None and ev[i] and cats[i] != "psis" else "")
            value = nats(elpd[i]) + (f" ± {nats(se[i])}" if se is not None and np.isfinite(se[i]) else "")
            parts.append(f"{label} (k {k0[i]:.2f} -> {tr[i]}, elpd_i {value}, {fate})")
        more = f"; and {len(order) - limit} more" if len(order) > limit else ""
        return [f"{len(order)} observation(s) not settled by plain PSIS alone or with plain Pareto k above "
                f"{self.good_k:.2f}: "
                + "; ".join(parts) + more + " (every one: res.summary_table(flagged_only=True))"]

    def evidence_lines(self):
        """How many observations each kind of evidence vouches for (``res.evidence``), and the mixture run."""
        if self.evidence is None:
            return []
        ev = np.asarray(self.evidence.values).astype(str).ravel()
        kinds, counts = np.unique(ev[ev != ""], return_counts=True)
        order = np.argsort(-counts, kind="stable")
        parts = ", ".join(f"{kinds[j]} {counts[j]}" for j in order)
        lines = [f"Vouched for: {int((ev != '').sum())} of {ev.size} observations" + (f" ({parts})" if parts else "")]
        info = self.mixture_info
        if info and "error" not in info:
            first = info.get("first_run")
            again = (f" (a second run: the first, of {first['draws']} draws per chain, failed its own checks)"
                     if first else "")
            lines.append(f"Mixture importance sampling: {info['chains']} chains x {info['draws']} draws in "
                         f"{info['seconds']:.1f} s{again}, max R-hat {info['max_rhat']:.3f}, {info['divergences']} "
                         f"divergences; its estimate passes its checks for {info['n_ok']} observations")
        elif info:
            lines.append(f"Mixture importance sampling failed: {info['error']}")
        if self.smc_info and "skipped" in self.smc_info:
            lines.append(f"Tempered SMC did not run: {self.smc_info['skipped']}")
        elif self.smc_info:
            lines.append(f"Tempered SMC on {len(self.smc_info['observations'])} observations "
                         f"({self.smc_info['particles']} particles): it passes its checks for {self.smc_info['n_ok']}")
        return lines

    def _flag(self, name):
        v = getattr(self, name, None)
        n = int(np.asarray(self.elpd_i.values).size)
        return np.zeros(n, bool) if v is None else np.asarray(v.values, bool).ravel()

    def flagged(self):
        """Flat mask of the observations :meth:`summary_table` keeps with ``flagged_only=True`` and
        :meth:`problem_lines` names: plain PSIS's k-hat above ``good_k``, or ``elpd_i`` not plain PSIS's alone
        (:attr:`categories` other than ``"psis"``: adapted, vouched by a second opinion, refit, doubtful; a
        ``transform`` other than ``"psis"``)."""
        n = int(np.asarray(self.elpd_i.values).size)
        mask = self._flag("doubtful") | self._flag("refit") | (self.categories != "psis")
        k = self.pareto_k_psis if self.pareto_k_psis is not None else self.pareto_k
        if k is not None and self.good_k is not None:
            with np.errstate(invalid="ignore"):
                mask |= np.asarray(k.values, dtype=float).ravel() > float(self.good_k)
        if self.transform is not None:
            mask |= np.asarray(self.transform.values).astype(str).ravel() != "psis"
        return mask.reshape(n)

    def summary_table(self, flagged_only=False):
        """A pandas DataFrame of the pointwise results, one row per observation, as R ``loo``'s ``pointwise``
        and ArviZ's ``loo_i`` / ``pareto_k``.

        Indexed by the observation's label (:meth:`obs_labels`: ``"y[obs=3]"``, ``"log_lik[8]"`` for Stan draws),
        in the order of ``res.elpd_i.values.ravel()``. Columns: ``pareto_k_psis`` (plain PSIS), ``pareto_k``
        (of the estimate reported; NaN where no importance sampling gave it: refit, mixture, SMC),
        ``transform``, ``hbar``, ``elpd_i``, ``mcse_elpd_i``, ``p_loo_i``, ``influence``, ``doubtful``,
        ``reason``, ``refit``, ``evidence`` (those the result has). ``attrs["summary"]``: :meth:`trust_lines`.

        Parameters
        ----------
        flagged_only : bool
            Keep only the flagged observations (:meth:`flagged`): plain PSIS's k-hat above ``good_k``,
            adapted, vouched by a second opinion, doubtful or refit.
        """
        import pandas as pd

        cols = {
            "pareto_k_psis": self.pareto_k_psis,
            "pareto_k": self.pareto_k,
            "transform": self.transform,
            "hbar": self.hbar_used,
            "elpd_i": self.elpd_i,
            "mcse_elpd_i": self.mcse_elpd_i,
            "p_loo_i": self.p_loo_i,
            "influence": self.influence,
            "doubtful": self.doubtful,
            "reason": self.reason,
            "refit": self.refit,
            "evidence": self.evidence,
        }
        index = pd.Index(self.obs_labels(), name="observation")
        df = pd.DataFrame({k: np.asarray(v.values).ravel() for k, v in cols.items() if v is not None}, index=index)
        if flagged_only:
            df = df[self.flagged()]
        df.attrs["summary"] = self.trust_lines() if self.transform is not None else []
        return df

    def to_datatree(self):
        """The result as a DataTree node of plain variables and attrs (see :func:`loo_datatree`)."""
        return loo_datatree(self)

    @classmethod
    def from_datatree(cls, data, group="loo"):
        """Rebuild a result written by :meth:`to_datatree` or :func:`ppl_loo.add_loo`.

        Parameters
        ----------
        data : xarray.DataTree or xarray.Dataset
            The node itself, or a tree with the node as child ``group`` (what ``pl.add_loo``
            returns, e.g. after ``DataTree.to_netcdf`` and ``xarray.open_datatree``).
        group : str
            The child to read when ``data`` is a tree holding it.

        Returns
        -------
        LooResult
        """
        ds = _node_dataset(data, group)
        attrs = ds.attrs
        kwargs = {name: _decode_array(ds[name]) for name in POINTWISE + WEIGHTS if name in ds.variables}
        for name, kind in SUMMARY.items():
            if name in attrs:
                value = attrs[name]
                kwargs[name] = (None if kind is str and name != "scale" and value == "" else
                                kind(np.asarray(value).item()))
        for name in ("engine_config", "refit_info", "mixture_info", "smc_info"):
            if name in attrs:
                kwargs[name] = json.loads(attrs[name])
        if kwargs.get("refit_info") is not None:
            kwargs["refit_info"] = {int(k): v for k, v in kwargs["refit_info"].items()}
        kwargs["candidates"] = _decode_candidates(ds)
        kwargs.setdefault("scale", "log")
        return cls(**kwargs)


def loo_datatree(res):
    """A LOO result as a DataTree node of plain data, enough to rebuild it.

    Variables: the pointwise results over the observation dims (``elpd_i``, ``pareto_k``,
    ``transform``, ...), the plain-PSIS ``log_weights`` over ``(chain, draw, *obs dims)``,
    ``adapted_log_weights`` (with coordinates ``adapted``, ``adapted_transform``,
    ``adapted_hbar``), ``log_q`` for draws of an approximation, and the candidates' table as
    ``cand_*`` over ``(cand_obs, cand)``. Attrs: ``elpd``, ``se``, ``p``, ``good_k``,
    ``n_samples``, ``n_data_points``, ``warning`` (0/1), ``scale``, ``approx_posterior`` (0/1),
    ``max_rhat``, ``max_rhat_var``, ``var_name`` (``""`` for none), ``engine_config`` and
    ``refit_info`` (JSON). Works for an ``arviz_stats`` LOO result too (the fields it has).

    Parameters
    ----------
    res : LooResult or arviz_stats.utils.ELPDData

    Returns
    -------
    xarray.DataTree
    """
    if getattr(res, "elpd_i", None) is None:
        raise ValueError("`res` has no pointwise results: pass a result of pl.loo (it always keeps them) or of "
                         "arviz_stats.loo(..., pointwise=True).")
    variables = {}
    for name in POINTWISE + WEIGHTS:
        val = getattr(res, name, None)
        if val is not None:
            variables[name] = (val if isinstance(val, xr.DataArray) else xr.DataArray(np.asarray(val))).rename(name)
    ds = xr.Dataset(variables).merge(_encode_candidates(getattr(res, "candidates", None)))
    for name, kind in SUMMARY.items():
        value = getattr(res, name, None)
        if value is not None or kind is str:
            ds.attrs[name] = int(value) if kind is bool else ("" if value is None else kind(value))
    for name in ("engine_config", "refit_info", "mixture_info", "smc_info"):
        value = getattr(res, name, None)
        if value is not None:
            ds.attrs[name] = json.dumps(value, default=_plain)
    ds.attrs["method"] = "ppl_loo adaptive importance sampling"
    return xr.DataTree(ds)


def _plain(value):
    """JSON fallback for NumPy scalars and arrays (``json.dumps(default=...)``)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in a LOO result: use numbers, strings or arrays.")


def _decode_array(da):
    """A stored variable as the result holds it: strings as ``str``, not ``object``."""
    da = da.copy()
    if da.dtype == object:
        da = da.astype(str)
    for name, coord in da.coords.items():
        if coord.dtype == object:
            da = da.assign_coords({name: coord.astype(str)})
    da.encoding = {}
    return da


def _encode_candidates(candidates):
    """The per-observation candidates' table as ``cand_*`` variables over ``(cand_obs, cand)``."""
    if not candidates:
        return xr.Dataset()
    labels = list(candidates["labels"])
    coords = {"cand_transform": ("cand", np.asarray([str(t) for t, _ in labels], dtype=str)),
              "cand_hbar": ("cand", np.asarray([float(h) for _, h in labels], dtype=float))}
    dims = ("cand_obs", "cand", "cand_chain")
    out = {f"cand_{key}": (dims[:np.ndim(val)], np.asarray(val)) for key, val in candidates.items() if key != "labels"}
    return xr.Dataset(out, coords=coords)


def _decode_candidates(ds):
    """The inverse of :func:`_encode_candidates` (None when the node has no candidates)."""
    if "cand_transform" not in ds.variables:
        return None
    names = np.asarray(ds["cand_transform"].values).astype(str)
    steps = np.asarray(ds["cand_hbar"].values, dtype=float)
    out = {"labels": [(str(t), float(h)) for t, h in zip(names, steps)]}
    for name in ds.data_vars:
        if name.startswith("cand_"):
            out[name[len("cand_"):]] = np.asarray(ds[name].values)
    return out


def _node_dataset(data, group):
    """The result's Dataset from its node, from a tree holding it as ``group``, or a Dataset."""
    if isinstance(data, xr.Dataset):
        return data
    if isinstance(data, xr.DataTree):
        node = data[group] if group in data.children and "elpd" not in data.attrs else data
        if "elpd" in node.attrs:
            return node.to_dataset()
    raise ValueError(f"no LOO result here: pass the node written by LooResult.to_datatree or pl.add_loo, or a tree "
                     f"with it as group {group!r} (e.g. xarray.open_datatree(path)).")
