"""Reference numbers from R's ``loo`` 2.10.1 for ``tests/test_r_loo_arrays.py``: its array-level functions.

R's side is ``reference_arrays.R`` beside this file (install R ``loo`` 2.10.1 with ``install_r_loo.sh``). The five
cases of ``make_reference.py`` (their draws are read from ``tests/data/r_loo/input.npz``), and one more,
``approx``: 1000 independent draws of the normal mean of ``make_reference.py``'s 13 observations (sigma 1, prior
N(0, 10^2)) from a Gaussian approximation that is shifted by 0.1 and 1.3 times as wide as the exact posterior.

R computes, per case: ``loo`` of R's 3-D array with ``r_eff = relative_eff(exp(array))`` and of the matrix with
the default ``r_eff = 1``; ``psis``, ``sis`` and ``tis`` (normalized and unnormalized log weights, k-hat, n_eff,
tail length), ``psis`` of one column given as a vector; ``gpdfit`` of the Pareto tail of the column with the
largest k-hat (with and without the weakly informative prior, with a grid of 10 points); ``elpd``; on
``normal_outlier`` ``loo.function`` with one observation per call; on ``approx`` ``loo_approximate_posterior``. Of
the ``(S, n)`` weights it keeps ``psis``'s unnormalized (its normalized ones are ``reference.npz``'s
``log_weights``) and ``tis``'s normalized, and the normalizing constants of all three.
R's numbers and the approximation's draws go to ``tests/data/r_loo/arrays.npz``, the versions to ``arrays.json``;
the test needs no R.

    R_LIBS=/work/rlib .venv/bin/python benchmarks/r_loo/make_reference_arrays.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import norm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_reference import OUT, Y, cases, normal_ll, read_case  # noqa: E402

#: the approximation: the exact posterior's mean plus 0.1, its SD times 1.3
Q_SHIFT, Q_SCALE, Q_DRAWS, Q_SEED = 0.1, 1.3, 1000, 23


def approx_draws():
    """``(mu, log_p, log_q)`` of the ``approx`` case: draws of the approximation, the unnormalized log posterior and
    the approximation's log density at them."""
    prec = Y.size + 1 / 100
    mean, sd = Y.sum() / prec, prec**-0.5
    m_q, s_q = mean + Q_SHIFT, Q_SCALE * sd
    mu = np.random.default_rng(Q_SEED).normal(m_q, s_q, size=Q_DRAWS)
    log_p = norm.logpdf(mu, 0.0, 10.0) + normal_ll(mu, Y).sum(axis=1)
    return mu, log_p, norm.logpdf(mu, m_q, s_q)


def write(d, meta, **arrays):
    d.mkdir(parents=True, exist_ok=True)
    (d / "meta.json").write_text(json.dumps(meta))
    for name, value in arrays.items():
        np.ascontiguousarray(value, dtype="<f8").tofile(d / f"{name}.bin")


def main():
    inp = np.load(OUT / "input.npz")
    all_cases = cases(inp["mu"], inp["beta_leverage"], inp["beta_logistic"], inp["example_log_lik"])
    mu_q, log_p, log_q = approx_draws()
    shapes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, c in all_cases.items():
            S, n = c["ll"].shape
            extra = dict(y=Y, mu=inp["mu"].reshape(-1)) if name == "normal_outlier" else {}
            write(Path(tmp) / name, {"S": S, "n": n, "chains": c["chains"], "llfun": bool(extra)}, log_lik=c["ll"],
                  **extra)
            shapes[name] = (S, n)
        ll_q = normal_ll(mu_q, Y)
        write(Path(tmp) / "approx", {"S": Q_DRAWS, "n": Y.size, "chains": 1, "approx": True}, log_lik=ll_q,
              log_p=log_p, log_g=log_q)
        names = [*all_cases, "approx"]
        proc = subprocess.run(["Rscript", str(HERE / "reference_arrays.R"), tmp, *names], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        ref = {}
        for name in names:
            for key, value in read_case(Path(tmp) / name).items():
                if key.endswith(("_lw", "_lw_raw")):
                    value = value.reshape(shapes[name])
                if key == "elpd_estimates":  # R's 2 x 2 table, column by column: rows (elpd, ic), (Estimate, SE)
                    value = value.reshape(2, 2).T
                ref[f"{name}/{key}"] = value
    np.savez_compressed(OUT / "arrays.npz", approx_mu=mu_q, approx_log_p=log_p, approx_log_q=log_q, **ref)
    versions = json.loads(proc.stdout)
    (OUT / "arrays.json").write_text(json.dumps(versions, indent=1) + "\n")
    print(f"wrote {OUT / 'arrays.npz'} (R {versions['r_version']}, loo {versions['loo_version']})")


if __name__ == "__main__":
    main()
