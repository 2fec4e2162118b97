"""Reference numbers of R ``loo`` 2.10.1's model weights and (S)CRPS for ``tests/test_r_loo_weights_scores.py``.

R's side is ``reference_weights_scores.R`` beside this file (R itself: ``install_r_loo.sh``). The inputs come from
``tests/data/r_loo/input.npz`` (``make_reference.py``'s draws), nothing is sampled here:

- model weights: the normal mean's 4 x 500 draws of ``mu`` and the 13 observations with one outlier under three
  models (known sigma 1, 1.5 and 3); R runs ``loo`` with ``relative_eff`` per model and gives ``stacking_weights``
  (default and a tight ``reltol``), ``pseudobma_weights`` (without and with the Bayesian bootstrap, with the
  Dirichlet draws it used), ``loo_model_weights`` of the ``loo`` objects and of the log-likelihood matrices, and the
  stacking weights of a third model worse than the first on every observation (weight 0 at the optimum);
- (S)CRPS: the 4 x 50 draws' two sets of ``y_rep`` (``input.npz``'s ``yrep``, ``yrep2``): ``crps``, ``scrps``,
  ``loo_crps``, ``loo_scrps`` with 1 and 3 permutations, and the shuffles R drew (``set.seed`` before each call).

    R_LIBS=/work/rlib .venv/bin/python benchmarks/r_loo/make_reference_weights_scores.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE.parents[1] / "tests" / "data" / "r_loo"
SIGMAS = (1.0, 1.5, 3.0)
BB_N = 200
SEED = 42


def normal_ll(mu, y, sigma=1.0):
    """``log N(y_i | mu_s, sigma)`` ``(S, n)`` of the draws ``mu`` ``(S,)``."""
    return -0.5 * np.log(2 * np.pi) - np.log(sigma) - 0.5 * ((y[None, :] - mu[:, None]) / sigma) ** 2


def inputs():
    """``(log-likelihoods of the three models (S, n), few-draws log-likelihood, y_rep, y_rep2, y)``."""
    inp = np.load(OUT / "input.npz")
    mu, y = inp["mu"].reshape(-1), inp["y"]
    few = inp["mu"][:, :50].reshape(-1)
    return [normal_ll(mu, y, s) for s in SIGMAS], normal_ll(few, y), inp["yrep"], inp["yrep2"], y


def main():
    lls, ll_y, yrep, yrep2, y = inputs()
    S, n = lls[0].shape
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        meta = {"S": S, "n": n, "chains": 4, "K": len(lls), "seed": SEED, "BB_n": BB_N, "Sy": yrep.shape[0],
                "ny": yrep.shape[1], "chains_y": 4}
        (d / "meta.json").write_text(json.dumps(meta))
        for k, ll in enumerate(lls, 1):
            np.ascontiguousarray(ll, dtype="<f8").tofile(d / f"log_lik_{k}.bin")
        for name, arr in (("yrep", yrep), ("yrep2", yrep2), ("log_lik_y", ll_y), ("y", y)):
            np.ascontiguousarray(arr, dtype="<f8").tofile(d / f"{name}.bin")
        proc = subprocess.run(["Rscript", str(HERE / "reference_weights_scores.R"), tmp], capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        names = json.loads((d / "r_out.json").read_text())
        values = np.fromfile(d / "r_out.bin", dtype="<f8")
    ref, pos = {}, 0
    for name, size in names.items():
        ref[name] = values[pos:pos + size]
        pos += size
    assert pos == values.size
    K = len(lls)
    ref["lpd"] = ref["lpd"].reshape(n, K)  # R wrote t(lpd) column by column: lpd row by row
    ref["lpd_reff1"] = ref["lpd_reff1"].reshape(K, n).T  # (n, K) written column by column
    for tag in ("", "_alpha05"):
        ref[f"dirichlet{tag}"] = ref[f"dirichlet{tag}"].reshape(BB_N, n)  # t() written column by column: row by row
    for P in (1, 3):
        ref[f"shuffle_{P}"] = ref[f"shuffle_{P}"].reshape(P, -1).astype(np.int64) - 1  # (P, S), 0-based
    np.savez_compressed(OUT / "reference_weights_scores.npz", **ref)
    versions = json.loads(proc.stdout)
    print(f"wrote {OUT / 'reference_weights_scores.npz'} (R {versions['r_version']}, loo {versions['loo_version']})")


if __name__ == "__main__":
    main()
