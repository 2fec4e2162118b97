"""Reference numbers from R's ``loo`` package for ``tests/test_r_loo_reference.py`` (issue 28).

Writes a fixed input, a normal mean with known sigma and one outlying observation (4 chains x 500 draws of
``mu`` from ``ppl_loo.sampling.sample_nuts``), to ``tests/data/r_loo/input.npz``, then runs ``Rscript`` on it
(``reference.R`` beside this file: ``loo``, ``pareto_k_ids``, ``pareto_k_table``, ``E_loo`` of a pointwise
quantity for the mean, variance and quantiles with their Pareto k-hats, and the LOO predictive metrics), and
writes what R printed to ``tests/data/r_loo/reference.json`` and R's smoothed log weights (``psis``, normalized)
into ``input.npz`` as ``r_log_weights`` ``(S, n)``. The test reads both files, so it needs no R; this
script needs R with ``loo`` (Debian: ``apt-get install r-base-core r-cran-loo``).

    .venv/bin/python benchmarks/r_loo/make_reference.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE.parent]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "r_loo"
#: 12 well-behaved observations and one outlier (its plain-PSIS k-hat is above 0.7)
Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5, 4.5])
PROBS = (0.05, 0.5, 0.9)


def quantity(mu):
    """The pointwise quantity whose LOO summaries R and ppl_loo compute: ``(mu - y_i)^2 + i``, ``(S, n)``."""
    return (np.asarray(mu).reshape(-1, 1) - Y) ** 2 + np.arange(Y.size)


def make_input():
    import jax.scipy.stats as jst

    import ppl_loo as pl
    from ppl_loo.sampling import sample_nuts

    model = pl.JaxModel({"mu": ((), None)}, lambda v: jst.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    mu = np.asarray(data["posterior"]["mu"].values, dtype=float)  # (chain, draw)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez(OUT / "input.npz", mu=mu, y=Y, probs=np.asarray(PROBS))
    return mu


def main():
    mu = make_input()
    flat = mu.reshape(-1)
    ll = -0.5 * np.log(2 * np.pi) - 0.5 * (Y[None, :] - flat[:, None]) ** 2
    np.savetxt(OUT / "log_lik.tmp", ll, fmt="%.17g")
    np.savetxt(OUT / "quantity.tmp", quantity(flat), fmt="%.17g")
    np.savetxt(OUT / "pred.tmp", np.broadcast_to(flat[:, None], ll.shape), fmt="%.17g")
    try:
        proc = subprocess.run(["Rscript", str(HERE / "reference.R"), str(OUT), ",".join(map(str, PROBS))],
                              capture_output=True, text=True, check=False)
    finally:
        for f in ("log_lik.tmp", "quantity.tmp", "pred.tmp"):
            (OUT / f).unlink(missing_ok=True)
        if proc.returncode == 0:  # R's own smoothed weights, normalized: the input of the weighted arithmetic
            lw = np.loadtxt(OUT / "log_weights.tmp")
            np.savez(OUT / "input.npz", mu=mu, y=Y, probs=np.asarray(PROBS), r_log_weights=lw)
        (OUT / "log_weights.tmp").unlink(missing_ok=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    ref = json.loads(proc.stdout)
    ref["r_version"] = ref["r_version"][0] if isinstance(ref["r_version"], list) else ref["r_version"]
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1))
    print(f"wrote {OUT / 'input.npz'} and {OUT / 'reference.json'} (R {ref['r_version']}, loo {ref['loo_version']})")


if __name__ == "__main__":
    main()
