"""Peers on identical draws, on the first ``peer_resamplings`` resamplings of Table 1.

Per resampling and model: ``ppl_loo`` (all eleven transformations, and the papers' seven only),
``arviz_stats.loo`` (plain PSIS), ``arviz_stats.loo_moment_match`` (split) and the authors'
``bayesianquilts`` (logistic model only). Also checks the identities the test asserts: the
engine's plain PSIS (``pareto_k_psis`` and ``pl.loo(data)``) equals ``arviz_stats.loo``; the LOO
predictive probability ``pl.loo_expectations`` equals ``exp(elpd_i)`` (``y = 1``) or
``1 - exp(elpd_i)`` (``y = 0``), since both are the same self-normalized average.
"""

from __future__ import annotations

import resource
import warnings

import numpy as np
from ovarian_common import PAPERS_SEVEN, THRESHOLD, jax_model, load_json, log, machine_info, save_json

METHODS = ("ppl_loo", "ppl_loo_papers7", "arviz_plain", "arviz_mm", "bayesianquilts")


def _summary(r, k_psis):
    k = np.asarray(r["k"], dtype=float)
    out = {
        "method": r["method"],
        "above_0.7": int(np.sum(~(k <= THRESHOLD))),
        "above_good_k": int(np.sum(~(k <= r["good_k"]))),
        "good_k": r["good_k"],
        "elpd": r["elpd"],
        "wall_s": r["wall_s"],
        "n_worked": r["n_worked"],
        "wall_per_worked_obs_s": r["wall_s"] / r["n_worked"] if r["n_worked"] else None,
        "wall_per_psis_failure_s": r["wall_s"] / max(int(np.sum(k_psis > THRESHOLD)), 1),
        "elpd_i": np.asarray(r["elpd_i"], dtype=float),
        "k": k,
    }
    for extra in ("failed", "doubtful", "doubtful_i", "mcse_elpd_i", "timings", "transform"):
        if extra in r:
            out[extra] = r[extra]
    return out


