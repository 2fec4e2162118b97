"""The cost of ``pl.loo`` on an ordinary data set, as a ratio to one fit of the model: logistic regression on the
Wisconsin breast-cancer data (569 tumours, 30 standardized features; :func:`ppl_loo.datasets.load_breast_cancer`) in
PyMC, with a Normal(0, 1) and a regularized-horseshoe prior (the models of the ground-truth suite,
``benchmarks/truth/problems.py``).

Per prior, in one process, as a user would run it: ``pm.sample`` (4 x 1,000 draws, PyMC's defaults otherwise),
``pm.compute_log_likelihood``, ``arviz_stats.loo``, ``pl.loo(idata, model)``, then each after-LOO function on its
result (``loo_pit``, ``loo_score`` CRPS and SCRPS, ``loo_r2``, ``loo_metrics`` accuracy, ``loo_expectations``,
``loo_roc``). Each wall time is printed as a ratio to the ``pm.sample`` call. Where the ground-truth suite's refits
of the model are committed (``benchmarks/results/truth/breast_cancer_<prior>.json``: ``pm.sample`` without each of
the 24 observations of highest plain k-hat), ``pl.loo``'s estimates on those observations are scored against them:
mean and max |error| and silent failures (|error| above 3 combined Monte Carlo SEs on an observation not marked
doubtful), beside plain PSIS's.

    nice -n 10 .venv/bin/python benchmarks/breast_cancer.py     # both priors; benchmarks/results/breast_cancer.json
    .venv/bin/python benchmarks/breast_cancer.py --reduced      # Normal prior, pl.loo only

Prints a table and writes ``benchmarks/results/breast_cancer.json`` (``--reduced``: ``breast_cancer_reduced.json``,
or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# benchmarks/pymc.py would shadow the pymc package: this folder off the path, the repository and the truth suite on it
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "truth"))

RESULTS = HERE / "results"
SEED = 20261129


def _timed(f):
    t0 = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t0


def committed_truth(prior):
    """``{i: (value, mcse)}`` of the ground-truth suite's refits of this model, or None where they are not committed."""
    path = RESULTS / "truth" / f"breast_cancer_{prior}.json"
    if not path.exists():
        return None
    from truth_common import truth_value

    rep = json.loads(path.read_text())
    return {int(i): truth_value(r) for i, r in rep["truth"].items()}


def score(elpd, mcse, doubtful, truth):
    """Mean and max |error|, error of the sum and silent failures on the observations of ``truth``."""
    obs = sorted(truth)
    tv = np.array([truth[i][0] for i in obs])
    ts = np.array([truth[i][1] for i in obs])
    e, s, d = np.asarray(elpd)[obs], np.asarray(mcse)[obs], np.asarray(doubtful)[obs]
    err = e - tv
    silent = (np.abs(err) > 3.0 * np.hypot(s, ts)) & ~d
    return {"n": len(obs), "mean_abs_error": float(np.mean(np.abs(err))), "max_abs_error": float(np.max(np.abs(err))),
            "error_of_sum": float(err.sum()), "silent_failures": int(silent.sum()), "doubtful": int(d.sum()),
            "silent_obs": [int(i) for i, f in zip(obs, silent) if f]}


