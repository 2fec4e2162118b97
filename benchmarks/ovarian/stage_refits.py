"""Ground truth: exact LOO by refitting without the observation (Stan, same program and sampler).

For each refit target ``i`` (the observations with the highest plain-PSIS k on all retained draws
of the main fit), the refit's draws ``theta^(-i)`` give

    elpd_i = log mean_s p(y_i | theta_s^(-i)),   p_loo_i = mean_s sigmoid(mu_i(theta_s^(-i))),

with Monte Carlo SE from the effective sample size of ``p(y_i | theta)`` over the refit's chains
(``arviz_stats.ess(method="mean")``; delta method for the log). Each LOO method's ``elpd_i`` over
the peer resamplings (mean, sd) is compared with it: ``z = (mean - refit) / sqrt(mcse_refit^2 +
sd_resamplings^2)``; "within Monte Carlo error" means ``|z| <= 2``. The LOO predictive
probability of a method is ``exp(elpd_i)`` for ``y_i = 1`` and ``1 - exp(elpd_i)`` for
``y_i = 0`` (the same self-normalized average, see ``stage_peers.identities``).
"""

from __future__ import annotations

import numpy as np
from ovarian_common import jax_model, load_json, log, save_json

METHOD_KEYS = ("arviz_plain", "arviz_mm", "bayesianquilts", "ppl_loo_papers7", "ppl_loo")


def refit_truth(model, name, arrays, i):
    import jax
    import xarray as xr
    from arviz_stats import ess
    from fits import pooled_posterior

    C, D = arrays["lp"].shape
    theta = np.asarray(model.unconstrain(pooled_posterior(arrays, name)))
    mu = np.asarray(jax.vmap(model.linear_predictor)(theta))[:, i]
    y = float(model.y[i])
    p1 = 1.0 / (1.0 + np.exp(-mu))
    lik = p1 if y == 1 else 1.0 - p1
    m = float(np.mean(lik))
    e = float(ess(xr.DataArray(lik.reshape(C, D), dims=("chain", "draw")), method="mean"))
    mcse_mean = float(np.std(lik, ddof=1) / np.sqrt(e))
    return {"elpd_i": float(np.log(m)), "mcse_elpd_i": mcse_mean / m, "p_loo": float(np.mean(p1)),
            "mcse_p_loo": mcse_mean, "ess_lik": e, "y": int(y)}


def lpd_with_mcse(log_lik):
    """In-sample ``lpd_i = log mean_s p(y_i | theta_s)`` of a full-data fit ``(chain, draw, n)`` with
    its Monte Carlo SE (ESS of ``p(y_i | theta)`` per observation, delta method)."""
    import xarray as xr
    from arviz_stats import ess

    lik = np.exp(log_lik)
    m = lik.mean(axis=(0, 1))
    e = np.asarray(ess(xr.DataArray(lik, dims=("chain", "draw", "obs")), method="mean"))
    sd = lik.reshape(-1, lik.shape[-1]).std(axis=0, ddof=1)
    return np.log(m), sd / np.sqrt(e) / m


def control_check(cdir, name, targets):
    """The refit settings on the full data (``run.control_path``) against the main fit: in-sample
    lpd_i of every observation, z-scores with both Monte Carlo SEs."""
    from fits import load_fit
    from run import control_path, fit_path

    if not control_path(cdir, name).exists():
        return {"error": "no control fit"}
    main, _ = load_fit(fit_path(cdir, name))
    ctrl, summ = load_fit(control_path(cdir, name))
    l_m, s_m = lpd_with_mcse(main["log_lik"])
    l_c, s_c = lpd_with_mcse(ctrl["log_lik"])
    z = (l_c - l_m) / np.sqrt(s_m**2 + s_c**2)
    t = np.asarray(targets)
    return {"lpd_i_main": l_m, "lpd_i_control": l_c, "z": z, "frac_abs_z_gt_2": float(np.mean(np.abs(z) > 2)),
            "mean_diff_all": float(np.mean(l_c - l_m)), "mean_diff_targets": float(np.mean((l_c - l_m)[t])),
            "z_targets": z[t], "control_diagnostics": {k: summ[k] for k in ("max_rhat", "min_ess_bulk", "divergences",
                                                                             "max_rhat_log_lik", "settings")}}


