"""Peak memory and time of ``pl.loo(data, pl.models.LogisticRegression(X, y))`` at large n.

The adaptive search of a model with a linear predictor evaluates ``(T, S)`` log densities along lines; above a
budget it works through the observations in blocks (``ppl_loo.numerics.glm_lines``) instead of holding ``(S, n)``
and ``(T, S, n)`` arrays. Each run is a fresh process (``ru_maxrss`` is the peak of that process)::

    python benchmarks/glm_lines.py --n 10000 100000 --draws 2000

Data: the synthetic logistic regression of ``benchmarks/scale_data.py`` (6 dense and 4 rare columns, so that about
80 observations have a high k-hat at any n), held in memory as NumPy arrays, with ``S`` draws of the Laplace
approximation of the posterior stored as 4 chains (treated as posterior draws).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

N_DENSE, N_RARE, RARE_PER_FEATURE, RARE_SCALE, N_CHAINS = 6, 4, 100, 3.5, 4


def problem(n, S, seed=0, lazy=False, rare=RARE_PER_FEATURE):
    """``X``, ``y`` and a DataTree (posterior, log_likelihood, observed_data) of Laplace draws; ``lazy``: the
    log-likelihood as a dask array computed chunk by chunk (5,000 observations), as if read from zarr."""
    import xarray as xr
    from scipy.special import expit

    rng = np.random.default_rng([seed, n])
    X = np.zeros((n, N_DENSE + N_RARE))
    X[:, :N_DENSE] = rng.standard_normal((n, N_DENSE))
    m = min(rare, n // (10 * N_RARE))
    rare = rng.choice(n, N_RARE * m, replace=False).reshape(N_RARE, m)
    for j in range(N_RARE):
        X[rare[j], N_DENSE + j] = RARE_SCALE * rng.standard_normal(m)
    beta = np.concatenate([rng.normal(0.0, 0.5, N_DENSE), np.full(N_RARE, 2.0)])
    y = (rng.random(n) < expit(0.3 + X @ beta)).astype(np.int64)
    d = X.shape[1]
    prec = np.r_[1.0 / 25.0, np.ones(d)]
    b = np.zeros(d + 1)
    for _ in range(50):  # Newton's method to the mode of the default prior's posterior
        p = expit(b[0] + X @ b[1:])
        Xt = np.c_[np.ones(n), X]
        H = (Xt * (p * (1 - p))[:, None]).T @ Xt + np.diag(prec)
        step = np.linalg.solve(H, Xt.T @ (y - p) - prec * b)
        b += step
        if np.max(np.abs(step)) < 1e-12:
            break
    z = np.random.default_rng([seed, n, 1]).standard_normal((S, d + 1))
    theta = b + np.linalg.solve(np.linalg.cholesky(H).T, z.T).T
    th = theta.reshape(N_CHAINS, S // N_CHAINS, d + 1)
    sign = 2.0 * y - 1.0

    def block(lo, hi):
        return -np.logaddexp(0.0, -sign[lo:hi] * (th[..., :1] + th[..., 1:] @ X[lo:hi].T))

    if lazy:
        import dask.array as da

        chunks = ((N_CHAINS,), (S // N_CHAINS,), tuple(np.diff(np.r_[np.arange(0, n, 5000), n]).tolist()))
        ll = da.map_blocks(lambda block_info=None: block(*block_info[None]["array-location"][2]), chunks=chunks,
                           dtype=np.float64)
    else:
        ll = np.empty((N_CHAINS, S // N_CHAINS, n))
        for lo in range(0, n, 5000):  # no (S, n) temporaries besides ll itself
            ll[..., lo:lo + 5000] = block(lo, min(lo + 5000, n))
    coords = {"chain": np.arange(N_CHAINS), "draw": np.arange(S // N_CHAINS)}
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"beta0": (("chain", "draw"), th[..., 0]),
                                 "beta": (("chain", "draw", "feature"), th[..., 1:])}, coords=coords),
        "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs_id"), ll)}, coords=coords),
        "observed_data": xr.Dataset({"y": (("obs_id",), y)}),
    })
    return X, y, tree


def one(n, S, block_rows, lazy, rare, loo_kwargs=None):
    """Run in this process; print one JSON line. ``loo_kwargs``: more arguments of ``pl.loo`` (``benchmarks/gpu.py``
    turns the second opinions off, ``second_opinions={"mixture": False, "smc": False}``, to measure the search
    alone)."""
    import warnings

    import ppl_loo as pl
    X, y, tree = problem(n, S, lazy=lazy, rare=rare)
    model = pl.models.LogisticRegression(X, y)
    rss_data = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if block_rows is not None:  # 0: never in blocks (the unblocked path)
        model.line_block_rows = int(block_rows)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(tree, model, progressbar=False, search={"adapt": "flagged"}, **(loo_kwargs or {}))
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"n": n, "S": S, "lazy": lazy, "rare": rare, "block_rows": block_rows, "wall_s": round(wall, 1),
                      "peak_gb": round(peak, 2), "peak_after_data_gb": round(rss_data, 2),
                      "adapted": int(np.sum(res.transform.values != "psis")),
                      "searched": int(np.sum(np.any(np.isfinite(np.asarray(res.candidates["k"])), axis=1)))
                      if res.candidates is not None else 0, "elpd": float(res.elpd)}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--block-rows", default=None, help="force the rows per block (0: unblocked)")
    ap.add_argument("--lazy", action="store_true", help="a dask-backed log-likelihood (the out-of-core path)")
    ap.add_argument("--rare", type=int, default=RARE_PER_FEATURE,
                    help="observations per rare column (fewer: fewer flagged observations, a shorter search)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        return one(a.n[0], a.draws, a.block_rows, a.lazy, a.rare)
    for n in a.n:
        cmd = [sys.executable, __file__, "--one", "--n", str(n), "--draws", str(a.draws), "--rare", str(a.rare)]
        if a.block_rows is not None:
            cmd += ["--block-rows", a.block_rows]
        if a.lazy:
            cmd += ["--lazy"]
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
