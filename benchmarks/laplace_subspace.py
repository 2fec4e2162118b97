"""Optimal-subspace Laplace (Faller & Martin 2025): relative error and log-trace against the subspace size.

    /work/main/.venv/bin/python benchmarks/laplace_subspace.py [--quick]

Prints a table and writes ``benchmarks/results/laplace_subspace.json`` (``--quick``: one seed, small
reference sets, 300 digits training points, fewer optimizer steps, no laplace-torch; about half a
minute on two idle cores; writes nothing unless ``--out`` is given).

What is compared (the paper's Fig. 1/2 on data shipped with scikit-learn)
-------------------------------------------------------------------------
- ``load_diabetes`` (regression, ``N = 442``, 10 inputs) and ``load_digits`` (10 classes, ``N = 1797``,
  64 inputs); inputs standardized with the training mean/sd (constant pixels: sd 1), the diabetes
  target too; an 80/20 split per seed (``train_test_split(random_state=seed)``), five seeds.
- MLP with two hidden layers of 128 ReLU units and biases (``p = 18,049`` and ``26,122``), parameters
  flattened as PyTorch's ``parameters_to_vector`` (``kfac.mlp_layers``), PyTorch's default init.
- MAP of Eq. (4) with ``lambda = 1``: ``sum_i -log p(y_i | theta) + ||theta||^2 / 2`` with, for
  regression, ``sigma = 1`` in standardized units during the fit (MSE/2 + L2, as the authors train),
  then ``sigma_hat^2 = mean training squared residual`` fixed for the GGN (notes A4). Optimizer:
  optax Adam (lr 1e-3, full batch) then optax L-BFGS; the final gradient norm is recorded.
- Full LA: the exact GGN ``Lambda = V V^T + I`` (Fisher factor of Eq. 8 on the whole training set;
  for the softmax the exact rank-``C-1`` square root of each ``H_i``, ``m = N (C-1)`` columns) and
  ``Psi = Lambda^{-1}`` by the Woodbury identity (``woodbury_covariance``) with the ``m x m`` Gram
  ``V^T V`` from the layer structure (``kfac.factor_gram``): exact, no ``p x p`` matrix.
- Methods (``subspace_basis``): optimal (Theorem 1 on the evaluation inputs: an oracle), lowrank-kfac,
  lowrank-diag (Section 4.2 on ``X'``), subset-magnitude, subset-diag, subset-swag (10 SGD snapshots from
  theta_hat, lr 0.01, momentum 0.9, weight decay 3e-4, mean loss; full batch for diabetes, 6 batches
  of 239 for digits). ``M = P^T Lambda P`` with the exact ``Lambda`` (restricted prior, A1).
- Reference inputs ``X'`` / evaluation inputs ``X`` (notes A8, scaled to these data sets):
  diabetes: ``X'`` = the whole training set (353 points, as the paper's ENB), ``X`` = the whole test set
  (89 points); digits: 100 random training points (``n C = 1000`` Jacobian rows, as the paper's
  classification runs) and 100 random test points.
- Grid: ``s`` = 10 values from 10 to the rank of ``J_{X'}`` (the paper's grid; low-rank bases are
  nested truncations ``P[:, :s]``, capped at the rank, A9); for the subset methods additionally
  ``s`` up to ``p`` for diabetes (exact, Woodbury in the ``m``-dimensional data space) and
  ``s = 2,612`` (10% of p) for digits. Relative error Eq. (20), natural log of the trace Eq. (25).
- Diagnostics: dead-parameter share on the training Jacobian (A14, threshold 0), ranks of ``J_{X'}``,
  ``J_X`` (and of ``J_train`` for diabetes).
- laplace-torch: installed from PyPI into a throwaway venv (``/tmp/lt-venv``); its ``FullLaplace``
  (diabetes), ``KronLaplace`` and ``DiagLaplace`` (BackPACK GGN, the backend of the paper's 0.2.1) on the
  same exported weights give ``f_var`` of the GLM predictive, compared with ours. When that venv is
  missing the JSON says so.

Everything is float64 (``jax_enable_x64``); the Jacobians here are at most ``26,122 x 1,000``.
``--laplace-torch-full`` runs only laplace-torch's ``FullLaplace`` (a dense ``p x p`` GGN, ``O(p^3)``:
about 4 minutes for diabetes) and merges it into the JSON; it is kept out of the main run for time.

Results of the committed run (``results/laplace_subspace.json``; 2 shared CPU cores, 509 s, plus 242 s
for ``--laplace-torch-full``)
------------------------------------------------------------------------------------------------
- Cross-check with laplace-torch 0.3 on the same weights (seed 0): GLM predictive ``f_var`` agrees to
  ``1.9e-11`` (full GGN LA, diabetes), ``3.4e-11`` / ``1.2e-14`` (KFAC, diabetes / digits) and
  ``3e-15`` / ``6e-15`` (diagonal) relative to the largest entry; ``f_mu`` to ``1e-14``.
- diabetes (``X`` = 89 test points): optimal 0.692 (s = 10), 0.249 (48), 0.027 +- 0.003 (86, 0.48% of p),
  0 from ``s = rank J_X = 89``. Every practical method stays at 1.000 (to 3 decimals) up to s = 353
  (2% of p). With large s, subset-swag reaches 0.109 at 50% and 0.010 at 75% of p, subset-magnitude
  0.194 / 0.074, subset-diag is still 0.985 at 90%.
- digits (``X`` = 100 test points, 1000 rows): optimal 0.273 (s = 10), 0.077 +- 0.024 (120, 0.46% of p),
  0.010 (450); at s = 1000 lowrank-diag 0.888, lowrank-kfac 0.926, subset-magnitude/swag 0.96,
  subset-diag 0.999; at s = 2,612 (10% of p) the subsets are at 0.92-0.94.
- Verdict. (1) "The optimal subspace reproduces the full LA with s < 1% of p": holds on both.
  (2) "Subset methods need most parameters": holds (diabetes: 50-75% of p for error 0.1 with
  SWAG/magnitude scores, about 100% with diagonal-LA scores; digits: 0.92+ at 10% of p). (3) "The
  trace ranks methods like the relative error": holds (every distinguishable pair at every s).
  (4) "Low-rank beats subset": the order holds on digits at every s (lowrank-diag < lowrank-kfac <
  subsets), but all practical methods stay near 0.9-1.0, far from the paper's MNIST numbers (< 0.2 at
  s = 10); on diabetes they are all at 1.000. (5) Why: here ``N C`` is far below ``p`` (353 vs 18,049;
  12,933 vs 26,122) and lambda = 1, so most of ``Sigma_X`` comes from parameter directions the training
  data leave at the prior: the null-space share ``||J_X (I - Pi_V) J_X^T||_F / lambda / ||Sigma_X||_F`` is
  0.9998 (diabetes, every seed) and 0.58 (digits, seed 0), and a basis ``Psi J_{X'}^T U`` built from
  training inputs lies (for the exact ``Psi``, regression) inside ``span(V)``, so its relative error is
  at least that share. The dead-parameter shares are 0.15% (diabetes) and 1.6% (digits), against
  34-92% in the paper's regression nets (its explanation of when subsets do well).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.linalg

jax.config.update("jax_enable_x64", True)

import ppl_loo.numerics.laplace as la  # noqa: E402

LAM = 1.0
HIDDEN = (128, 128)
METHODS = ("optimal", "lowrank-kfac", "lowrank-diag", "subset-magnitude", "subset-diag", "subset-swag")
SUBSETS = ("subset-magnitude", "subset-diag", "subset-swag")
LT_PYTHON = Path("/tmp/lt-venv/bin/python")
RESULTS = Path(__file__).resolve().parent / "results"


# ----------------------------------------------------------------------------- data and MAP
def load(name, seed):
    from sklearn.datasets import load_diabetes, load_digits
    from sklearn.model_selection import train_test_split

    X, y = (load_diabetes if name == "diabetes" else load_digits)(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    if name == "diabetes":
        m, s = ytr.mean(), ytr.std()
        ytr, yte = (ytr - m) / s, (yte - m) / s
    return Xtr, Xte, ytr, yte


def neg_log_lik(f, y, likelihood):
    if likelihood == "gaussian":
        return 0.5 * jnp.sum((y - f[:, 0]) ** 2)
    return -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(f), y[:, None], axis=1))


def train_map(layers, theta0, X, y, likelihood, adam_steps, lbfgs_steps):
    """MAP of Eq. (4) with lambda = LAM: Adam, then L-BFGS (optax)."""
    X, y = jnp.asarray(X), jnp.asarray(y)

    def loss(t):
        return neg_log_lik(la.dense_apply(layers, t, X), y, likelihood) + 0.5 * LAM * jnp.sum(t**2)

    adam = optax.adam(1e-3)

    def adam_step(c, _):
        t, s = c
        u, s = adam.update(jax.grad(loss)(t), s, t)
        return (optax.apply_updates(t, u), s), None

    theta = jax.jit(lambda t: jax.lax.scan(adam_step, (t, adam.init(t)), None, length=adam_steps)[0][0])(theta0)
    lb = optax.lbfgs()
    vg = optax.value_and_grad_from_state(loss)

    def lb_step(c, _):
        t, s = c
        v, g = vg(t, state=s)
        u, s = lb.update(g, s, t, value=v, grad=g, value_fn=loss)
        return (optax.apply_updates(t, u), s), None

    theta = jax.jit(lambda t: jax.lax.scan(lb_step, (t, lb.init(t)), None, length=lbfgs_steps)[0][0])(theta)
    return theta, float(loss(theta)), float(jnp.linalg.norm(jax.grad(loss)(theta)))


# ----------------------------------------------------------------------------- Laplace pieces
def jac_T(layers, theta, X, C):
    """``J_X^T`` (``(p, n C)``) from the layer structure (identity output weights)."""
    n = X.shape[0]
    eye = jnp.broadcast_to(jnp.eye(C), (n, C, C))
    taps = la.layer_taps(la.dense_forward(layers, jnp.asarray(X)), theta, eye, layers)
    dim = int(layers[-1].b_index[-1]) + 1
    return jax.jit(lambda t: la.factor_mat(layers, t, jnp.eye(n * C), dim))(taps)


def dead_share(layers, theta, X, C):
    """Share of parameters whose training-Jacobian column is all zero (A14, threshold 0): the
    column's sum of squares (``factor_diag`` with identity output weights) is 0 exactly then."""
    n = X.shape[0]
    taps = la.layer_taps(la.dense_forward(layers, jnp.asarray(X)), theta, jnp.broadcast_to(jnp.eye(C), (n, C, C)),
                         layers)
    dim = int(layers[-1].b_index[-1]) + 1
    return float(np.mean(np.asarray(la.factor_diag(layers, taps, dim)) == 0.0))


