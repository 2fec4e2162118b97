"""Why the ReLU net's LOO estimates miss the refits: two checks on the cached fits of run.py.

Run after ``run.py`` (full mode):  ``.venv/bin/python benchmarks/ovarian/consistency.py``
Prints two tables and writes ``benchmarks/results/ovarian/consistency.json``.

1. **Refits against the main fit (reverse importance sampling).** The full posterior is the LOO
   posterior reweighted by ``p(y_i | theta)``, so the refit's draws predict the main fit's in-sample
   ``lpd_i = log E_post[p(y_i | theta)]`` as ``log(E_loo[p^2] / E_loo[p])``; the weights ``p <= 1``
   make this estimate well behaved. Agreement says the refit and the main fit sample posteriors that
   are consistent with each other, so the refit is a trustworthy ground truth. Beside it: the main
   fit's raw harmonic-mean LOO over *all* its retained draws and the share of draws that predict the
   observed label with probability below 0.5 (main fit and refit).

2. **Do the draws satisfy the identity every transformed proposal relies on?** For any invertible
   map ``T`` and draws ``theta ~ p(theta | D)``, ``E[p(T theta | D) |J_T(theta)| / p(theta | D)] = 1``
   exactly (a change of variables; the unnormalized density's constant cancels). The weights of
   Eq. 10 are this ratio divided by ``p(y_i | T theta)``, so where the mean of the ratio is far from
   1 the draws are not distributed as the density the weights assume (unconverged chains), and a
   transformed proposal's weights are wrong however good their k-hat looks. Reported for PMM1 and
   PMM2 over the hbar grid on resampling 0 of Table 1, with the Monte Carlo SE of the log mean
   (iid; it understates a heavy-tailed ratio's error, and a heavy right tail makes the log mean
   low, not high) and a bound that needs no tail assumption: by Markov's inequality,
   ``P(max_s ratio_s > c) <= S / c`` for posterior draws, so a maximum log ratio far above
   ``log S`` is impossible for draws from the posterior.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
from ovarian_common import ROOT, jax_model, load_json, save_json  # noqa: E402

# this script builds its own JAX arrays in float64 (ppl_loo enables x64 only inside its entry points)
jax.config.update("jax_enable_x64", True)


def _lme(a):
    from scipy.special import logsumexp

    return float(logsumexp(a) - np.log(len(a)))


def refit_consistency(cdir, name, model, targets):
    import jax
    from fits import load_fit, pooled_posterior
    from run import fit_path, refit_path

    loglik = jax.jit(jax.vmap(model.loglik))
    main, _ = load_fit(fit_path(cdir, name))
    ll_main = np.asarray(loglik(np.asarray(model.unconstrain(pooled_posterior(main, name)))))
    rows = []
    for i in targets:
        p = refit_path(cdir, name, i)
        if not p.exists():
            continue
        arr, _ = load_fit(p)
        lik = np.exp(np.asarray(loglik(np.asarray(model.unconstrain(pooled_posterior(arr, name)))))[:, i])
        rows.append({"obs": int(i), "lpd_main": _lme(ll_main[:, i]),
                     "lpd_main_predicted_from_refit": float(np.log(np.mean(lik**2) / np.mean(lik))),
                     "elpd_refit": float(np.log(np.mean(lik))),
                     "elpd_harmonic_mean_all_main_draws": -_lme(-ll_main[:, i]),
                     "share_lik_below_half_main": float(np.mean(np.exp(ll_main[:, i]) < 0.5)),
                     "share_lik_below_half_refit": float(np.mean(lik < 0.5))})
    return rows


def identity_check(cdir, name, model, targets, s=1000, hbars=(1.0, 4**-1, 4**-2, 4**-3, 4**-4, 4**-5)):
    import jax
    from resample import Draws, resample_index
    from run import fit_path

    draws = Draws(fit_path(cdir, name), name)
    data = draws.tree(resample_index(draws.n_total, s, 0), model)
    th = np.asarray(model.unconstrain(data["posterior"].to_dataset()))
    logp = jax.jit(jax.vmap(model.logp))
    loglik = jax.jit(jax.vmap(model.loglik))
    lp0, ll0 = np.asarray(logp(th)), np.asarray(loglik(th))
    m, v = th.mean(0), th.var(0)
    rows = []
    for i in targets:
        nu = np.exp(-ll0[:, i] - np.max(-ll0[:, i]))
        nu /= nu.sum()
        mw, vw = nu @ th, nu @ (th - m) ** 2
        r = np.sqrt(vw / v)
        for hb in hbars:
            for kind in ("pmm1", "pmm2"):
                if kind == "pmm1":
                    phi, logj = th + hb * (mw - m), 0.0
                else:
                    phi = th + hb * (r * (th - m) + mw - th)
                    logj = float(np.sum(np.log(np.abs(1 + hb * (r - 1)))))
                lr = np.asarray(logp(phi)) + logj - lp0
                w = np.exp(lr - lr.max())
                mcse = float(np.std(w, ddof=1) / np.sqrt(len(w)) / np.mean(w))  # delta method, iid
                # Markov's inequality: for draws from p, P(max_s ratio_s > c) <= S / c
                p_bound = float(min(1.0, np.exp(np.log(len(lr)) - lr.max())))
                rows.append({"obs": int(i), "transform": kind, "hbar": hb, "log_mean_ratio": _lme(lr),
                             "mcse_log_mean_ratio": mcse, "sd_log_ratio": float(np.std(lr)),
                             "max_log_ratio": float(lr.max()), "markov_p_bound": p_bound})
    return rows


def main():
    cdir = ROOT / "benchmarks" / ".cache" / "ovarian" / "full"
    out = ROOT / "benchmarks" / "results" / "ovarian" / "consistency.json"
    doc = {}
    for name in ("logistic", "relu"):
        targets = load_json(cdir / f"refit_targets_{name}.json")["targets"] if (
            cdir / f"refit_targets_{name}.json").exists() else []
        if not targets:
            print(f"{name}: no refit targets cached; run run.py first")
            continue
        model = jax_model(name)
        rc = refit_consistency(cdir, name, model, targets)
        ic = identity_check(cdir, name, model, targets)
        doc[name] = {"refit_consistency": rc, "identity_check": ic}
        print(f"\n{name}: refits vs main fit")
        print(f"{'obs':>4} {'lpd main':>9} {'from refit':>10} {'elpd refit':>10} {'harm. mean':>10} "
              f"{'p<.5 main':>9} {'p<.5 refit':>10}")
        for r in rc:
            print(f"{r['obs']:>4} {r['lpd_main']:>9.3f} {r['lpd_main_predicted_from_refit']:>10.3f} "
                  f"{r['elpd_refit']:>10.3f} {r['elpd_harmonic_mean_all_main_draws']:>10.3f} "
                  f"{r['share_lik_below_half_main']:>9.3f} {r['share_lik_below_half_refit']:>10.2f}")
        print(f"\n{name}: log mean p(T theta)|J|/p(theta) (must be 0 within MCSE for draws from the posterior)")
        for kind in ("pmm1", "pmm2"):
            for hb in sorted({r["hbar"] for r in ic}, reverse=True):
                sel = [r for r in ic if r["transform"] == kind and r["hbar"] == hb]
                vals = np.array([r["log_mean_ratio"] for r in sel])
                z = np.array([r["log_mean_ratio"] / max(r["mcse_log_mean_ratio"], 1e-12) for r in sel])
                pb = np.array([r["markov_p_bound"] for r in sel])
                print(f"  {kind} hbar {hb:<9.4g} median {np.median(vals):+9.3f}  max |.| {np.max(np.abs(vals)):9.3f}  "
                      f"targets with |z| > 3: {int(np.sum(np.abs(z) > 3))}/{len(sel)}; "
                      f"impossible for posterior draws (Markov bound p < 1e-6): {int(np.sum(pb < 1e-6))}/{len(sel)}")
    save_json(out, doc)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
