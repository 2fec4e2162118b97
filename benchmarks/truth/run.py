"""The ground-truth suite: every LOO method against brute-force refits (and exact answers).

    .venv/bin/python benchmarks/truth/run.py                     # full: every model, every refit (hours)
    .venv/bin/python benchmarks/truth/run.py --models lr_p_near_n,eight_schools_centered
    .venv/bin/python benchmarks/truth/run.py --stage refits --models ovarian_lr --obs 0-26   # refits split up
    .venv/bin/python benchmarks/truth/run.py --reduced           # what CI runs (tests/test_truth_suite.py)

Stages, each cached under ``benchmarks/.cache/truth/<mode>/<model>/``:

1. ``fit``: the main fit (real MCMC, the problem's sampler and settings below);
2. ``refits``: one refit per observation without it (same sampler and settings), ``log p(y_i | theta)``
   at its draws; the stepping stones of the hardest observations (full mode);
3. ``methods`` (optional): the expensive methods alone (:data:`CACHED_METHODS`), cached;
4. ``score``: plain PSIS, arviz_stats moment matching, bayesianquilts (logistic regression, when
   installed) and ppl_loo on the main fit, each scored against the truth: mean and max |error|,
   error of the sum, and **silent failures**: ``|error| > 3 sqrt(mcse_method^2 + mcse_truth^2)`` on
   an observation the method does not mark doubtful.

Full mode writes ``benchmarks/results/truth/<model>.json`` (truth per observation, every method's
pointwise results, the table) and ``benchmarks/results/truth/truth.md`` (all tables). Reduced mode
re-runs the main fits of :data:`REDUCED_MODELS` (same seeds and settings as the full run), scores the
methods against the committed truth, refits :data:`REDUCED_REFITS` observations afresh to check that
the committed truth reproduces, and writes ``<cache>/reduced/summary.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax
from truth_common import DEFAULT_CACHE, RESULTS, cache_dir, load_json, log, machine_info, save_json, truth_value  # noqa: E402

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)

#: MCMC settings of the main fit and of every refit (the refits use the main fit's settings, as a
#: user's brute-force check would); seeds: main fit SEED, refit of i SEED + 1000 + i
SETTINGS = {
    "ovarian_lr": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
    "ovarian_relu": {"chains": 4, "warmup": 500, "draws": 500, "target_accept": 0.9, "max_depth": 8},
    "lr_p_near_n": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.9},
    "horseshoe_wide": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
    "poisson_re_pymc": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
    "poisson_re_stan": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
    "eight_schools_centered": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
    "eight_schools_noncentered": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
    "leverage_gaussian": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.8},
    "leverage_wide_pymc": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.8},
    "leverage_wide_stan": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.8},
    "poisson_outliers": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.8},
    "overdispersed_poisson": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.8},
    "breast_cancer_normal": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.8},
    "breast_cancer_horseshoe": {"chains": 4, "warmup": 1000, "draws": 1000, "target_accept": 0.95},
}
SEED = 1
#: refits whose settings differ from the main fit's: the ovarian horseshoe's refits (2-7 minutes each on
#: two busy cores) run 4 x (500 + 500), except observations 0-6 and 27-29 (run first, 4 x (1000 + 1000));
#: the bridge with the main fit's 4,000 draws and the chain-based MCSE carry the shorter chains; each refit
#: records its settings in its diagnostics
#: horseshoe_wide: all 120 observations have plain k-hat above 0.5 on its main fit (nearly separable data), so
#: its refits run 4 x (500 + 500) as well (observation 0, run first: 4 x (1000 + 1000)), about 40 s each
REFIT_SETTINGS = {"ovarian_lr": {"chains": 4, "warmup": 500, "draws": 500, "target_accept": 0.95},
                  "horseshoe_wide": {"chains": 4, "warmup": 500, "draws": 500, "target_accept": 0.95}}
#: stepping stones (full mode): observations per model (the largest |bridge - naive| in nats) and rungs
N_STONES = 2
BETAS = (0.0, 0.1, 0.3, 0.6, 1.0)
STONE_BACKENDS = ("jax", "pymc")
#: the models CI runs (their main fits take seconds to two minutes here) and the fresh refits per model;
#: not the ReLU net (a main fit of minutes, refits that do not mix) nor the Stan Poisson model (ppl_loo's
#: gradient flows through Stan's autodiff take ten minutes there: d Hessian-vector products per draw)
REDUCED_MODELS = ("lr_p_near_n", "eight_schools_centered", "eight_schools_noncentered", "leverage_gaussian",
                  "poisson_outliers", "leverage_wide_stan")
#: not in CI, for CI's time budget (45 minutes on two cores), with their full-suite rows in
#: benchmarks/results/truth/truth.md:
#: - leverage_wide_pymc: its pl.loo with the second opinions (a retried mixture run and SMC) takes minutes (0 doubtful,
#:   0 silent, max |error| 0.115 in the full suite);
#: - poisson_re_pymc: its pl.loo with the second opinions took 653 s here (one doubtful observation), half of
#:   the reduced suite's time; CI runs the second opinions on PyMC models in tests/test_mixture.py;
#: - overdispersed_poisson: its pl.loo with the second opinions takes 150 s here (0 doubtful, 0 silent in the full
#:   suite); CI keeps the Poisson regression with outliers and exact quadrature (poisson_outliers);
#: - ovarian_lr: 8 minutes here (3.5 for the main fit, 4.5 for pl.loo with the mixture run on 3,075 parameters; 13
#:   doubtful, 0 silent); CI runs the search on this model, against refits, in tests/test_ovarian_benchmark.py
REDUCED_REFITS = 1
REDUCED_METHODS = ("plain", "ppl_loo")  # what tests/test_truth_suite.py asserts on
FULL_METHODS = ("plain", "arviz_mm", "bayesianquilts", "ppl_loo")


def get_problem(name):
    from problems import all_problems

    table = all_problems()
    if name not in table:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(table)}")
    return table[name]()


# ----------------------------------------------------------------------------- stage 1: main fit
def main_fit(problem, cdir):
    import xarray as xr

    path = cdir / "fit.zarr"
    if path.exists():
        return xr.open_datatree(path, engine="zarr").load()
    log(f"{problem.name}: main fit {SETTINGS[problem.name]}")
    data = problem.fit(SETTINGS[problem.name], SEED)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data.to_zarr(path)
    return xr.open_datatree(path, engine="zarr").load()


# ----------------------------------------------------------------------------- stage 2: refits
def refit_path(cdir, i, beta=0.0):
    return cdir / (f"refit_{i}.npz" if beta == 0.0 else f"stone_{i}_{beta:g}.npz")


def run_refit(problem, cdir, i, beta=0.0):
    path = refit_path(cdir, i, beta)
    if path.exists():
        z = np.load(path, allow_pickle=True)
        return z["ll"], z["diag"].item()
    t0 = time.perf_counter()
    settings = REFIT_SETTINGS.get(problem.name, SETTINGS[problem.name])
    ll, diag = problem.refit(i, settings, SEED + 1000 + i + int(round(1000 * beta)) * 100, beta)
    diag = dict(diag, total_s=time.perf_counter() - t0, settings=settings)
    np.savez(path, ll=ll, diag=np.array(diag, dtype=object))
    log(f"{problem.name}: refit {i} (beta {beta:g}) {diag}")
    import jax

    jax.clear_caches()  # every refit compiles a new sampler: do not let the executables pile up in memory
    return ll, diag


def parse_obs(spec, n):
    if spec is None:
        return list(range(n))
    out = []
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return [i for i in out if 0 <= i < n]


def truth_table(problem, data, cdir, obs, stones=True):
    """Per-observation truth records (refit bridge, naive, stepping stones, exact), for the
    observations of ``obs`` the problem refits (``problem.refit_obs(data)`` where it says)."""
    from estimate import stones_record, truth_record

    obs = restrict_obs(problem, data, obs)
    ll_full = problem.truth_loglik(data)  # (chains, draws, n)
    records = {}
    for i in obs:
        ll, diag = run_refit(problem, cdir, i)
        records[i] = truth_record(ll, ll_full[..., i], diag)
    if stones and problem.backend in STONE_BACKENDS and N_STONES:
        hard = sorted(records, key=lambda i: -abs(records[i]["bridge"] - records[i]["naive"]))[:N_STONES]
        for i in hard:
            rungs = [run_refit(problem, cdir, i)[0]]
            rungs += [run_refit(problem, cdir, i, b)[0] for b in BETAS[1:-1]]
            rungs.append(ll_full[..., i])
            records[i].update(stones_record(rungs, BETAS))
    exact = problem.exact()
    if exact is not None:
        for i in records:
            records[i]["exact"] = float(exact[i])
    return records


def restrict_obs(problem, data, obs):
    """``obs`` less the observations the problem does not refit (``refit_obs``, e.g. plain k-hat > 0.5)."""
    if not hasattr(problem, "refit_obs"):
        return list(obs)
    chosen = set(problem.refit_obs(data))
    return [i for i in obs if i in chosen]


# ----------------------------------------------------------------------------- stage 3: methods
def score(method_out, truth, truth_mcse, obs):
    obs = np.asarray(obs)
    est = np.asarray(method_out["elpd_i"], float)[obs]
    mcse = np.asarray(method_out["mcse"], float)[obs]
    mcse = np.where(np.isfinite(mcse), mcse, 0.0)
    doubtful = np.asarray(method_out["doubtful"], bool)[obs]
    err = est - truth
    comb = np.sqrt(mcse**2 + truth_mcse**2)
    silent = (np.abs(err) > 3.0 * comb) & ~doubtful
    return {"n": int(len(obs)), "mean_abs_error": float(np.mean(np.abs(err))),
            "max_abs_error": float(np.max(np.abs(err))),
            "error_of_sum": float(np.sum(err)), "doubtful": int(doubtful.sum()), "silent_failures": int(silent.sum()),
            "silent_obs": [int(o) for o in obs[silent]], "mean_abs_error_not_doubtful":
            float(np.mean(np.abs(err[~doubtful]))) if (~doubtful).any() else float("nan"),
            "wall_s": float(method_out.get("wall_s", float("nan")))}


#: methods of minutes to hours (refits; bayesianquilts' 700-candidate search): their output on a main
#: fit is cached as ``<cache>/full/<model>/method_<name>.json`` (delete it to recompute)
CACHED_METHODS = ("ppl_loo_refit", "bayesianquilts")


def part_paths(cdir, name):
    """The parts of a method run split over processes (``--part p/P``), when all P are there."""
    found = sorted(cdir.glob(f"method_{name}.part*of*.json"))
    if not found:
        return []
    total = int(found[0].stem.split("of")[-1])
    return found if len(found) == total else []


def run_methods(problem, data, methods, cdir=None):
    import methods as M

    out = {}
    for name in methods:
        t0 = time.perf_counter()
        cached = cdir / f"method_{name}.json" if cdir is not None and name in CACHED_METHODS else None
        if cached is not None and not cached.exists() and part_paths(cdir, name):  # shared over processes
            save_json(cached, M.merge_parts([load_json(q) for q in part_paths(cdir, name)]))
        if cached is not None and cached.exists():
            out[name] = load_json(cached)
            log(f"{problem.name}: {name} from {cached}")
            continue
        try:
            out[name] = M.METHODS[name](problem, data)
            if cached is not None:
                save_json(cached, out[name])
        except ImportError as exc:
            out[name] = {"error": f"not installed: {exc}"}
        except NotImplementedError as exc:
            out[name] = {"error": str(exc)}
        log(f"{problem.name}: {name} done in {time.perf_counter() - t0:.1f} s")
    return out


def evaluate(problem, data, records, methods, cdir=None):
    obs = sorted(records)
    tv = np.array([truth_value(records[i])[0] for i in obs])
    tse = np.array([truth_value(records[i])[1] for i in obs])
    results = run_methods(problem, data, methods, cdir)
    table = {}
    for name, res in results.items():
        if "error" not in res:
            table[name] = score(res, tv, tse, obs)
    add_vs_plain(table, results, tv, obs)
    return results, table


def add_vs_plain(table, pointwise, tv, obs):
    """Each method against plain PSIS, observation by observation: the mean of ``|err| - |err_plain|``
    and its Monte Carlo SE ``sqrt(sum(mcse^2 + mcse_plain^2)) / n`` (``|a| - |b|`` moves by at most
    ``|a - b|`` when the estimates move; the two methods' errors are taken as independent, which is
    conservative where they share the draws and err together)."""
    if "plain" not in pointwise:
        return
    o = np.asarray(obs)
    est = lambda r, key: np.asarray([float(v) for v in r[key]], float)[o]  # noqa: E731 (JSON "nan" strings too)
    abs_plain = np.abs(est(pointwise["plain"], "elpd_i") - tv)
    m_plain = np.nan_to_num(est(pointwise["plain"], "mcse"))
    for name in table:
        if name in pointwise:
            d = np.abs(est(pointwise[name], "elpd_i") - tv) - abs_plain
            m = np.nan_to_num(est(pointwise[name], "mcse"))
            table[name]["vs_plain"] = float(np.mean(d))
            table[name]["vs_plain_se"] = float(np.sqrt(np.sum(m**2 + m_plain**2)) / len(o))


def fit_summary(data):
    import ast

    d = data["posterior"].attrs.get("diagnostics")
    return ast.literal_eval(d) if isinstance(d, str) else {}


# ----------------------------------------------------------------------------- reports
def markdown(all_results):
    import methods as M

    lines = ["# Ground truth: LOO methods against brute-force refits", "",
             "Regenerate: `.venv/bin/python benchmarks/truth/run.py` (cached stages under `benchmarks/.cache/truth/`).",
             "Truth per observation: the exact value where the model has one (closed form, quadrature), else the "
             "bridge-sampling estimate from the refit without the observation and the main fit "
             "(`benchmarks/truth/estimate.py`). A **silent failure** is an observation whose |error| exceeds 3 "
             "combined Monte Carlo SEs (the method's own and the truth's) and that the method does not mark doubtful. "
             "*vs plain PSIS*: the mean over observations of |error| minus plain PSIS's |error|, with its Monte Carlo "
             "SE from both methods' pointwise MCSEs (negative: closer to the truth).",
             ""]
    for name, r in all_results.items():
        recs = {int(i): rec for i, rec in r["truth"].items()}
        add_vs_plain(r["table"], r["pointwise"], np.array([truth_value(recs[i])[0] for i in sorted(recs)]),
                     sorted(recs))
        lines += [f"## {r['title']}", ""]
        fs = r.get("fit", {})
        lines.append(f"Main fit: {r['settings']}; wall {fs.get('wall_s', float('nan')):.0f} s, max R-hat "
                     f"{fs.get('max_rhat', float('nan')):.3f}, min bulk ESS "
                     f"{fs.get('min_ess_bulk', float('nan')):.0f}, "
                     f"divergences {fs.get('divergences', '-')}. Refits: {r['n_truth']} observations"
                     + (f" (the problem refits {r['refit_obs_note']}: {r['n_refit_candidates']} of {r['n_obs']}"
                        + (f", of which {r['n_refit_candidates'] - r['n_truth']} were not refit, for time" if
                           r['n_refit_candidates'] > r['n_truth'] else "") + "; only refit observations are scored)"
                        if r.get("refit_obs_note") else "")
                     + (f", {r['refit_note']}" if r.get("refit_note") else "")
                     + (f" ({r['refit_settings_note']})" if r.get("refit_settings_note") else "")
                     + (f", max R-hat {r['refit_max_rhat']:.3f}, divergences {r['refit_divergences']}"
                        if 'refit_max_rhat' in r else "")
                     + f"; truth from {r['truth_source']}."
                     + (f" The methods were scored on a re-run of the main fit (same seed and settings; a reinstalled "
                        "environment did not reproduce the earlier draws); the truth's bridge used the earlier fit "
                        "(max R-hat "
                        f"{r['truth_main_fit'].get('max_rhat', float('nan')):.3f}, min bulk ESS "
                        f"{r['truth_main_fit'].get('min_ess_bulk', float('nan')):.0f})." if r.get("truth_main_fit")
                        else ""))
        if r.get("stones"):
            lines.append("Stepping stones: " + "; ".join(
                f"obs {i}: {s['stepping_stones']:.3f} ± {s['stepping_stones_mcse']:.3f} (bridge {s['bridge']:.3f} ± "
                f"{s['bridge_mcse']:.3f}, refit alone {s['naive']:.3f} ± {s['naive_mcse']:.3f})"
                                                         for i, s in r["stones"].items()))
        lines += ["",
                  "| method | mean abs error | vs plain PSIS ± MC SE | max abs error | error of the sum | doubtful | "
                  "silent failures | wall [s] |", "|---|---|---|---|---|---|---|---|"]
        for m, t in r["table"].items():
            vs = f"{t['vs_plain']:+.4f} ± {t['vs_plain_se']:.4f}" if "vs_plain" in t and m != "plain" else ""
            lines.append(f"| {M.LABELS.get(m, m)} | {t['mean_abs_error']:.4f} | {vs} | {t['max_abs_error']:.3f} | "
                         f"{t['error_of_sum']:+.3f} | {t['doubtful']} | {t['silent_failures']} | {t['wall_s']:.1f} |")
        for m, t in r.get("earlier_fit_table", {}).items():
            lines.append(f"| {M.LABELS.get(m, m)}, on the earlier main fit | {t['mean_abs_error']:.4f} | | "
                         f"{t['max_abs_error']:.3f} | {t['error_of_sum']:+.3f} | {t['doubtful']} | "
                         f"{t['silent_failures']} | {t['wall_s']:.1f} |")
        for m, e in r.get("errors", {}).items():
            lines.append(f"| {M.LABELS.get(m, m)} | not run: {e} | | | | | |")
        ev = evidence_line(r, sorted(recs))
        if ev:
            lines += ["", ev]
        lines.append("")
    return "\n".join(lines) + "\n"


def evidence_counts(evidence, obs):
    """``{kind: count}`` of ``res.evidence`` over the scored observations (``""``, doubtful, as "none")."""
    out = {}
    for i in obs:
        kind = str(evidence[i]) or "none"
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == "none", -kv[1], kv[0])))


def evidence_line(r, obs):
    """One line per ppl_loo method with ``evidence`` in its pointwise output: what vouched for how many."""
    import methods as M

    parts = []
    for m, pw in r.get("pointwise", {}).items():
        if "evidence" in pw:
            counts = evidence_counts(pw["evidence"], obs)
            parts.append(f"{M.LABELS.get(m, m)}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if not parts:
        return ""
    return (f"Evidence (`res.evidence`) over the {len(obs)} scored observations (none: doubtful): "
            + "; ".join(parts) + ".")


def model_report(problem, data, records, results, table):
    obs = sorted(records)
    diag = [records[i] for i in obs]
    rep = {"name": problem.name, "title": problem.title, "settings": SETTINGS[problem.name], "seed": SEED,
           "fit": fit_summary(data), "n_truth": len(obs), "n_obs": int(problem.n), "machine": machine_info(),
           "truth_source": "exact (closed form / quadrature)" if "exact" in diag[0] else "bridge sampling over refits",
           "truth": {str(i): records[i] for i in obs}, "table": table,
           "errors": {m: r["error"] for m, r in results.items() if "error" in r},
           "pointwise": {m: {k: v for k, v in r.items() if k != "wall_s"} for m, r in results.items()
                         if "error" not in r},
           "stones": {str(i): records[i] for i in obs if "stepping_stones" in records[i]}}
    for key in ("refit_obs_note", "refit_note"):
        if getattr(problem, key, None):
            rep[key] = getattr(problem, key)
    if hasattr(problem, "refit_obs"):
        rep["n_refit_candidates"] = len(restrict_obs(problem, data, range(problem.n)))
    by_settings = {}
    for i in obs:
        by_settings.setdefault(str(records[i].get("settings", SETTINGS[problem.name])), []).append(i)
    if len(by_settings) > 1 or problem.name in REFIT_SETTINGS:
        rep["refit_settings_note"] = "; ".join(f"{k}: {len(v)} refits" for k, v in by_settings.items())
    rh = [d.get("max_rhat") for d in diag if d.get("max_rhat") is not None]
    if rh:
        rep["refit_max_rhat"] = float(np.nanmax(rh))
        rep["refit_divergences"] = int(sum(d.get("divergences", 0) for d in diag))
    return rep


def committed_truth(name):
    path = RESULTS / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"no committed truth for {name} ({path}); run the full suite for it first")
    rep = load_json(path)
    return {int(i): {k: _number(v) if k not in ("betas",) else v for k, v in rec.items()}
            for i, rec in rep["truth"].items()}


def _number(v):
    """A JSON value as a float (``"nan"``, ``"inf"`` strings included); other strings (``"sampler"``) as they are."""
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def check_reproduced(problem, data, name):
    """The main fit must be the committed run's: plain PSIS on it reproduces the committed pointwise
    values (deterministic samplers, same seed and settings), else the committed truth is not its truth."""
    import methods as M

    prev = load_json(RESULTS / f"{name}.json").get("pointwise", {}).get("plain")
    if prev is None:
        raise SystemExit(f"{name}: the committed JSON has no plain PSIS pointwise values to check the main fit against")
    now = np.asarray(M.plain(problem, data)["elpd_i"], float)
    diff = float(np.max(np.abs(now - np.asarray(prev["elpd_i"], float))))
    if not diff < 1e-6:
        raise SystemExit(f"{name}: the main fit does not reproduce the committed one (plain PSIS elpd_i differ by "
                         f"{diff:.3g}); run the refits (--truth refits)")
    log(f"{name}: main fit reproduces the committed one (plain PSIS elpd_i within {diff:.1e})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="comma-separated (default: all, or REDUCED_MODELS with --reduced)")
    ap.add_argument("--stage", choices=("fit", "refits", "methods", "score", "report", "stones", "all"), default="all",
                    help="report: recompute the derived columns (vs plain PSIS) of the committed JSON and "
                         "rewrite truth.md, without running anything; stones: redo the stepping stones of the "
                         "committed JSON's stone observations (a refit, the tempered rungs, the main fit) and "
                         "replace them in the JSON")
    ap.add_argument("--obs", default=None, help="observations to refit, e.g. 0-26 or 3,5,7 (refits stage)")
    ap.add_argument("--reduced", action="store_true")
    ap.add_argument("--methods", default=None)
    ap.add_argument("--cache", default=str(DEFAULT_CACHE))
    ap.add_argument("--part", default=None, help="methods stage: this process's share p/P of a refitting method")
    ap.add_argument("--truth", choices=("refits", "committed"), default="refits",
                    help="score stage: the truth from this run's refits (cached), or from the committed JSON "
                         "(the main fit must reproduce the committed one: same seed and settings)")
    ap.add_argument("--new-main-fit", action="store_true",
                    help="score stage with --truth committed: accept a main fit that does not reproduce the committed "
                         "one (same seed and settings, other JAX/XLA builds); every method is then rescored on it, "
                         "methods not in --methods are dropped from the JSON, and the report says so (the truth, "
                         "a property of the model and data, stays; its bridge used the earlier fit's draws)")
    args = ap.parse_args(argv)
    mode = "reduced" if args.reduced else "full"
    from problems import all_problems

    names = args.models.split(",") if args.models else list(REDUCED_MODELS if args.reduced else all_problems())
    methods = args.methods.split(",") if args.methods else list(REDUCED_METHODS if args.reduced else FULL_METHODS)
    summary = {}
    if args.stage == "report":
        names = []
        for name in all_problems():
            path = RESULTS / f"{name}.json"
            if path.exists():
                rep, records = load_json(path), committed_truth(name)
                obs = sorted(records)
                add_vs_plain(rep["table"], rep["pointwise"], np.array([truth_value(records[i])[0] for i in obs]), obs)
                save_json(path, rep)
    for name in names:
        problem = get_problem(name)
        cdir = cache_dir(args.cache, "full" if args.stage in ("refits", "methods") else mode, name)
        data = main_fit(problem, cache_dir(args.cache, "full", name) if not args.reduced else cdir)
        if args.stage == "fit":
            continue
        if args.stage == "stones":
            from estimate import stones_record

            rep = load_json(RESULTS / f"{name}.json")
            ll_full = problem.truth_loglik(data)
            for key in list(rep.get("stones", {})):
                i = int(key)
                rungs = [run_refit(problem, cdir, i)[0]]
                rungs += [run_refit(problem, cdir, i, b)[0] for b in BETAS[1:-1]]
                rungs.append(ll_full[..., i])
                rec = stones_record(rungs, BETAS)
                log(f"{name}: obs {i}: stepping stones {rec['stepping_stones']:.3f} +- "
                    f"{rec['stepping_stones_mcse']:.3f} "
                    f"(was {rep['stones'][key]['stepping_stones']:.3f}; bridge {rep['truth'][key]['bridge']:.3f})")
                rep["truth"][key].update(rec)
                rep["stones"][key].update(rec)
            save_json(RESULTS / f"{name}.json", rep)
            continue
        if args.reduced:
            records = committed_truth(name)
            tv = {i: truth_value(r) for i, r in records.items()}
            # fresh refits of the observations the committed truth says are hardest for plain PSIS
            import methods as M

            plain = M.plain(problem, data)
            hard = sorted(records, key=lambda i: -abs(plain["elpd_i"][i] - tv[i][0]))[:REDUCED_REFITS]
            fresh = truth_table(problem, data, cdir, hard, stones=False)
            checks = {}
            for i in hard:
                a, ase = fresh[i]["bridge"], fresh[i]["bridge_mcse"]
                b, bse = records[i]["bridge"], records[i]["bridge_mcse"]
                checks[i] = {"fresh": a, "fresh_mcse": ase, "committed": b, "committed_mcse": bse,
                             "z": (a - b) / np.sqrt(ase**2 + bse**2)}
            results, table = evaluate(problem, data, records, methods)
            summary[name] = {"table": table, "refit_checks": checks, "fit": fit_summary(data)}
            log(f"{name}: {table}")
            continue
        if args.stage == "methods" and args.part:  # one share of a method's refits, e.g. --part 0/2
            import methods as M

            p, P = (int(x) for x in args.part.split("/"))
            for m in methods:
                t0 = time.perf_counter()
                save_json(cdir / f"method_{m}.part{p}of{P}.json", M.METHODS[m](problem, data, part=(p, P)))
                log(f"{name}: {m} part {p}/{P} done in {time.perf_counter() - t0:.1f} s")
            continue
        if args.stage == "methods":  # the expensive methods alone, cached for a later score stage
            run_methods(problem, data, methods, cache_dir(args.cache, "full", name))
            continue
        obs = parse_obs(args.obs, problem.n)
        if args.truth == "committed":  # rescore new method versions without redoing the refits
            records = committed_truth(name)
            if args.new_main_fit:
                earlier_fit = load_json(RESULTS / f"{name}.json").get("truth_main_fit") or load_json(
                    RESULTS / f"{name}.json")["fit"]
            else:
                check_reproduced(problem, data, name)
        else:
            records = truth_table(problem, data, cdir, obs, stones=args.obs is None)
        if args.stage == "refits":
            continue
        results, table = evaluate(problem, data, records, methods, cache_dir(args.cache, "full", name))
        rep = model_report(problem, data, records, results, table)
        old = RESULTS / f"{name}.json"
        if args.truth == "committed" and args.new_main_fit:  # other draws: the earlier methods' scores move aside
            rep["truth_main_fit"] = earlier_fit
            prev = load_json(old)
            earlier = {m: t for m, t in {**prev.get("earlier_fit_table", {}), **prev.get("table", {})}.items()
                       if m not in methods}
            if earlier:  # methods not re-run (bayesianquilts: 14 minutes), scored on the earlier fit's draws
                rep["earlier_fit_table"] = earlier
        elif old.exists():  # keep the methods this run did not score (a --methods subset)
            prev = load_json(old)
            if args.truth == "committed" and prev.get("truth_main_fit"):  # the truth's bridges used an earlier fit
                rep["truth_main_fit"] = prev["truth_main_fit"]
            if args.truth == "committed" and prev.get("earlier_fit_table"):
                rep["earlier_fit_table"] = prev["earlier_fit_table"]
            for key in ("table", "pointwise", "errors"):
                for m, v in prev.get(key, {}).items():
                    if m not in methods:
                        rep[key].setdefault(m, v)
        add_vs_plain(rep["table"], rep["pointwise"], np.array([truth_value(records[i])[0] for i in sorted(records)]),
                     sorted(records))
        save_json(RESULTS / f"{name}.json", rep)
        for m, t in table.items():
            log(f"{name}: {m}: mean |err| {t['mean_abs_error']:.3f}, max {t['max_abs_error']:.3f}, sum "
                f"{t['error_of_sum']:+.3f}, doubtful {t['doubtful']}, silent {t['silent_failures']}")
    if args.reduced:
        save_json(cache_dir(args.cache, "reduced", "") / "summary.json", summary)
    elif args.stage in ("all", "score", "report", "stones"):
        reports = {}
        for name in all_problems():
            path = RESULTS / f"{name}.json"
            if path.exists():
                reports[name] = load_json(path)
        (RESULTS / "truth.md").write_text(markdown(reports))
        log(f"wrote {RESULTS / 'truth.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
