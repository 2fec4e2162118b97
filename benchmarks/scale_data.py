"""The data of ``benchmarks/scale.py``: a synthetic logistic regression stored in zarr, written chunk by chunk.

Design (n-invariant number of high-k observations):

- ``d = 10`` covariates: 6 dense ``N(0, 1)`` columns and 4 *rare* columns, each zero except on ``RARE_PER_FEATURE``
  observations (drawn once per n) where it is ``N(0, RARE_SCALE^2)``. A rare column's coefficient is informed by
  its few observations only, so leaving one of them out moves the posterior a lot and its plain-PSIS k-hat is high;
  the number of such observations does not grow with n (about 80 have k > 0.5 at S = 2000, every n).
- ``y_i ~ Bernoulli(sigmoid(0.3 + x_i . beta))`` with dense slopes ``N(0, 0.5^2)`` and rare slopes 2.
- Posterior: the Laplace approximation of ``pl.models.LogisticRegression(X, y)``'s posterior (its default prior,
  ``beta0 ~ N(0, 5^2)``, ``beta_j ~ N(0, 1)``): Newton's method on the full data to the mode (``X^T W X`` is a
  ``(11, 11)`` product, cheap even at n = 10^6), then ``S`` draws ``mode + L^{-T} z`` with ``H = L L^T`` the Hessian
  of the negative log posterior at the mode, ``z`` standard normal from the seed, stored as 4 chains (each half-chain
  whitened: :func:`balanced_normal`). No MCMC:
  at n = 10^6 the posterior is very nearly Gaussian, and what is measured is LOO on given draws.
- ``log_likelihood/y`` (chain, draw, obs_id) is a dask array of ``map_blocks`` over chunks of observations,
  written with ``DataTree.to_zarr``: each block is computed and written on its own, the array is never whole in
  memory. The store is written to ``<name>.tmp`` and renamed when complete, so a half-written store is never
  reused; an existing store with the same settings is reused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

#: bump when the generated data change, so that stale stores are not reused
DATA_VERSION = 2
N_DENSE, N_RARE = 6, 4
RARE_PER_FEATURE, RARE_SCALE = 100, 3.5
N_CHAINS = 4
PRIOR_SD, ICEPT_SD = 1.0, 5.0  # pl.models.LogisticRegression's defaults (prior_scale, scale_icept)


def design(n, seed):
    """``X`` (n, 10), ``y`` (n,) int8 and the indices of the observations of the rare columns (by design)."""
    rng = np.random.default_rng([seed, n])
    X = np.zeros((n, N_DENSE + N_RARE))
    X[:, :N_DENSE] = rng.standard_normal((n, N_DENSE))
    m = min(RARE_PER_FEATURE, n // (10 * N_RARE))
    rare = np.sort(rng.choice(n, N_RARE * m, replace=False).reshape(N_RARE, m), axis=1)
    for j in range(N_RARE):
        X[rare[j], N_DENSE + j] = RARE_SCALE * rng.standard_normal(m)
    beta = np.concatenate([rng.normal(0.0, 0.5, N_DENSE), np.full(N_RARE, 2.0)])
    eta = 0.3 + X @ beta
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int8)
    return X, y, np.sort(rare.ravel())


def balanced_normal(rng, S, d):
    """``S`` standard normal draws (S, d) in ``N_CHAINS`` chains of two halves, each half whitened to mean 0 and
    identity covariance exactly: the stored chains then agree as converged chains do (split R-hat about 1; with
    plain iid draws it passes ppl_loo's 1.01 at S = 400 by chance, and ppl_loo then vouches for nothing)."""
    half = S // (2 * N_CHAINS)
    z = rng.standard_normal((2 * N_CHAINS, half, d))
    z -= z.mean(axis=1, keepdims=True)
    for k in range(2 * N_CHAINS):
        c = np.linalg.cholesky(z[k].T @ z[k] / half)
        z[k] = np.linalg.solve(c, z[k].T).T
    return z.reshape(S, d)


def laplace_draws(X, y, S, seed, steps=50):
    """Mode, Hessian and ``S`` draws (S, d + 1) of the Laplace approximation of the posterior (Newton's method)."""
    from scipy.special import expit

    n, d = X.shape
    prec = np.r_[1.0 / ICEPT_SD**2, np.full(d, 1.0 / PRIOR_SD**2)]
    b = np.zeros(d + 1)
    for _ in range(steps):
        eta = b[0] + X @ b[1:]
        p = expit(eta)
        w = p * (1.0 - p)
        r = y - p
        g = np.r_[r.sum(), X.T @ r] - prec * b
        H = np.empty((d + 1, d + 1))
        H[0, 0], H[0, 1:] = w.sum(), X.T @ w
        H[1:, 0] = H[0, 1:]
        H[1:, 1:] = (X * w[:, None]).T @ X
        H += np.diag(prec)
        step = np.linalg.solve(H, g)
        b = b + step
        if np.max(np.abs(step)) < 1e-12:
            break
    else:
        raise RuntimeError(f"Newton's method did not converge in {steps} steps (n = {n}).")
    L = np.linalg.cholesky(H)
    z = balanced_normal(np.random.default_rng([seed, n, 1]), S, d + 1)
    theta = b + np.linalg.solve(L.T, z.T).T
    return b, H, theta


def store_path(data_dir, n, S, seed):
    return Path(data_dir) / f"logreg_n{n}_S{S}_seed{seed}_v{DATA_VERSION}.zarr"


def settings(n, S, seed, chunk_obs):
    return {"n": int(n), "S": int(S), "seed": int(seed), "chunk_obs": int(chunk_obs), "version": DATA_VERSION}


def existing(path, expected):
    """True when ``path`` is a complete store written with ``expected`` settings."""
    meta = Path(path) / "scale_settings.json"
    return meta.is_file() and json.loads(meta.read_text()) == expected


def generate(data_dir, n, S, seed=0, chunk_obs=5000):
    """Write the store (or reuse it); returns its path and a description of what was done."""
    import dask.array as da
    import xarray as xr

    path = store_path(data_dir, n, S, seed)
    expected = settings(n, S, seed, chunk_obs)
    if existing(path, expected):
        return path, "reused"
    if S % (2 * N_CHAINS):
        raise ValueError(f"--draws {S}: give a multiple of {2 * N_CHAINS} (the draws are stored as {N_CHAINS} chains "
                         "of two whitened halves).")
    if path.exists():
        shutil.rmtree(path)
    tmp = path.with_suffix(".zarr.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    X, y, rare = design(n, seed)
    mode, H, theta = laplace_draws(X, y, S, seed)
    draws = S // N_CHAINS
    th = theta.reshape(N_CHAINS, draws, -1)
    sign = 2.0 * y - 1.0

    def block(block_info=None):
        lo, hi = block_info[None]["array-location"][2]
        eta = th[..., :1] + th[..., 1:] @ X[lo:hi].T  # (chain, draw, m)
        return -np.logaddexp(0.0, -sign[lo:hi] * eta)  # log sigmoid(sign * eta)

    chunks = ((N_CHAINS,), (draws,), tuple(np.diff(np.r_[np.arange(0, n, chunk_obs), n]).tolist()))
    ll = da.map_blocks(block, chunks=chunks, dtype=np.float64)
    obs = np.arange(n)
    feature = np.arange(X.shape[1])
    coords = {"chain": np.arange(N_CHAINS), "draw": np.arange(draws)}
    posterior = xr.Dataset({"beta0": (("chain", "draw"), th[..., 0]),
                            "beta": (("chain", "draw", "feature"), th[..., 1:])},
                           coords={**coords, "feature": feature})
    log_lik = xr.Dataset({"y": (("chain", "draw", "obs_id"), ll)}, coords={**coords, "obs_id": obs})
    observed = xr.Dataset({"y": (("obs_id",), y)}, coords={"obs_id": obs})
    constant = xr.Dataset({"X": (("obs_id", "feature"), X)}, coords={"obs_id": obs, "feature": feature})
    tree = xr.DataTree.from_dict({"posterior": posterior, "log_likelihood": log_lik, "observed_data": observed,
                                  "constant_data": constant})
    tree.attrs.update({"description":
                       "synthetic logistic regression, Laplace-approximation draws (benchmarks/scale.py)",
                       "rare_observations": json.dumps(rare.tolist()), "laplace_mode": json.dumps(mode.tolist())})
    # uncompressed: float64 draws of a log-likelihood hardly compress, and the codec would dominate the I/O time
    encoding = {"/log_likelihood": {"y": {"compressors": None}}}
    tree.to_zarr(tmp, mode="w", encoding=encoding, consolidated=True)
    (tmp / "scale_settings.json").write_text(json.dumps(expected))
    tmp.rename(path)
    return path, "written"
