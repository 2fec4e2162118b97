"""``ppl-loo demo``: the embedded demo.

``ppl-loo demo`` runs the whole workflow on the ovarian microarray data shipped in the package:
fit a Bayesian logistic regression with NUTS, run plain PSIS-LOO and adaptive LOO on the same
draws, and print the observations whose Pareto k was above the threshold, before and after.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import arviz_stats as azs
import jax
import numpy as np

import ppl_loo as pl
from ppl_loo.datasets import load_ovarian
from ppl_loo.models import LogisticRegression
from ppl_loo.sampling import sample_nuts
from ppl_loo.workflow.loo.inputs import RHAT_NOT_MIXED

__all__ = ["add_parser", "demo", "run"]


def _fmt_table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[j])) for r in rows)) if rows else len(str(h))
              for j, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(v).rjust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def demo(prior="horseshoe", chains=2, warmup=500, draws=500, random_seed=2024, max_tree_depth=None,
         transforms="all", progressbar=True, refit=False, mixture="auto", out=sys.stdout):
    """Fit the ovarian logistic regression, then plain PSIS-LOO vs adaptive LOO on the same draws, with
    ``mixture="auto"`` (:class:`~ppl_loo.SecondOpinions`) mixture importance sampling as a second opinion where the
    search alone cannot vouch (and, with ``refit=True``, exact LOO by refitting what is still doubtful)."""
    steps = 4 if refit else 3
    model, data, y, t_fit = _fit(prior, chains, warmup, draws, random_seed, max_tree_depth, progressbar, steps, out)
    print(f"[2/{steps}] plain PSIS-LOO", file=out, flush=True)
    plain = _quiet(pl.loo, data, None)
    print(f"[3/{steps}] adaptive importance-sampling LOO", file=out, flush=True)
    t1 = time.perf_counter()
    search, opinions = pl.SearchOptions(transforms=transforms), pl.SecondOpinions(mixture=mixture)
    res = _quiet(pl.loo, data, model, progressbar=progressbar, random_seed=random_seed, search=search,
                 second_opinions=opinions)
    t_loo = time.perf_counter() - t1
    _report(plain, res, y, out)
    mix = res.mixture_info.get("seconds") if res.mixture_info else None
    print(f"time: NUTS {t_fit:.0f} s, adaptive LOO {t_loo:.1f} s (JIT compile included"
          + (f"; of it the mixture run {mix:.0f} s)" if mix is not None else ")"), file=out)
    n_doubt = int(np.sum(res.doubtful.values))
    if refit and n_doubt:
        print(f"[4/{steps}] exact LOO for the {n_doubt} doubtful observations: refit without each of them "
              "(one batched NUTS run, warm-started from the fit)", file=out, flush=True)
        t2 = time.perf_counter()
        res = _quiet(pl.loo, data, model, progressbar=progressbar, refit="doubtful", random_seed=random_seed,
                     search=search, second_opinions=opinions)
        _report_refits(plain, res, time.perf_counter() - t2, out)
    elif n_doubt:
        print("exact LOO for the doubtful observations: ppl-loo demo --refit (pl.loo(data, model, "
              "refit='doubtful', random_seed=...) refits the model without each of them)", file=out)
    return res


def _quiet(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` without its warnings (the demo prints what they say)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _fit(prior, chains, warmup, draws, random_seed, max_tree_depth, progressbar, steps, out):
    """NUTS on the ovarian logistic regression; ``(model, data, y, seconds)``."""
    X, y = load_ovarian()
    n, p = X.shape
    print(f"ovarian microarray: n = {n} observations, p = {p} genes (standardized); "
          f"Bernoulli-logit regression with a {prior} prior", file=out)
    model = LogisticRegression(X, y, prior=prior)
    kw = {}
    if prior == "horseshoe":
        kw["numpyro_model"] = model.numpyro_model()
    if max_tree_depth is not None:
        kw["max_tree_depth"] = max_tree_depth
    t0 = time.perf_counter()
    print(f"[1/{steps}] NUTS: {chains} chains x ({warmup} warmup + {draws} draws), seed {random_seed} "
          f"(JAX on {jax.default_backend()})", file=out, flush=True)
    data = sample_nuts(model, num_chains=chains, num_warmup=warmup, num_samples=draws, random_seed=random_seed,
                       progressbar=progressbar, **kw)
    t_fit = time.perf_counter() - t0
    div = int(np.asarray(data["sample_stats"]["diverging"]).sum()) if "sample_stats" in data.children else -1
    post = data["posterior"].to_dataset()
    rhat = max(float(np.nanmax(v.values)) for v in azs.rhat(post).data_vars.values())
    ess = min(float(np.nanmin(v.values)) for v in azs.ess(post, method="bulk").data_vars.values())
    print(f"      done in {t_fit:.0f} s; divergences: {div}; max R-hat {rhat:.3f}, min bulk ESS {ess:.0f} "
          f"(a short demo run: use more warmup and draws for real work)", file=out)
    return model, data, y, t_fit


def _hbar_label(res, i):
    h = res.hbar_used.values[i]
    return "-" if np.isnan(h) or res.transform.values[i] == "failed" else f"4^-{int(round(-np.log(h) / np.log(4)))}"


def _report(plain, res, y, out):
    """The observations plain PSIS flagged, before and after, and the two totals."""
    thr, k0, n = res.good_k, res.pareto_k_psis.values, res.n_data_points
    bad = np.flatnonzero(k0 > thr)
    rows = [(int(i), int(y[i]), f"{k0[i]:.2f}", f"{res.pareto_k.values[i]:.2f}", str(res.transform.values[i]),
             _hbar_label(res, i), f"{plain.elpd_i.values[i]:.2f}", f"{res.elpd_i.values[i]:.2f}",
             "yes" if res.doubtful.values[i] else "") for i in bad]
    print(f"\nObservations with plain-PSIS Pareto k > {thr:.2f} ({len(bad)} of {n}):", file=out)
    print(_fmt_table(rows, ["obs", "y", "k psis", "k adapted", "transform", "hbar", "elpd_i psis",
                            "elpd_i adapted", "doubtful"]), file=out)
    extra = np.flatnonzero((k0 <= thr) & (res.transform.values != "psis"))
    if len(extra):
        print(f"\nAlso adapted for their influence on the posterior (k was fine): {extra.tolist()}", file=out)
    n_fail = int(np.sum(res.transform.values == "failed"))
    kw = np.nanmin(np.where(np.isnan(res.candidates["k_weights"]), np.inf, res.candidates["k_weights"]), axis=1)
    print(f"\nk > {thr:.2f}: plain PSIS {len(bad)}, adaptive {n_fail} without any proposal that passes every check "
          f"(k of the weights and of the elpd estimate, effective sample size >= {min(100, res.n_samples // 10)}, "
          "the normalizer and in-sample bounds)", file=out)
    print("papers' criterion (k of the weights alone <= 0.7 for some candidate): "
          f"{int(np.sum((k0 > 0.7) & (kw > 0.7)))} "
          f"of {int(np.sum(k0 > 0.7))} left", file=out)
    why = (f"the draws have not mixed, R-hat {res.max_rhat:.3f} for {res.max_rhat_var}: no estimate from them "
           "alone is vouched for" if res.max_rhat > RHAT_NOT_MIXED else
           "no two independent estimates agree, or none is precise enough: res.reason says what each gave")
    n_doubt = int(np.sum(res.doubtful.values))
    print(f"doubtful: {n_doubt} observations" + (f" ({why})" if n_doubt else ""), file=out)
    print(f"elpd_loo  plain PSIS: {plain.elpd:9.2f}  (SE {plain.se:.2f}, p_loo {plain.p:.1f})", file=out)
    print(f"elpd_loo  adaptive  : {res.elpd:9.2f}  (SE {res.se:.2f}, p_loo {res.p:.1f})", file=out)
    for line in res.trust_lines()[1:]:
        print("  " + line, file=out)


def _report_refits(plain, res, seconds, out):
    rows = [(int(i), f"{plain.elpd_i.values[i]:.2f}", f"{res.elpd_i.values[i]:.2f}",
             f"{res.mcse_elpd_i.values[i]:.2f}", f"{res.refit_info[i]['rhat_loglik']:.3f}",
             f"{res.refit_info[i]['rhat_max']:.3f}", "yes" if res.doubtful.values[i] else "")
            for i in sorted(res.refit_info)]
    print(_fmt_table(rows, ["obs", "elpd_i psis", "elpd_i refit", "mcse", "R-hat log-lik", "max R-hat",
                            "doubtful"]), file=out)
    print(f"elpd_loo  with refits: {res.elpd:9.2f}  (SE {res.se:.2f}); refits took {seconds:.0f} s", file=out)


def add_parser(sub):
    """The ``demo`` subcommand."""
    d = sub.add_parser("demo", help="run the embedded ovarian demo end to end",
                       description="Fit a Bayesian logistic regression to the embedded ovarian microarray data "
                                   "with NUTS, then plain PSIS-LOO vs adaptive LOO on the same draws.",
                       epilog="example:\n  ppl-loo demo --prior normal --draws 300 --no-progress",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--prior", choices=["horseshoe", "normal"], default="horseshoe")
    d.add_argument("--chains", type=int, default=2)
    d.add_argument("--warmup", type=int, default=500)
    d.add_argument("--draws", type=int, default=500)
    d.add_argument("--seed", type=int, default=2024)
    d.add_argument("--max-tree-depth", type=int, default=None)
    d.add_argument("--no-progress", action="store_true")
    d.add_argument("--mixture", choices=["auto", "on", "off"], default="auto",
                   help="mixture importance sampling as a second opinion (one extra NUTS run): auto (default) "
                        "before the search whenever plain PSIS leaves an observation unsettled, on always, off never")
    d.add_argument("--refit", action="store_true",
                   help="also refit the model without each doubtful observation (exact LOO, minutes)")
    d.set_defaults(run=run)
    return d


def run(args):
    """``ppl-loo demo``: exit status 0."""
    demo(prior=args.prior, chains=args.chains, warmup=args.warmup, draws=args.draws, random_seed=args.seed,
         max_tree_depth=args.max_tree_depth, progressbar=not args.no_progress, refit=args.refit,
         mixture={"auto": "auto", "on": True, "off": False}[args.mixture])
    return 0