def identities(pl, data, model, ppl, plain):
    """The numbers the test asserts: plain PSIS of the engine vs arviz_stats, and the LOO
    predictive probability of ``pl.loo_expectations`` vs ``exp(elpd_i)``."""
    import jax
    from diagnose import engine_arrays
    from scipy.special import logsumexp

    res = ppl["_res"]
    _, ll_engine, lw_psis = engine_arrays(res, data, model)
    elpd_psis_engine = logsumexp(lw_psis + ll_engine.T, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain_pl = pl.loo(data)  # model=None: plain PSIS from the log_likelihood group
    k_az, e_az = np.asarray(plain["k"]), np.asarray(plain["elpd_i"])
    y = np.asarray(model.y)

    def prob(params):
        theta = model_theta(model, params)
        return np.asarray(jax.nn.sigmoid(jax.vmap(model.linear_predictor)(theta)))

    p_exp = np.asarray(pl.loo_expectations(data, res, prob, model=model)).ravel()
    p_from_elpd = np.where(y == 1, np.exp(res.elpd_i.values.ravel()), 1 - np.exp(res.elpd_i.values.ravel()))
    k_eng = np.asarray(res.pareto_k_psis).ravel()
    k_pl = np.asarray(plain_pl.pareto_k).ravel()
    le1 = k_az <= 1.0  # above 1 the tail fit is ill-conditioned and round-off is amplified (relative check)
    return {
        "max_abs_k_engine_psis_vs_arviz_k_le_1": float(np.max(np.abs(k_eng - k_az)[le1], initial=0.0)),
        "max_rel_k_engine_psis_vs_arviz_k_gt_1": float(np.max((np.abs(k_eng - k_az) / np.abs(k_az))[~le1],
                                                              initial=0.0)),
        "max_abs_k_pl_loo_plain_vs_arviz_k_le_1": float(np.max(np.abs(k_pl - k_az)[le1], initial=0.0)),
        "max_rel_k_pl_loo_plain_vs_arviz_k_gt_1": float(np.max((np.abs(k_pl - k_az) / np.abs(k_az))[~le1],
                                                               initial=0.0)),
        "max_abs_k_engine_psis_vs_arviz": float(np.max(np.abs(k_eng - k_az))),
        "max_abs_elpd_i_engine_psis_vs_arviz": float(np.max(np.abs(elpd_psis_engine - e_az))),
        "max_abs_elpd_i_pl_loo_plain_vs_arviz": float(np.max(np.abs(np.asarray(plain_pl.elpd_i).ravel() - e_az))),
        "abs_elpd_pl_loo_plain_vs_arviz": float(abs(plain_pl.elpd - plain["elpd"])),
        "max_abs_loo_expectations_vs_exp_elpd": float(np.max(np.abs(p_exp - p_from_elpd))),
        "max_abs_stan_log_lik_vs_jax_log_lik": float(np.max(np.abs(
            np.asarray(data["log_likelihood"]["y"].values).reshape(ll_engine.shape) - ll_engine))),
    }


def model_theta(model, params):
    """Unconstrained draws from the constrained ``params`` dict of ``model.constrain``."""
    return np.asarray(model.unconstrain({k: np.asarray(v) for k, v in params.items()}))


def _run_ppl_loo(pl, peers, why_failed, rec, data, model, todo):
    """ppl_loo (all eleven, and the papers' seven when asked) on one resampling, into ``rec``;
    returns the raw ppl_loo and plain-PSIS results and the plain k the summaries are judged by."""
    ppl = peers.run_ppl_loo(pl, data, model)
    plain = peers.run_arviz_plain(data)
    k_psis = np.asarray(plain["k"])
    rec["ppl_loo"] = _summary(ppl, k_psis)
    failed = [i for i, t in enumerate(rec["ppl_loo"]["transform"]) if t == "failed"]
    rec["ppl_loo_failed_diagnosis"] = why_failed(ppl["_res"], model, failed, ppl["_res"].good_k, data=data)
    if "ppl_loo_papers7" in todo:
        rec["ppl_loo_papers7"] = _summary(
            peers.run_ppl_loo(pl, data, model, PAPERS_SEVEN, "ppl_loo (papers' seven)"), k_psis)
    return ppl, plain, k_psis


def run(cfg, cdir, out, logfile, models):
    import peers
    from diagnose import why_failed
    from resample import Draws, resample_index
    from run import fit_path

    import ppl_loo as pl

    for name in models:
        path = cdir / f"peers_{name}.json"
        done = load_json(path) if path.exists() else {"model": name, "resamplings": []}
        draws = Draws(fit_path(cdir, name), name)
        model = jax_model(name)
        R = cfg["peer_resamplings"][name]
        todo = cfg["peer_methods"][name]
        # resamplings cached by an older engine (no per-observation doubtful flags): rerun ppl_loo
        # only, keeping the peers' cached results (bayesianquilts takes ~10 min per resampling)
        for rec in done["resamplings"][:R]:
            if "doubtful_i" in rec.get("ppl_loo", {}):
                continue
            data = draws.tree(resample_index(draws.n_total, cfg["s"], rec["r"]), model)
            ppl, plain, _ = _run_ppl_loo(pl, peers, why_failed, rec, data, model, todo)
            rec["identities"] = identities(pl, data, model, ppl, plain)
            rec["ppl_loo_rerun_with_current_engine"] = True
            save_json(path, done)
            log(f"peers {name} r={rec['r']}: ppl_loo rerun with the current engine: {rec['ppl_loo']['above_0.7']} > "
                "0.7, "
                f"{rec['ppl_loo']['doubtful']} doubtful, {rec['ppl_loo']['wall_s']:.1f} s", logfile)
        for r in range(len(done["resamplings"]), R):
            data = draws.tree(resample_index(draws.n_total, cfg["s"], r), model)
            rec = {"r": r}
            ppl, plain, k_psis = _run_ppl_loo(pl, peers, why_failed, rec, data, model, todo)
            rec["arviz_plain"] = _summary(plain, k_psis)
            if "arviz_mm" in todo:
                rec["arviz_mm"] = _summary(peers.run_arviz_mm(data, plain["_res"], model), k_psis)
            else:
                rec["arviz_mm"] = {"error": "not run in this mode (O(d^3) per observation, see ovarian_common.REDUCED)"}
            if r == 0 and name in cfg["arviz_mm_default_cov_once"]:
                d = _summary(peers.run_arviz_mm(data, plain["_res"], model, cov=True), k_psis)
                d["max_abs_elpd_i_diff_vs_cov_false"] = float(np.max(np.abs(d["elpd_i"] - rec["arviz_mm"]["elpd_i"])))
                rec["arviz_mm_default_cov"] = d
            if "bayesianquilts" in todo and r < cfg["bq_resamplings"]:
                try:
                    rec["bayesianquilts"] = _summary(peers.run_bayesianquilts(data, model, name), k_psis)
                except Exception as exc:  # reported with the error, never hidden
                    rec["bayesianquilts"] = {"error": f"{type(exc).__name__}: {exc}"}
            elif "bayesianquilts" in todo:
                rec["bayesianquilts"] = {
                    "error": f"not run on this resampling (only the first {cfg['bq_resamplings']})"}
            elif name == "logistic":
                rec["bayesianquilts"] = {"error": "not run in this mode (not a dependency of the project; minutes "
                                                  "per resampling)"}
            else:
                rec["bayesianquilts"] = {"error": "not run on the ReLU net: (S, n, d) float64 arrays of 2.0 GB each "
                                                  "(S = 1000, n = 54, d = 4615), several alive at once"}
            rec["identities"] = identities(pl, data, model, ppl, plain)
            rec["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
            rec["machine"] = machine_info()
            done["resamplings"].append(rec)
            save_json(path, done)
            msg = ", ".join(f"{m}: {rec[m]['above_0.7']} > 0.7, {rec[m]['wall_s']:.1f} s" for m in METHODS
                            if "above_0.7" in rec.get(m, {}))
            log(f"peers {name} r={r}: {msg}", logfile)