def null_space_share(ctx, JtX, sx):
    """``||Sigma_out||_F / ||Sigma_X||_F`` with ``Sigma_out = J_X (I - Pi_V) J_X^T / lambda``: the part of
    ``Sigma_X`` from parameter directions the training data leave at the prior (``Pi_V`` projects on
    ``span(V)``; ``(V^T V + eps I)^{-1}`` with ``eps = 1e-10 max diag``). A basis inside ``span(V)``
    (``Psi J_{X'}^T`` for training ``X'`` and the exact ``Psi``, regression) has at least this error."""
    G = ctx["op"].gram
    B = ctx["op"].rmat(JtX)
    Lg = jnp.linalg.cholesky(G + 1e-10 * jnp.max(jnp.diag(G)) * jnp.eye(G.shape[0]))
    W = jax.scipy.linalg.solve_triangular(Lg, B, lower=True)
    out = (JtX.T @ JtX - W.T @ W) / LAM
    return float(jnp.linalg.norm(out) / jnp.linalg.norm(sx))


def laplace_setup(layers, theta, Xtr, ytr, likelihood, C):
    """The exact GGN precision (as an operator), its Woodbury covariance, KFAC, and the diagonal LA."""
    dim = int(layers[-1].b_index[-1]) + 1
    fwd = la.dense_forward(layers, jnp.asarray(Xtr))
    f = fwd(theta)[0]
    sigma = float(jnp.sqrt(jnp.mean((jnp.asarray(ytr) - f[:, 0]) ** 2))) if likelihood == "gaussian" else None
    if likelihood == "gaussian":
        L = la.lik_hessian_sqrt(f, "gaussian", sigma)
    else:
        L = la.hessian_sqrt(la.lik_hessian(f, "categorical"), rank=C - 1)  # exact: 1 is the null vector
    taps = la.layer_taps(fwd, theta, L, layers)
    op = la.factor_operator(layers, taps, dim)
    diag = la.factor_diag(layers, taps, dim) + LAM
    prior = jnp.full((dim,), LAM)
    prec = la.Precision(lambda v: op.mat(op.rmat(v[:, None]))[:, 0] + LAM * v, diag, dim, op, prior)
    return dict(sigma=sigma, taps=taps, op=op, prec=prec, wood=la.woodbury_covariance(op, LAM),
                kfac=la.kfac(layers, taps, LAM, dim), diag_var=1.0 / diag, dim=dim)