def run_prior(prior, draws, after_loo):
    import arviz_stats as azs
    import pymc as pm
    from problems import breast_cancer_model

    import ppl_loo as pl
    from ppl_loo.datasets import load_breast_cancer

    X, y = load_breast_cancer()
    model = breast_cancer_model(X, y, prior)
    target_accept = 0.95 if prior == "horseshoe" else 0.8
    with model:
        idata, t_fit = _timed(lambda: pm.sample(draws=draws, tune=draws, chains=4, random_seed=SEED,
                                                target_accept=target_accept, progressbar=False))
        _, t_ll = _timed(lambda: pm.compute_log_likelihood(idata, progressbar=False))
        if after_loo:  # the replicated data the LOO scores read (arviz_stats.loo_score needs them too)
            _, t_pp = _timed(lambda: pm.sample_posterior_predictive(idata, extend_inferencedata=True,
                                                                    random_seed=SEED, progressbar=False))
    az_res, t_az = _timed(lambda: azs.loo(idata))
    k_plain = np.asarray(az_res.pareto_k).ravel()
    res, t_loo = _timed(lambda: pl.loo(idata, model, random_seed=SEED, progressbar=False))
    n = int(res.n_data_points)
    doubtful = np.asarray(res["doubtful"]).ravel()
    evidence = np.asarray(res["evidence"]).ravel()
    kinds, counts = np.unique(evidence[~doubtful], return_counts=True)
    out = {"prior": prior, "draws": f"4 x {draws}", "n": n, "fit_s": t_fit, "log_lik_s": t_ll, "arviz_loo_s": t_az,
           "plain_k_above_0.7": int(np.sum(k_plain > 0.7)), "pl_loo_s": t_loo, "pl_loo_ratio": t_loo / t_fit,
           "vouched_share": float(1.0 - doubtful.mean()), "doubtful": int(doubtful.sum()),
           "searched": int(np.asarray(res["searched"]).sum()), "evidence": dict(zip(kinds.tolist(), counts.tolist())),
           "mixture_s": (res.mixture_info or {}).get("seconds"), "elpd": float(res.elpd), "se": float(res.se),
           "arviz_elpd": float(az_res.elpd)}
    truth = committed_truth(prior)
    if truth is not None:
        out["vs_refits"] = {"pl_loo": score(res["elpd_i"].values.ravel(), res["mcse_elpd_i"].values.ravel(), doubtful,
                                            truth),
                            "plain_psis": score(np.asarray(az_res.elpd_i).ravel(),
                                                np.asarray(az_res.mcse_elpd_i).ravel() if hasattr(az_res, "mcse_elpd_i")
                                                else np.zeros(n), k_plain > 0.7, truth)}
    if after_loo:
        def prob_benign(params):  # P(y_i = 1 | theta) at each draw, (draws, n)
            if "beta" in params:
                beta = np.asarray(params["beta"])
            else:  # the horseshoe's coefficients from its non-centred parts
                tau, lam, c2 = (np.asarray(params[k]) for k in ("tau", "lam", "c2"))
                lam_t = np.sqrt(c2[..., None] * lam**2 / (c2[..., None] + tau[..., None] ** 2 * lam**2))
                beta = np.asarray(params["z"]) * tau[..., None] * lam_t
            eta = np.asarray(params["alpha"])[..., None] + beta @ X.T
            return 1.0 / (1.0 + np.exp(-eta))

        calls = {
            "loo_pit": lambda: pl.loo_pit(idata, res, model=model, random_seed=0),
            "loo_score_crps": lambda: pl.loo_score(idata, res, model=model, kind="crps", random_seed=0),
            "loo_score_scrps": lambda: pl.loo_score(idata, res, model=model, kind="scrps", random_seed=0),
            "loo_r2": lambda: pl.loo_r2(idata, res, model=model),
            "loo_metrics_acc": lambda: pl.loo_metrics(idata, res, model=model, kind="acc"),
            "loo_expectation": lambda: pl.loo_expectations(idata, res, prob_benign, model=model),
            "loo_roc": lambda: pl.loo_roc(idata, res, model=model),
        }
        out["after_loo"], out["posterior_predictive_s"] = {}, t_pp
        for name, call in calls.items():
            try:
                _, t = _timed(call)
                out["after_loo"][name] = {"s": t, "ratio": t / t_fit}
            except Exception as err:  # noqa: BLE001 - a benchmark records a failure and goes on
                out["after_loo"][name] = {"error": f"{type(err).__name__}: {err}"[:300]}
    return out


def table(rows):
    lines = ["| prior | draws | fit [s] | plain k > 0.7 | pl.loo [s] | ratio | vouched | searched | evidence | "
             "vs refits: mean / max abs error, silent (plain PSIS) |", "|---" * 10 + "|"]
    for r in rows:
        vs = r.get("vs_refits")
        ours, plain = (None, None) if vs is None else (vs["pl_loo"], vs["plain_psis"])
        vs_text = "" if vs is None else (
            f"{ours['mean_abs_error']:.3f} / {ours['max_abs_error']:.3f}, {ours['silent_failures']}"
            f" ({plain['mean_abs_error']:.3f} / {plain['max_abs_error']:.3f}) over {ours['n']}")
        lines.append(f"| {r['prior']} | {r['draws']} | {r['fit_s']:.1f} | {r['plain_k_above_0.7']} | "
                     f"{r['pl_loo_s']:.1f} | {r['pl_loo_ratio']:.2f} | {100 * r['vouched_share']:.1f}% | "
                     f"{r['searched']} | {r['evidence']} | {vs_text} |")
    after = [r for r in rows if r.get("after_loo")]
    if after:
        names = list(after[0]["after_loo"])
        lines += ["", "| prior | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for r in after:
            cells = [f"{c['s']:.1f} s ({c['ratio']:.2f})" if "s" in c else c["error"][:60]
                     for c in r["after_loo"].values()]
            lines.append(f"| {r['prior']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reduced", action="store_true", help="Normal prior, pl.loo only")
    ap.add_argument("--priors", default=None, help="comma-separated: normal,horseshoe")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    priors = args.priors.split(",") if args.priors else (["normal"] if args.reduced else ["normal", "horseshoe"])
    rows = []
    for prior in priors:
        rows.append(run_prior(prior, 1000, after_loo=not args.reduced))
        print(table(rows[-1:]), flush=True)
    print(table(rows))
    name = "breast_cancer_reduced.json" if args.reduced else "breast_cancer.json"
    out = Path(args.out) if args.out else RESULTS / name
    out.write_text(json.dumps({"rows": rows}, indent=1, default=float))
    print(f"wrote {out}")
    return rows


if __name__ == "__main__":
    main()
