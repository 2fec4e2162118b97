"""Assemble ``ovarian.json`` (everything) and ``ovarian.md`` (the tables) from the cached stages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from ovarian_common import MODEL_LABEL, PAPER_TABLE1, PAPERS_SEVEN, THRESHOLD, load_json, machine_info, save_json
from stage_table1 import ROWS, row_key

METHOD_ORDER = ("arviz_plain", "arviz_mm", "arviz_mm_default_cov", "bayesianquilts", "ppl_loo_papers7", "ppl_loo")
METHOD_LABEL = {"arviz_plain": "arviz_stats.loo (plain PSIS)",
                "arviz_mm": "arviz_stats.loo_moment_match (split; cov=False, identical results when S < 10 d)",
                "arviz_mm_default_cov": "arviz_stats.loo_moment_match (split, default cov=True)",
                "bayesianquilts": "bayesianquilts.metrics.ais (authors)",
                "ppl_loo_papers7": "ppl_loo, papers' seven transforms", "ppl_loo": "ppl_loo, all eleven (default)"}


def ms(values, fmt="{:.1f}"):
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return "n/a"
    sd = float(np.std(v, ddof=1)) if v.size > 1 else 0.0
    return f"{fmt.format(float(np.mean(v)))} ± {fmt.format(sd)}"


def _r3(a):
    return np.round(np.asarray(a, dtype=float), 3)


def table1_section(t1, model_idx, R):
    res = t1["resamplings"][:R]  # a stage run with a larger setting may have cached more
    rows = []
    for label, ts in ROWS:
        key = row_key(ts)
        paper = PAPER_TABLE1.get(tuple(ts))
        papers = [r["counts_papers"][key] for r in res]
        project = [r["counts_project"][key] for r in res]
        rows.append({"row": label, "transforms": list(ts), "paper": None if paper is None else list(paper[model_idx]),
                     "ours_papers_criterion": {"mean": float(np.mean(papers)), "sd": _sd(papers),
                                               "per_resampling": papers},
                     "ours_project_criterion": {"mean": float(np.mean(project)), "sd": _sd(project),
                                                "per_resampling": project}})
    engine = {k: {"mean": float(np.mean([r[k] for r in res])), "sd": _sd([r[k] for r in res]),
                  "per_resampling": [r[k] for r in res]}
              for k in ("engine_final_above", "engine_final_failed", "engine_final_doubtful")}
    walls = [r["wall_s"] for r in res]
    return {"rows": rows, "engine_final": engine, "settings": t1.get("settings"),
            "wall_s_first_call_jit_included": walls[0],
            "wall_s_later_calls": {"mean": float(np.mean(walls[1:] or walls)),
                                                                                 "sd": _sd(walls[1:] or walls)},
            "elpd_psis": [r["elpd_psis"] for r in res], "elpd_adaptive": [r["elpd_adaptive"] for r in res],
            "per_observation": {"k_psis": [_r3(r["k_psis"]) for r in res],
                                "min_k_weights_by_transform": [_r3(r["min_k_weights"]) for r in res],
                                "min_k_by_transform": [_r3(r["min_k"]) for r in res],
                                "transform_used": [r["transform_used"] for r in res]}}


def _sd(v):
    v = np.asarray(v, dtype=float)
    return float(np.std(v, ddof=1)) if v.size > 1 else 0.0


def peers_section(pe):
    out = {}
    for m in METHOD_ORDER:
        recs = [r[m] for r in pe["resamplings"] if m in r and "above_0.7" in r[m]]
        errs = sorted({r[m]["error"] for r in pe["resamplings"] if m in r and "error" in r[m]})
        if not recs:
            out[m] = {"error": errs}
            continue
        per_obs = [r["wall_per_worked_obs_s"] for r in recs if r["wall_per_worked_obs_s"] is not None]
        out[m] = {"n_resamplings": len(recs), "above_0.7": [r["above_0.7"] for r in recs],
                  "above_good_k": [r["above_good_k"] for r in recs], "good_k": recs[0]["good_k"],
                  "elpd": [r["elpd"] for r in recs], "wall_s": [r["wall_s"] for r in recs],
                  "n_worked": [r["n_worked"] for r in recs], "wall_per_worked_obs_s": per_obs,
                  "wall_per_psis_failure_s": [r["wall_per_psis_failure_s"] for r in recs], "errors_elsewhere": errs}
        for extra in ("failed", "doubtful"):
            if extra in recs[0]:
                out[m][extra] = [r[extra] for r in recs]
    out["identities"] = [r["identities"] for r in pe["resamplings"]]
    out["ppl_loo_rerun"] = int(sum(bool(r.get("ppl_loo_rerun_with_current_engine")) for r in pe["resamplings"]))
    return out


def goals(models, T1, PE, RF):
    g = {}
    paper_all = {"logistic": 0.3, "relu": 0.0}
    for name in models:
        row = next(r for r in T1[name]["rows"] if r["transforms"] == list(PAPERS_SEVEN))
        allrow = T1[name]["rows"][-1]
        mm = PE[name].get("arviz_mm", {})
        pp = PE[name].get("ppl_loo", {})
        wpo_mm = float(np.mean(mm["wall_per_worked_obs_s"])) if mm.get("wall_per_worked_obs_s") else None
        wpo_pl = float(np.mean(pp["wall_per_worked_obs_s"][1:] or pp["wall_per_worked_obs_s"])) \
            if pp.get("wall_per_worked_obs_s") else None
        rf = RF.get(name, {}).get("summary", {}).get("ppl_loo")
        g[name] = {
            "failures_all_seven_papers_criterion": row["ours_papers_criterion"]["mean"],
            "failures_all_eleven_papers_criterion": allrow["ours_papers_criterion"]["mean"],
            "failures_all_eleven_project_criterion": allrow["ours_project_criterion"]["mean"],
            "engine_final_above_0.7": T1[name]["engine_final"]["engine_final_above"]["mean"],
            "paper_all_seven": paper_all[name],
            "failures_goal_met": row["ours_papers_criterion"]["mean"] <= paper_all[name] + 1e-12,
            "refit_within_mc_error": None if rf is None else f"{rf['within_mc_error']}/{rf['of']}",
            "refit_goal_met": None if rf is None else rf["within_mc_error"] == rf["of"],
            "refit_missed_but_marked_doubtful": None if rf is None or "flagged_doubtful" not in rf else (
                f"{rf['of'] - rf['within_mc_error'] - rf['missed_and_not_flagged']}/"
                f"{rf['of'] - rf['within_mc_error']}"),
            "wall_per_adapted_obs_ppl_loo_s": wpo_pl, "wall_per_adapted_obs_arviz_mm_s": wpo_mm,
            "speed_goal_met": None if (wpo_mm is None or wpo_pl is None) else wpo_pl < wpo_mm,
        }
    return g


def markdown(cfg, models, MC, T1, PE, RF, ADVI, ROC, G, out=None):
    L = []
    w = L.append
    w(f"# Ovarian benchmark: Table 1 of the gradient-flow LOO paper, beside the peers ({cfg['mode']} mode)\n")
    w("Regenerate everything: `.venv/bin/python benchmarks/ovarian/run.py"
      + (" --reduced" if cfg["mode"] == "reduced" else "")
      + "` (stages are cached under `benchmarks/.cache/ovarian/`; delete a file there to recompute it).\n")
    w("Timings were taken on a shared 2-core machine with other jobs running: they are inflated and noisy.\n")
    w("## MCMC (Stan NUTS through PyStan 3, the project's `stan_models/`)\n")
    w("| model | chains x (warmup + draws) | adapt_delta / max depth | max R-hat | min ESS bulk / tail | R-hat log_lik "
      "| divergences | depth saturated | sampling wall |")
    w("|---|---|---|---|---|---|---|---|---|")
    for name in models:
        m = MC[name]["main"]
        s = m["settings"]
        w(f"| {MODEL_LABEL[name]} | {s['chains']} x ({s['warmup']} + {s['draws']}) | {s['adapt_delta']} / "
          f"{s['max_depth']} | "
          f"{m['max_rhat']:.3f} | {m['min_ess_bulk']:.0f} / {m['min_ess_tail']:.0f} | {m['max_rhat_log_lik']:.3f} | "
          f"{m['divergences']} | {100 * m['treedepth_saturated_fraction']:.0f}% | "
          f"{m['sampling_wall_s'] / 60:.1f} min |")
    for name in models:
        rs = MC[name]["refits"]
        if rs:
            s = next(iter(rs.values()))["settings"]
            w(f"\nRefits of {MODEL_LABEL[name]} ({len(rs)}, {s['chains']} x ({s['warmup']} + {s['draws']}) each): max "
              "R-hat "
              f"{max(r['max_rhat'] for r in rs.values()):.3f}, max R-hat of log_lik "
              f"{max(r['max_rhat_log_lik'] for r in rs.values()):.3f}, divergences "
              f"{sum(r['divergences'] for r in rs.values())}, total sampling "
              f"{sum(r['sampling_wall_s'] for r in rs.values()) / 60:.0f} min.")
    w("")
    n_done = ", ".join(f"{n}: {len(T1[n]['rows'][0]['ours_papers_criterion']['per_resampling'])}" for n in models)
    w(f"## Table 1: observations with k > {THRESHOLD} after the transformations (mean ± sd over resamplings of "
      f"s = {cfg['s']} draws; resamplings done {n_done})\n")
    w("Papers' criterion: k-hat of the importance weights alone (as the papers). Project's criterion: the larger of "
      "the weights' k-hat and the elpd numerator's k-hat. Every transformation over hbar = 4^-r, r = 0..10 "
      "(MM1/MM2/MM3 "
      "at hbar = 1, mm_iter 1-3 iterations, newton(_mix) steps 1, 1/2, 1/4).\n")
    hdr = "| transformations |"
    sep = "|---|"
    for name in models:
        hdr += f" {name}: paper | {name}: ours (papers') | {name}: ours (project's) |"
        sep += "---|---|---|"
    w(hdr)
    w(sep)
    for j, (label, ts) in enumerate(ROWS):
        line = f"| {label} |"
        for name in models:
            r = T1[name]["rows"][j]
            p = r["paper"]
            line += (f" {'—' if p is None else f'{p[0]} ± {p[1]}'} | "
                     f"{ms(r['ours_papers_criterion']['per_resampling'])} |"
                     f" {ms(r['ours_project_criterion']['per_resampling'])} |")
        w(line)
    line = "| engine's final answer (all eleven; also needs an invertible map and ESS >= min(100, S/10)) |"
    for name in models:
        e = T1[name]["engine_final"]
        line += f" — | {ms(e['engine_final_above']['per_resampling'])} (k > 0.7) | " \
                f"{ms(e['engine_final_failed']['per_resampling'])} failed, " \
                f"{ms(e['engine_final_doubtful']['per_resampling'])} doubtful |"
    w(line)
    for name in models:
        t = T1[name]
        w(f"\n{MODEL_LABEL[name]}: one `pl.loo` call per resampling (all eleven transformations, k_threshold 0.7): "
          f"{t['wall_s_first_call_jit_included']:.1f} s for the first (JIT compilation included), then "
          f"{t['wall_s_later_calls']['mean']:.1f} ± {t['wall_s_later_calls']['sd']:.1f} s. elpd_loo plain PSIS "
          f"{ms(t['elpd_psis'])}, adaptive {ms(t['elpd_adaptive'])}.")
        sp = t["density_spread_resampling_0"]
        w(f"Over the draws of resampling 0, log p~(theta | D) spans {sp['log_posterior']['range']:.0f} nats (sd "
          f"{sp['log_posterior']['sd']:.0f}; ESS of exp(log p~) {sp['log_posterior']['ess_of_exp']:.1f}); the summed "
          f"log-likelihood spans {sp['sum_log_lik']['range']:.1f} nats (ESS {sp['sum_log_lik']['ess_of_exp']:.0f}). "
          "KL and "
          "Var move each draw in proportion to p~(theta | D) (Eq. 18-19 with the step rule Eq. 21), so with an ESS "
          "near 1 they move one draw and leave k unchanged.")
    w("")
    w("## Peers on identical draws\n")
    for name in models:
        pe = PE[name]
        n_r = max((v.get("n_resamplings", 0) for v in pe.values() if isinstance(v, dict)), default=0)
        w(f"### {MODEL_LABEL[name]} (first {n_r} resamplings of Table 1, s = {cfg['s']}; mean ± sd)\n")
        w("| method | k > 0.7 | k > good_k | elpd_loo | wall [s] | observations worked on | wall per worked obs [s] |")
        w("|---|---|---|---|---|---|---|")
        for m in METHOD_ORDER:
            v = pe.get(m, {})
            if "above_0.7" not in v and not v.get("error"):
                continue
            if "above_0.7" not in v:
                w(f"| {METHOD_LABEL[m]} | not run: {'; '.join(v.get('error', [])) or 'n/a'} | | | | | |")
                continue
            w(f"| {METHOD_LABEL[m]} (n = {v['n_resamplings']}) | {ms(v['above_0.7'])} | {ms(v['above_good_k'])} "
              f"(good_k {v['good_k']:.3f}) | {ms(v['elpd'], '{:.2f}')} | {ms(v['wall_s'])} | {ms(v['n_worked'])} | "
              f"{ms(v['wall_per_worked_obs_s'], '{:.2f}') if v['wall_per_worked_obs_s'] else '—'} |")
        ident = pe["identities"]
        worst = {k: max(d[k] for d in ident) for k in ident[0]}
        w("\nChecks (max over resamplings): " + "; ".join(f"{k} = {v:.2e}" for k, v in worst.items()) + ".")
        if "ppl_loo" in pe and "wall_s" in pe["ppl_loo"]:
            w(f"ppl_loo's first call includes JIT compilation ({pe['ppl_loo']['wall_s'][0]:.1f} s); arviz_stats moment "
              "matching is timed after compiling the JAX functions it calls.\n")
        if pe.get("ppl_loo_rerun"):
            w(f"The ppl_loo rows of {pe['ppl_loo_rerun']} resamplings were rerun with the current engine after the "
              "peers had been timed (the other methods' results are the cached ones): the machine's load differed "
              "between the two runs, so compare wall times across methods with care.\n")
    w("## Ground truth: refits without the observation\n")
    for name in models:
        if name not in RF:
            continue
        rf = RF[name]
        keys = [k for k in METHOD_ORDER if any(k in r["methods"] for r in rf["rows"])]
        w(f"### {MODEL_LABEL[name]}\n")
        w("elpd_i of each method: mean over the peer resamplings, with z = (mean - refit) / sqrt(MCSE_refit² + "
          "sd_resamplings²); LOO predictive probability p = P(y_i = 1 | y_-i).\n")
        w("| obs | y | k (all draws) | refit elpd_i ± MCSE | refit p | " + " | ".join(METHOD_LABEL[k] for k in keys)
          + " |")
        w("|---|---|---|---|---|" + "---|" * len(keys))
        for r in rf["rows"]:
            t = r["refit"]
            cells = []
            for k in keys:
                m = r["methods"].get(k)
                cells.append("—" if m is None else f"{m['elpd_i_mean']:.3f} (z {m['z']:+.1f}; p {m['p_loo_mean']:.3f})")
            w(f"| {r['obs']} | {t['y']} | {r['k_psis_all_draws']:.2f} | {t['elpd_i']:.3f} ± {t['mcse_elpd_i']:.3f} | "
              f"{t['p_loo']:.3f} | " + " | ".join(cells) + " |")
        c = rf.get("control", {})
        if "z" in c:
            w(f"\nControl: the refit settings on the full data against the main fit, in-sample lpd_i of all 54 "
              f"observations: |z| > 2 for {100 * c['frac_abs_z_gt_2']:.0f}%, mean difference "
              f"{c['mean_diff_all']:+.4f} nats "
              f"(refit targets: {c['mean_diff_targets']:+.4f}; z {', '.join(f'{v:+.1f}' for v in c['z_targets'])}).")
        w("\n| method | within MC error (abs z <= 2) | mean abs diff | max abs diff | mean abs diff of p "
          "| marked doubtful by the tool | missed and not marked |")
        w("|---|---|---|---|---|---|---|")
        for k in keys:
            s = rf["summary"][k]
            fl = (f"{s['flagged_doubtful']}/{s['of']} | {s['missed_and_not_flagged']}/{s['of']}"
                  if "flagged_doubtful" in s else "— | —")
            w(f"| {METHOD_LABEL[k]} | {s['within_mc_error']}/{s['of']} | {s['mean_abs_diff']:.3f} | "
              f"{s['max_abs_diff']:.3f} "
              f"| {s['mean_abs_p_loo_diff']:.3f} | {fl} |")
        w("\n'Marked doubtful': `res.doubtful` on at least half of the peer resamplings (k above the "
          "threshold, good candidates that disagree, or candidates that failed the change-of-variables "
          "check of the draws, docs/method.md section 4).")
        cons = None if out is None else Path(out) / "consistency.json"  # written by consistency.py (full mode)
        if cons is not None and cons.exists() and name in (cj := load_json(cons)):
            ic = cj[name]["identity_check"]
            bad = sorted({r["obs"] for r in ic if r["markov_p_bound"] < 1e-6})
            rc = cj[name]["refit_consistency"]
            dev = max(abs(r["lpd_main_predicted_from_refit"] - r["lpd_main"]) for r in rc)
            w(f"\n`benchmarks/ovarian/consistency.py`: the refits predict the main fit's in-sample lpd_i by "
              f"reverse importance sampling within {dev:.3f} nats for all {len(rc)} targets (the refits and the "
              f"main fit are consistent); PMM1/PMM2 maps of the main fit's draws reach a posterior density "
              f"ratio impossible for posterior draws (Markov bound p < 1e-6) for {len(bad)} of the "
              f"{len({r['obs'] for r in ic})} targets{': ' + ', '.join(map(str, bad)) if bad else ''}.")
        w("")
    w("## LOO ROC / precision-recall, MCMC vs mean-field ADVI (the papers' Fig. 3)\n")
    w("| model | fit, weights | AUC | average precision |")
    w("|---|---|---|---|")
    for name in models:
        for k, v in ROC[name].items():
            if isinstance(v, dict):
                w(f"| {name} | {k} | {v['auc']:.3f} | {v['average_precision']:.3f} |")
    def rel(p):  # the repository-relative path where the file is under it
        p = Path(p).resolve()
        root = Path(__file__).resolve().parents[2]
        return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)

    w("\nPlots: " + ", ".join(f"`{rel(ROC[n]['png'])}`" for n in models) + f", `{rel(ROC['fig3_png'])}`.\n")
    for name in models:
        a = ADVI[name]
        w(f"ADVI {name}: {a['fit']['method']}, {a['fit']['steps']} steps (lr {a['fit']['lr']}), {a['fit']['draws']} "
          "draws; "
          f"k-hat of p/q over the draws {a['k_hat_q_vs_posterior']:.2f}; LOO with Eq. 13: plain k > 0.7 for "
          f"{a['above_0.7_plain']} observations, after adaptation {a['above_0.7_adaptive']} ({a['failed']} failed); "
          f"elpd_loo plain {a['elpd_plain']:.2f}, adaptive {a['elpd']:.2f}. Treating q as the posterior (plain PSIS "
          f"on the ADVI draws, the authors' 'variational' mode without a transformation): "
          f"{a['above_0.7_q_as_posterior']} observations with k > 0.7, elpd_loo "
          f"{float(np.sum(a['elpd_i_q_as_posterior'])):.2f}.")
    w("\n## Goals\n")
    for name in models:
        g = G[name]
        missed = format(g['failures_all_seven_papers_criterion'] - g['paper_all_seven'], '.2f')
        w(f"- {MODEL_LABEL[name]}: failures with the papers' seven (papers' criterion) "
          f"{g['failures_all_seven_papers_criterion']:.2f} vs the paper's {g['paper_all_seven']} "
          f"({'met' if g['failures_goal_met'] else 'missed by ' + missed}); "
          f"all eleven: {g['failures_all_eleven_papers_criterion']:.2f} (papers'), "
          f"{g['failures_all_eleven_project_criterion']:.2f} "
          f"(project's), engine final {g['engine_final_above_0.7']:.2f}. ppl_loo elpd_i within MC error of the refits: "
          f"{g['refit_within_mc_error']}"
          + (f" (of the misses, marked doubtful by the tool: {g['refit_missed_but_marked_doubtful']})"
             if g.get("refit_missed_but_marked_doubtful") else "")
          + ". Wall per adapted observation: ppl_loo "
          f"{_fmt(g['wall_per_adapted_obs_ppl_loo_s'])} s vs arviz_stats moment matching "
          f"{_fmt(g['wall_per_adapted_obs_arviz_mm_s'])} s ({'met' if g['speed_goal_met'] else 'missed'}).")
    return "\n".join(L) + "\n"


def density_spread(cdir, name, s):
    """Spread over the draws of resampling 0 of the unnormalized log posterior, of the summed
    log-likelihood and of the log prior, and the effective sample size of ``exp`` of each: the
    KL and Var directions (Eq. 18-19) are proportional to the posterior *density*, so with an
    ESS near 1 only one draw moves (notes, section 3.3)."""
    import jax
    from ovarian_common import jax_model
    from resample import Draws, resample_index
    from run import fit_path

    model = jax_model(name)
    d = Draws(fit_path(cdir, name), name)
    idx = resample_index(d.n_total, s, 0)
    th = jax.numpy.asarray(model.unconstrain(d.subset(idx)[0]))
    lp = np.asarray(jax.vmap(model.logp)(th))
    ll = np.asarray(model.log_lik(th)).sum(axis=1)
    out = {}
    for key, v in (("log_posterior", lp), ("sum_log_lik", ll), ("log_prior", lp - ll)):
        v = v - v.max()
        w = np.exp(v)
        out[key] = {"sd": float(np.std(v)), "range": float(-v.min()), "ess_of_exp": float(w.sum() ** 2 / np.sum(w**2))}
    return out


def _fmt(x):
    return "n/a" if x is None else f"{x:.2f}"


def run(cfg, cdir, out, logfile, models):
    from run import fit_path

    MC, T1, PE, RF, ADVI = {}, {}, {}, {}, {}
    for j, name in enumerate(models):
        main = load_json(fit_path(cdir, name).with_suffix(".json"))
        refits = {}
        for p in sorted((cdir / "refits").glob(f"{name}_without_*.json")):
            refits[p.stem.split("_")[-1]] = load_json(p)
        MC[name] = {"main": main, "refits": refits}
        T1[name] = table1_section(load_json(cdir / f"table1_{name}.json"), 0 if name == "logistic" else 1,
                                  cfg["resamplings"][name])
        PE[name] = peers_section(load_json(cdir / f"peers_{name}.json"))
        if (cdir / f"refits_{name}.json").exists():
            RF[name] = load_json(cdir / f"refits_{name}.json")
        ADVI[name] = load_json(cdir / f"advi_{name}.json")
        T1[name]["density_spread_resampling_0"] = density_spread(cdir, name, cfg["s"])
    ROC = load_json(cdir / "roc.json")
    G = goals(models, T1, PE, RF)
    doc = {"settings": cfg, "machine": machine_info(), "mcmc": MC, "table1": T1, "peers": PE, "refits": RF,
           "advi": ADVI, "roc": ROC, "goals": G,
           "paper_table1": {row_key(k): {"logistic": v[0], "relu": v[1]} for k, v in PAPER_TABLE1.items()}}
    out.mkdir(parents=True, exist_ok=True)
    save_json(out / "ovarian.json", doc)
    (out / "ovarian.md").write_text(markdown(cfg, models, MC, T1, PE, RF, ADVI, ROC, G, out))