def swag_var(layers, theta, Xtr, ytr, likelihood, seed):
    n = Xtr.shape[0]
    nb = 1 if likelihood == "gaussian" else int(np.ceil(n / 256))
    b = n // nb
    perm = np.random.default_rng(seed).permutation(n)[: nb * b]
    Xb, yb = jnp.asarray(Xtr[perm].reshape(nb, b, -1)), jnp.asarray(ytr[perm].reshape(nb, b))

    def loss(t, batch):
        return neg_log_lik(la.dense_apply(layers, t, batch[0]), batch[1], likelihood) / batch[1].shape[0]

    return la.swag_diagonal(loss, theta, (Xb, yb))


# ----------------------------------------------------------------------------- one seed
def curves(JP, M, sx, grid):
    """Relative error and log-trace of the nested truncations ``P[:, :s]``."""
    err, lt = [], []
    for s in grid:
        k = min(int(s), JP.shape[1])
        S = la.sigma_PX(None, None, M[:k, :k], JP=JP[:, :k])
        err.append(la.relative_error(sx, S))
        lt.append(la.trace_criterion(S).log_trace)
    return err, lt


def subset_large_s(ctx, JtX, order, grid, sx):
    """Subset LA for large ``s`` exactly: Woodbury in the data space when ``s > m``, else ``s x s``."""
    err, lt = [], []
    m = ctx["op"].shape[1]
    for s in grid:
        idx = np.sort(order[: int(s)])
        VS = np.asarray(la.factor_rows(ctx["layers"], ctx["taps"], idx))  # (s, m)
        JS = np.asarray(JtX)[idx].T  # (nC, s)
        if s > m:  # NumPy/SciPy here: no compilation per shape
            K = np.linalg.cholesky(LAM * np.eye(m) + VS.T @ VS)
            W = scipy.linalg.solve_triangular(K, (JS @ VS).T, lower=True)
            S = (JS @ JS.T - W.T @ W) / LAM
        else:
            S = la.sigma_PX(None, None, VS @ VS.T + LAM * jnp.eye(int(s)), JP=JS)
        err.append(la.relative_error(sx, S))
        lt.append(la.trace_criterion(S).log_trace)
    return err, lt


