"""Calibration of the Monte Carlo SE of plain PSIS-LOO's ``elpd_i`` against the true error.

    R_LIBS=/work/rlib .venv/bin/python benchmarks/mcse_calibration.py  # the full run (checks R's formula against R)
    .venv/bin/python benchmarks/mcse_calibration.py --reduced  # one setting, under a minute (its test)

A normal mean with known sigma 1, prior N(0, 10^2), 19 standard normal observations and one outlier at 4.5: its
exact LOO predictive densities are closed forms. Each replication draws the posterior anew (its own seed) as 4
AR(1) chains with the exact stationary marginal (the posterior) and autocorrelation ``phi``, so that ``r_eff < 1``
matters. For every observation the ratio is the RMS over replications of the reported MCSE over the true SE (the
SD over replications of the estimate minus the closed form: the bias is subtracted, and reported as a fraction of
the true SE); the table gives the median ratio over observations, and a bootstrap over replications gives its
Monte Carlo SD.

Rows: ``ppl_loo`` (``pl.loo(data)``'s ``mcse_elpd_i``, computed with the same functions as ``pl.loo``; the run
checks them against ``pl.loo`` itself on two replications); ``max rule`` (the earlier rule: the larger of the
delta-method SE and the spread over chains); ``delta method`` and ``chain spread`` alone; ``R loo`` (R ``loo``
2.10.1's ``mcse_elpd``, transcribed: ``sqrt(log(1 + sum w^2 (l - E)^2 / r_eff / E^2))`` with R's per-observation
``r_eff = relative_eff(exp(ll), chain_id)`` and R's tail length; the full run checks the transcription against R
itself on three replications to 1e-8). ``arviz_stats`` (1.3.3) reports no MCSE of ``elpd_loo``; its estimate is
ppl_loo's to 1e-8 (``tests/test_jax_settings.py``), so its true SE is the same.

Writes ``benchmarks/results/mcse_calibration.json`` (the full run) or prints the reduced run's numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from scipy.special import logsumexp  # noqa: E402
from scipy.stats import norm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))

SIGMA, TAU = 1.0, 10.0
Y = np.r_[np.random.default_rng(0).normal(size=19), 4.5]
CHAINS = 4
#: (phi, draws per chain, replications) of the full run; the reduced run is its own setting below
FULL = ((0.0, 500, 400), (0.5, 500, 400), (0.8, 500, 400))
REDUCED = (0.5, 250, 200)


def posterior(y):
    """``(mean, variance)`` of the conjugate posterior of the mean given ``y``."""
    prec = 1 / TAU**2 + y.size / SIGMA**2
    return y.sum() / SIGMA**2 / prec, 1 / prec


def exact_loo():
    """``log p(y_i | y_-i)`` in closed form, ``(n,)``."""
    out = []
    for i in range(Y.size):
        m, v = posterior(np.delete(Y, i))
        out.append(norm.logpdf(Y[i], m, np.sqrt(v + SIGMA**2)))
    return np.array(out)


def chains(seed, phi, draws):
    """``(CHAINS, draws)`` posterior draws of the mean: AR(1) chains started in the stationary distribution."""
    rng = np.random.default_rng(seed)
    m, v = posterior(Y)
    x = np.empty((CHAINS, draws))
    x[:, 0] = rng.normal(size=CHAINS)
    eps = rng.normal(size=(CHAINS, draws)) * np.sqrt(1 - phi**2)
    for t in range(1, draws):
        x[:, t] = phi * x[:, t - 1] + eps[:, t]
    return m + np.sqrt(v) * x


def log_lik(mu):
    """``(S, n)`` chain-major log-likelihood of the draws ``mu`` ``(CHAINS, D)``."""
    return norm.logpdf(Y[None, :], mu.reshape(-1)[:, None], SIGMA)


def datatree(mu):
    from arviz_base import from_dict

    ll = log_lik(mu).reshape(CHAINS, -1, Y.size)
    return from_dict({"posterior": {"mu": mu}, "log_likelihood": {"y": ll}}, dims={"y": ["obs"]})


def r_formula(ll):
    """R ``loo``'s ``(elpd_i, mcse_elpd_loo_i)`` of ``ll`` ``(S, m)`` (its workflow's per-column ``r_eff``)."""
    from ppl_loo.numerics.psis import psislw
    from ppl_loo.workflow.loo.plain import relative_eff_columns

    r_eff = relative_eff_columns(ll, CHAINS)
    lw = np.asarray(psislw(-ll.T, r_eff, "R")[0])
    elpd = logsumexp(lw + ll.T, axis=1)
    E = np.exp(elpd)
    var = np.sum(np.exp(lw) ** 2 * (np.exp(ll.T) - E[:, None]) ** 2, axis=1) / r_eff
    return elpd, np.sqrt(np.log1p(var / E**2))


def replicate(phi, draws, reps, seed0, with_r=True):
    """``{row: (reps, n) MCSEs}`` and ``(reps, n)`` errors of ppl_loo (and R's) over ``reps`` replications."""
    from arviz_stats.base import array_stats

    from ppl_loo.workflow.loo.plain import chain_se_psis, psis_columns, psis_mcse

    n = Y.size
    mus = np.stack([chains(seed0 + r, phi, draws) for r in range(reps)])
    S = CHAINS * draws
    # pl.loo(data)'s r_eff: the mean ESS of the posterior's variables over S (one variable here)
    reff = np.asarray(array_stats.ess(mus, chain_axis=-2, draw_axis=-1, method="mean"), dtype=float) / S
    ll = np.concatenate([log_lik(mu) for mu in mus], axis=1)  # (S, reps * n): replication-major columns
    r_eff = np.repeat(reff, n)
    elpd, k, lw, mcse, _ = psis_columns(ll, -ll.T, r_eff, CHAINS)
    delta = np.asarray(psis_mcse(lw, ll.T, r_eff))
    spread = chain_se_psis(-ll.T, ll, CHAINS)
    exact = np.tile(exact_loo(), reps)
    rows = {"ppl_loo": mcse, "max rule": np.maximum(delta, spread), "delta method": delta, "chain spread": spread}
    errors = {row: elpd - exact for row in rows}
    if with_r:
        r_elpd, r_mcse = r_formula(ll)
        rows["R loo"], errors["R loo"] = r_mcse, r_elpd - exact
    shape = (reps, n)
    return ({row: v.reshape(shape) for row, v in rows.items()}, {row: v.reshape(shape) for row, v in errors.items()},
            np.asarray(k).reshape(shape), mus)


def ratios(mcse, err):
    """Per observation: RMS of the reported MCSE over the true SE (bias subtracted), and the bias over the SE."""
    sd = err.std(axis=0, ddof=1)
    return np.sqrt(np.mean(mcse**2, axis=0)) / sd, err.mean(axis=0) / sd


def median_ratio(mcse, err, n_boot=200, seed=0):
    """The median ratio over observations and its bootstrap SD over replications."""
    med = float(np.median(ratios(mcse, err)[0]))
    rng = np.random.default_rng(seed)
    boot = [np.median(ratios(mcse[idx], err[idx])[0])
            for idx in (rng.integers(0, err.shape[0], err.shape[0]) for _ in range(n_boot))]
    return med, float(np.std(boot, ddof=1))


def reduced():
    """The reduced run: ``{row: (median ratio, bootstrap SD)}`` of ppl_loo and the earlier rule."""
    phi, draws, reps = REDUCED
    mcse, err, _, _ = replicate(phi, draws, reps, seed0=10_000, with_r=False)
    return {row: median_ratio(mcse[row], err[row]) for row in ("ppl_loo", "max rule")}


def check_against_pl_loo(mus, mcse, err):
    """``pl.loo(data)`` on two replications gives the same MCSEs and errors (1e-10)."""
    import ppl_loo as pl

    exact = exact_loo()
    for r in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = pl.loo(datatree(mus[r]))
        np.testing.assert_allclose(res.mcse_elpd_i.values, mcse[r], rtol=1e-10)
        np.testing.assert_allclose(res.elpd_i.values - exact, err[r], rtol=0, atol=1e-10)


def check_against_r(mus):
    """The transcription of R's formula gives R's own ``mcse_elpd_loo`` on three replications (1e-8)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "r_loo"))
    from make_mcse_reference import r_mcse

    cases = {f"rep{r}": (log_lik(mus[r]), CHAINS) for r in range(3)}
    got, _ = r_mcse(cases)
    worst = 0.0
    for name, (ll, _) in cases.items():
        elpd, se = r_formula(ll)
        np.testing.assert_allclose(se, got[name]["mcse_elpd_loo_i"], rtol=1e-8)
        np.testing.assert_allclose(elpd, got[name]["elpd_loo_i"], rtol=1e-8)
        worst = max(worst, float(np.max(np.abs(se / got[name]["mcse_elpd_loo_i"] - 1))))
    return worst


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reduced", action="store_true", help="one setting, 200 replications (under a minute)")
    parser.add_argument("--no-r", action="store_true", help="skip the check against R itself")
    args = parser.parse_args(argv)
    if args.reduced:
        t0 = time.perf_counter()
        out = reduced()
        for row, (med, sd) in out.items():
            print(f"{row:14s} median ratio {med:.3f} (bootstrap SD {sd:.3f})")
        print(f"{time.perf_counter() - t0:.1f} s")
        return out
    settings, table = [], {}
    for j, (phi, draws, reps) in enumerate(FULL):
        t0 = time.perf_counter()
        mcse, err, k, mus = replicate(phi, draws, reps, seed0=100_000 * (j + 1))
        check_against_pl_loo(mus, mcse["ppl_loo"], err["ppl_loo"])
        entry = {"phi": phi, "chains": CHAINS, "draws_per_chain": draws, "replications": reps,
                 "median_pareto_k_outlier": float(np.median(k[:, -1])), "rows": {}}
        if j == 0 and not args.no_r:
            entry["r_check_max_rel_diff"] = check_against_r(mus)
        for row in mcse:
            ratio, bias = ratios(mcse[row], err[row])
            med, sd = median_ratio(mcse[row], err[row])
            entry["rows"][row] = {"median_ratio": med, "median_ratio_sd": sd, "ratio_outlier": float(ratio[-1]),
                                  "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
                                  "median_abs_bias_over_se": float(np.median(np.abs(bias)))}
            table.setdefault(row, []).append(med)
        entry["seconds"] = time.perf_counter() - t0
        settings.append(entry)
        print(f"phi {phi}: {reps} replications of {CHAINS} x {draws} draws, {entry['seconds']:.0f} s", flush=True)
    print(f"\nmedian ratio (reported MCSE RMS / true SE) over {Y.size} observations; arviz_stats reports no MCSE")
    print(f"{'':14s}" + "".join(f"  phi={s['phi']:<4}" for s in settings) + "   outlier (phi=0.5)")
    for row, meds in table.items():
        outlier = settings[1]["rows"][row]["ratio_outlier"]
        print(f"{row:14s}" + "".join(f"  {m:8.3f}" for m in meds) + f"   {outlier:.3f}")
    red = reduced()
    doc = {"settings": settings,
           "reduced": {row: {"median_ratio": m, "bootstrap_sd": s} for row, (m, s) in red.items()},
           "reduced_setting": dict(zip(("phi", "draws_per_chain", "replications"), REDUCED)),
           "arviz_stats": "no Monte Carlo SE of elpd_loo (ELPDDataLOO has none); its elpd_i is ppl_loo's to 1e-8"}
    out = ROOT / "benchmarks" / "results" / "mcse_calibration.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"reduced: {red}\nwrote {out}")
    return doc


if __name__ == "__main__":
    main()