def run(cfg, cdir, out, logfile, models):
    from fits import load_fit
    from run import refit_path

    for name in models:
        mc = load_json(cdir / f"{name}_mcmc.json")
        targets_path = cdir / f"refit_targets_{name}.json"
        peers = load_json(cdir / f"peers_{name}.json")["resamplings"]
        model = jax_model(name)
        from run import refit_targets

        targets, k_all = refit_targets(cdir, name, cfg["n_refits"])
        save_json(targets_path, {"targets": targets, "k_psis_all_draws": k_all})
        rows = []
        for i in targets:
            arrays, summ = load_fit(refit_path(cdir, name, i))
            truth = refit_truth(model, name, arrays, i)
            row = {"obs": i, "k_psis_all_draws": float(k_all[i]), "refit": truth,
                   "refit_diagnostics": {k: summ[k] for k in ("max_rhat", "min_ess_bulk", "min_ess_tail", "divergences",
                                                              "max_rhat_log_lik", "sampling_wall_s", "settings")},
                   "methods": {}}
            for key in METHOD_KEYS:
                vals = [p[key]["elpd_i"][i] for p in peers if key in p and "elpd_i" in p[key]]
                ks = [p[key]["k"][i] for p in peers if key in p and "k" in p[key]]
                if not vals:
                    continue
                vals = np.asarray(vals, dtype=float)
                mean, sd = float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
                z = (mean - truth["elpd_i"]) / np.sqrt(truth["mcse_elpd_i"] ** 2 + sd**2)
                p = np.exp(vals) if truth["y"] == 1 else 1 - np.exp(vals)
                dflags = [p[key]["doubtful_i"][i] for p in peers if key in p and "doubtful_i" in p[key]]
                row["methods"][key] = {"elpd_i_mean": mean, "elpd_i_sd": sd, "diff": mean - truth["elpd_i"],
                                       "doubtful_share": float(np.mean(dflags)) if dflags else None,
                                       "z": float(z), "within_mc_error": bool(abs(z) <= 2.0),
                                       "p_loo_mean": float(np.mean(p)),
                                       "p_loo_diff": float(np.mean(p) - truth["p_loo"]),
                                       "k_mean": float(np.mean(ks)), "n_resamplings": len(vals)}
            rows.append(row)
            log(f"refit {name} obs {i}: refit elpd_i {truth['elpd_i']:.3f} +- {truth['mcse_elpd_i']:.3f}; "
                + ", ".join(f"{k} {v['elpd_i_mean']:.3f} (z {v['z']:.1f})" for k, v in row["methods"].items()), logfile)
        summary = {}
        for key in METHOD_KEYS:
            ms = [r["methods"][key] for r in rows if key in r["methods"]]
            if ms:
                summary[key] = {"within_mc_error": int(sum(m["within_mc_error"] for m in ms)), "of": len(ms),
                                "mean_abs_diff": float(np.mean([abs(m["diff"]) for m in ms])),
                                "max_abs_diff": float(np.max([abs(m["diff"]) for m in ms])),
                                "sum_diff_over_targets": float(np.sum([m["diff"] for m in ms])),
                                "mean_abs_p_loo_diff": float(np.mean([abs(m["p_loo_diff"]) for m in ms]))}
                if all(m.get("doubtful_share") is not None for m in ms):
                    # the tool's own warning: marked doubtful on at least half of the resamplings
                    flagged = [m["doubtful_share"] >= 0.5 for m in ms]
                    summary[key]["flagged_doubtful"] = int(sum(flagged))
                    summary[key]["missed_and_not_flagged"] = int(sum(
                        (not m["within_mc_error"]) and not f for m, f in zip(ms, flagged)))
        control = control_check(cdir, name, targets)
        if "z" in control:
            log(f"refit control {name}: in-sample lpd_i of the refit settings on the full data vs the main fit: "
                f"|z| > 2 for {100 * control['frac_abs_z_gt_2']:.0f}% of observations; mean difference "
                f"{control['mean_diff_all']:+.4f} (all), {control['mean_diff_targets']:+.4f} (refit targets)", logfile)
        save_json(cdir / f"refits_{name}.json",
                  {"model": name, "main_fit": {k: mc[k] for k in ("max_rhat", "divergences")},
                                                 "rows": rows, "summary": summary, "control": control})