class Stages:
    """Wall-clock seconds per stage (JAX work is finished before a stage is closed)."""

    def __init__(self):
        self.t, self.out = time.perf_counter(), {}

    def __call__(self, name, value=None):
        jax.block_until_ready(value)
        now = time.perf_counter()
        self.out[name] = self.out.get(name, 0.0) + now - self.t
        self.t = now
        return value


def method_curves(method, ctx, J, sx, grid, cfg):
    """Basis, ``M`` and the error/trace curves of one method (subsets: ``M = V_S V_S^T + lambda I``)."""
    kw = dict(theta_map=ctx["theta"], precision=ctx["prec"], swag_var=ctx["swag"])
    if method == "optimal":
        kw.update(J_ref=J["X"], psi_mat=ctx["wood"].psi_mat, rank=J["rank_eval"], psi_jt=J["PsiJt"])
    elif method.startswith("lowrank"):
        kw.update(J_ref=J["R"], rank=J["rank_ref"],
                  psi_approx=ctx["kfac"] if method == "lowrank-kfac" else ctx["diag_var"])
    P, info = la.subspace_basis(method, int(grid[-1]), return_info=True, **kw)
    if method in SUBSETS:  # P = (e_j): M = P^T (V V^T + lambda I) P from the gathered factor rows
        idx = np.argsort(-info.scores, kind="stable")[: P.shape[1]]
        VS = la.factor_rows(ctx["layers"], ctx["taps"], idx)
        M = VS @ VS.T + LAM * jnp.eye(len(idx))
        JP = J["X"][:, idx]
    else:
        M = la.subspace_precision(P, ctx["prec"])
        JP = J["X"] @ P
    err, lt = curves(JP, M, sx, grid)
    rec = dict(rel_error=err, log_trace=lt, s_returned=info.s, capped=info.capped)
    if method in SUBSETS and cfg["extra"]:
        order = np.argsort(-info.scores, kind="stable")
        rec["extra_grid"] = [int(s) for s in cfg["extra"]]
        rec["extra_rel_error"], rec["extra_log_trace"] = subset_large_s(ctx, J["tX"], order, rec["extra_grid"], sx)
    return rec


def run_seed(name, seed, cfg):
    st = Stages()
    Xtr, Xte, ytr, yte = load(name, seed)
    if cfg.get("n_train"):
        Xtr, ytr = Xtr[: cfg["n_train"]], ytr[: cfg["n_train"]]
    likelihood, C = ("gaussian", 1) if name == "diabetes" else ("categorical", 10)
    sizes = (Xtr.shape[1],) + HIDDEN + (C,)
    layers = la.mlp_layers(sizes)
    theta, loss, gnorm = st("map", train_map(layers, la.mlp_init(jax.random.PRNGKey(seed), sizes), Xtr, ytr,
                                             likelihood, cfg["adam"], cfg["lbfgs"]))
    ctx = laplace_setup(layers, theta, Xtr, ytr, likelihood, C)
    ctx.update(layers=layers, theta=theta)
    st("laplace (Gram, Cholesky, KFAC)", ctx["wood"].logdet)
    ctx["swag"] = st("swag", swag_var(layers, theta, Xtr, ytr, likelihood, seed))
    rng = np.random.default_rng(seed)
    ref = np.arange(len(Xtr)) if cfg["n_ref"] is None else rng.choice(len(Xtr), cfg["n_ref"], replace=False)
    ev = np.arange(len(Xte)) if cfg["n_eval"] is None else rng.choice(len(Xte), cfg["n_eval"], replace=False)
    J = dict(tX=jac_T(layers, theta, Xte[ev], C), tR=jac_T(layers, theta, Xtr[ref], C))
    J.update(X=J["tX"].T, R=J["tR"].T, PsiJt=ctx["wood"].psi_mat(J["tX"]))
    sx = st("Sigma_X", 0.5 * (J["X"] @ J["PsiJt"] + (J["X"] @ J["PsiJt"]).T))
    eigs = np.linalg.eigvalsh(np.asarray(sx))[::-1]
    J.update(rank_ref=la.jacobian_rank(J["R"], method="gram"), rank_eval=la.jacobian_rank(J["X"], method="gram"))
    grid = np.unique(np.linspace(10, J["R"].shape[0], cfg["n_grid"]).astype(int))
    out = dict(seed=seed, n_train=len(Xtr), map_loss=loss, map_grad_norm=gnorm, sigma_hat=ctx["sigma"],
               rank_ref=J["rank_ref"], rank_eval=J["rank_eval"], grid=grid.tolist(), trace_X=float(np.sum(eigs)),
               optimal_curve_at_grid=la.optimal_error_curve(eigs)[np.minimum(grid, len(eigs))].tolist(),
               dead_fraction=dead_share(layers, theta, Xtr, C), methods={}, theta=theta, ctx=ctx,
               data=(Xtr, ytr, Xte[ev], yte[ev]), null_space_share=None)
    if name == "diabetes":
        out["rank_train"] = la.jacobian_rank(jac_T(layers, theta, Xtr, C).T, method="gram")
    if name == "diabetes" or seed == cfg["seeds"][0]:  # digits: one more m x m Cholesky, first seed only
        out["null_space_share"] = null_space_share(ctx, J["tX"], sx)
    st("diagnostics")
    for method in METHODS:
        out["methods"][method] = st(method, method_curves(method, ctx, J, sx, grid, cfg))
    out["timing_s"] = dict(st.out, total=sum(st.out.values()))
    return out


# ----------------------------------------------------------------------------- laplace-torch
TORCH_SCRIPT = r'''
import sys, time
import numpy as np, torch
from torch import nn
from torch.nn.utils import vector_to_parameters
from torch.utils.data import DataLoader, TensorDataset
from laplace import Laplace
from laplace.curvature import BackPackGGN

torch.set_default_dtype(torch.float64)
torch.set_num_threads(2)
d = np.load(sys.argv[1])
sizes = [int(s) for s in d["sizes"]]
reg = str(d["likelihood"]) == "gaussian"
mods = []
for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
    mods += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
model = nn.Sequential(*mods)
vector_to_parameters(torch.tensor(d["theta"]), model.parameters())
X = torch.tensor(d["Xtr"])
y = torch.tensor(d["ytr"])[:, None] if reg else torch.tensor(d["ytr"]).long()
loader = DataLoader(TensorDataset(X, y), batch_size=len(X))
out = {}
for structure in [str(s) for s in d["structures"]]:
    t = time.time()
    la = Laplace(model, "regression" if reg else "classification", subset_of_weights="all",
                 hessian_structure=structure, sigma_noise=float(d["sigma"]) if reg else 1.0,
                 prior_precision=float(d["lam"]), backend=BackPackGGN)
    la.fit(loader)
    f_mu, f_var = la._glm_predictive_distribution(torch.tensor(d["Xev"]))
    out[structure] = f_var.detach().numpy()
    out["f_mu"] = f_mu.detach().numpy()
    out[structure + "_seconds"] = time.time() - t
np.savez(sys.argv[2], **out)
'''


def blocks(S, C):
    n = S.shape[0] // C
    S = np.asarray(S).reshape(n, C, n, C)
    return np.stack([S[i, :, i, :] for i in range(n)])


def compare_laplace_torch(name, res, structures):
    """Our full/KFAC/diagonal GLM predictive covariances against laplace-torch's on the same weights."""
    if not LT_PYTHON.exists():
        return dict(available=False, reason=f"{LT_PYTHON} not found (pip install laplace-torch into it)")
    Xtr, ytr, Xev, _ = res["data"]
    ctx, theta = res["ctx"], res["theta"]
    C = 1 if name == "diabetes" else 10
    sizes = (Xtr.shape[1],) + HIDDEN + (C,)
    JtX = jac_T(ctx["layers"], theta, Xev, C)
    ours = {"full": JtX.T @ ctx["wood"].psi_mat(JtX), "kron": JtX.T @ ctx["kfac"].psi_mat(JtX),
            "diag": JtX.T @ (ctx["diag_var"][:, None] * JtX)}
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(inp, theta=np.asarray(theta), sizes=np.array(sizes), Xtr=Xtr, ytr=ytr, Xev=Xev,
                 likelihood="gaussian" if C == 1 else "categorical", sigma=ctx["sigma"] or 1.0, lam=LAM,
                 structures=np.array(structures))
        t0 = time.perf_counter()
        run = subprocess.run([str(LT_PYTHON), "-c", TORCH_SCRIPT, str(inp), str(outp)], capture_output=True,
                             text=True, timeout=900)
        if run.returncode:
            return dict(available=False, reason="laplace-torch run failed: " + run.stderr[-2000:])
        lt = dict(np.load(outp))
    f_ours = np.asarray(la.dense_apply(ctx["layers"], theta, jnp.asarray(Xev)))
    out = dict(available=True, version=_lt_version(), seconds=time.perf_counter() - t0,
               f_mu_max_abs_diff=float(np.abs(lt["f_mu"].reshape(f_ours.shape) - f_ours).max()))
    for s in structures:
        a, b = blocks(ours[s], C), lt[s].reshape(-1, C, C)
        out[s] = dict(max_rel_diff=float(np.abs(a - b).max() / np.abs(a).max()),
                      mean_var_ours=float(np.mean(np.diagonal(a, axis1=1, axis2=2))),
                      mean_var_laplace_torch=float(np.mean(np.diagonal(b, axis1=1, axis2=2))),
                      seconds=float(lt[s + "_seconds"]))
    return out


def _lt_version():
    run = subprocess.run([str(LT_PYTHON), "-c", "import importlib.metadata as m; print(m.version('laplace-torch'))"],
                         capture_output=True, text=True)
    return run.stdout.strip() or None


# ----------------------------------------------------------------------------- summary
def mean_se(a):
    """Mean and standard error over seeds (a log-trace of -inf, a zero trace, gives -inf and no SE)."""
    a = np.asarray(a, dtype=float)
    with np.errstate(invalid="ignore"):
        se = a.std(axis=0, ddof=1) / np.sqrt(a.shape[0]) if a.shape[0] > 1 else np.zeros(a.shape[1:])
    return a.mean(axis=0), se


def summarize(name, runs, p):
    grid = runs[0]["grid"]
    agg = {"grid": grid, "p": p, "methods": {}}
    for m in METHODS:
        rec = {}
        for key in ("rel_error", "log_trace", "extra_rel_error", "extra_log_trace"):
            if key in runs[0]["methods"][m]:
                mu, se = mean_se([r["methods"][m][key] for r in runs])
                rec[key] = dict(mean=mu.tolist(), se=se.tolist())
        if "extra_grid" in runs[0]["methods"][m]:
            rec["extra_grid"] = runs[0]["methods"][m]["extra_grid"]
        agg["methods"][m] = rec
    for key in ("dead_fraction", "rank_ref", "rank_eval", "rank_train", "sigma_hat", "map_grad_norm",
                "null_space_share"):
        vals = [[r[key]] for r in runs if r.get(key) is not None]
        if vals:
            mu, se = mean_se(vals)
            agg[key] = dict(mean=float(mu[0]), se=float(se[0]), n=len(vals))
    return agg


def first_below(grid, errs, tol):
    ok = [s for s, e in zip(grid, errs) if e <= tol]
    return int(ok[0]) if ok else None


def verdict(name, agg, tol=0.1):
    p, grid, M = agg["p"], agg["grid"], agg["methods"]
    err = {m: np.array(M[m]["rel_error"]["mean"]) for m in METHODS}
    lt = {m: np.array(M[m]["log_trace"]["mean"]) for m in METHODS}
    s_opt = first_below(grid, err["optimal"], tol)
    best_subset = np.min([err[m] for m in SUBSETS], axis=0)
    conc = tot = 0
    for i in range(len(grid)):
        for a in METHODS:
            for b in METHODS:
                if a < b and abs(err[a][i] - err[b][i]) > 1e-3:
                    tot += 1
                    conc += (err[a][i] < err[b][i]) == (lt[a][i] > lt[b][i])
    out = {
        f"optimal: smallest s with mean rel. error <= {tol}": s_opt,
        "optimal: that s as % of p": None if s_opt is None else 100.0 * s_opt / p,
        "claim 'optimal reaches small error at s < 1% of p' holds": bool(s_opt is not None and s_opt < 0.01 * p),
        "lowrank-kfac below every subset method at every grid s": bool(np.all(err["lowrank-kfac"] < best_subset)),
        "lowrank-diag below every subset method at every grid s": bool(np.all(err["lowrank-diag"] < best_subset)),
        "lowrank-diag below subset-diag at every grid s": bool(np.all(err["lowrank-diag"] < err["subset-diag"])),
        "log-trace order agrees with rel.-error order (share of method pairs)": conc / max(tot, 1),
    }
    for m in SUBSETS:
        if "extra_grid" in M[m]:
            g = list(grid) + M[m]["extra_grid"]
            e = list(err[m]) + M[m]["extra_rel_error"]["mean"]
            s = first_below(g, e, tol)
            out[f"{m}: smallest s with mean rel. error <= {tol} (% of p)"] = None if s is None else 100.0 * s / p
    return out


def print_table(name, agg, key="rel_error"):
    M = agg["methods"]
    print(f"\n{name}: {key} (mean ± SE over seeds), p = {agg['p']}")
    print(f"{'s':>6} " + " ".join(f"{m:>18}" for m in METHODS))
    for i, s in enumerate(agg["grid"]):
        cells = [f"{M[m][key]['mean'][i]:8.3f} ± {M[m][key]['se'][i]:6.3f}" for m in METHODS]
        print(f"{s:>6} " + " ".join(f"{c:>18}" for c in cells))
    extra = [m for m in SUBSETS if "extra_grid" in M[m]]
    if extra and key == "rel_error":
        print(f"{'s':>6} " + " ".join(f"{m:>18}" for m in extra) + "   (subset methods, large s)")
        for i, s in enumerate(M[extra[0]]["extra_grid"]):
            cells = [f"{M[m]['extra_rel_error']['mean'][i]:8.3f} ± {M[m]['extra_rel_error']['se'][i]:6.3f}"
                     for m in extra]
            print(f"{s:>6} " + " ".join(f"{c:>18}" for c in cells))


def config(quick):
    if quick:
        return dict(seeds=[0], adam=200, lbfgs=50, n_grid=3, n_ref={"diabetes": None, "digits": 20},
                    n_train={"diabetes": None, "digits": 300},
                    n_eval={"diabetes": None, "digits": 20}, extra={"diabetes": [18049], "digits": []},
                    laplace_torch=False)
    return dict(seeds=[0, 1, 2, 3, 4], adam=1000, lbfgs=1000, n_grid=10, n_ref={"diabetes": None, "digits": 100},
                n_train={"diabetes": None, "digits": None},
                n_eval={"diabetes": None, "digits": 100},
                extra={"diabetes": [1805, 4512, 9025, 13537, 16244, 18049], "digits": [2612]},
                laplace_torch=True)


def clean(o):
    """JSON-safe: arrays to lists, non-finite floats (log of a zero trace) to None."""
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    if hasattr(o, "tolist"):
        return clean(o.tolist())
    if isinstance(o, float) and not np.isfinite(o):
        return None
    return o


def run_dataset(name, cfg, structures):
    runs, lt = [], dict(available=False, reason="not requested")
    for seed in cfg["seeds"]:
        c = dict(cfg, n_ref=cfg["n_ref"][name], n_eval=cfg["n_eval"][name], n_train=cfg["n_train"][name],
                 extra=cfg["extra"][name])
        r = run_seed(name, seed, c)
        print(f"{name} seed {seed}: " + ", ".join(f"{k} {v:.1f}s" for k, v in r["timing_s"].items()), flush=True)
        if seed == cfg["seeds"][0]:
            p = r["ctx"]["dim"]
            if structures:
                lt = compare_laplace_torch(name, r, structures)
                print("laplace-torch:", json.dumps(clean(lt)), flush=True)
        runs.append({k: v for k, v in r.items() if k not in ("theta", "ctx", "data")})  # frees the GBs
        del r
    agg = summarize(name, runs, p)
    print_table(name, agg, "rel_error")
    print_table(name, agg, "log_trace")
    print("diagnostics:", json.dumps(clean({k: v for k, v in agg.items() if isinstance(v, dict) and "n" in v})))
    out = dict(summary=agg, verdict=verdict(name, agg), laplace_torch=lt, runs=runs)
    print(json.dumps(clean(out["verdict"]), indent=1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, small reference sets (< 1 minute)")
    ap.add_argument("--out", default=None, help="JSON path (default: results/laplace_subspace.json; none with --quick)")
    ap.add_argument("--datasets", nargs="+", default=["diabetes", "digits"])
    ap.add_argument("--seeds", nargs="+", type=int, default=None)
    ap.add_argument("--laplace-torch-full", action="store_true",
                    help="only laplace-torch's FullLaplace on diabetes seed 0 (p^3: minutes), merged into the JSON")
    args = ap.parse_args()
    cfg = config(args.quick)
    if args.seeds:
        cfg["seeds"] = args.seeds
    out = Path(args.out) if args.out else (None if args.quick else RESULTS / "laplace_subspace.json")
    if args.laplace_torch_full:
        return full_laplace_only(cfg, out)
    t0 = time.perf_counter()
    result = dict(config=cfg, lam=LAM, hidden=HIDDEN, datasets={})
    for name in args.datasets:
        structures = ["kron", "diag"] if cfg["laplace_torch"] else []
        result["datasets"][name] = run_dataset(name, cfg, structures)
    result["total_seconds"] = time.perf_counter() - t0
    print(f"total {result['total_seconds']:.0f} s")
    if out is not None:
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(clean(result), indent=1))
        print(f"wrote {out}")


def full_laplace_only(cfg, out):
    """laplace-torch ``FullLaplace`` (dense ``p x p`` GGN, ``O(p^3)``) against our Woodbury ``Sigma_X`` on
    diabetes seed 0; merged into an existing JSON as ``datasets.diabetes.laplace_torch_full``."""
    c = dict(cfg, seeds=[0], n_ref=None, n_eval=None, n_train=None, extra=[])
    r = run_seed("diabetes", 0, c)
    lt = compare_laplace_torch("diabetes", r, ["full"])
    print(json.dumps(clean(lt), indent=1))
    if out is not None and out.exists():
        result = json.loads(out.read_text())
        result["datasets"]["diabetes"]["laplace_torch_full"] = clean(lt)
        out.write_text(json.dumps(result, indent=1))
        print(f"merged into {out}")


if __name__ == "__main__":
    sys.exit(main())
