"""Known-answer tests of the optimal-subspace Laplace numerics (notes laplace-optimal-subspace.md, T1-T9).

Every test runs the package's own JAX computations and compares them with a closed form (Theorem 1,
Eckart-Young, Lemma 2, the linear-Gaussian posterior) or a brute-force reference.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

import ppl_loo.numerics.laplace as la

pytestmark = pytest.mark.x64


# ----------------------------------------------------------------------------- T1 fixture
@pytest.fixture(scope="module")
def lin():
    """Linear-Gaussian model f(x) = Phi(x) theta: the LA is exact and GGN = Hessian = Fisher."""
    rng = np.random.default_rng(1)
    N, p, n, sigma, lam = 40, 12, 6, 0.5, 2.0
    Phi = rng.normal(size=(N, p)) * np.linspace(0.2, 2.0, p)
    y = Phi @ rng.normal(size=p) + sigma * rng.normal(size=N)
    Phi_X = rng.normal(size=(n, p))
    Psi = np.linalg.inv(Phi.T @ Phi / sigma**2 + lam * np.eye(p))
    theta_hat = Psi @ Phi.T @ y / sigma**2
    out = lambda t: (jnp.asarray(Phi) @ t)[:, None]
    prec = la.ggn_precision(out, jnp.zeros(p), la.lik_hessian(np.zeros((N, 1)), "gaussian", sigma), lam)
    sx = Phi_X @ Psi @ Phi_X.T
    w, U = np.linalg.eigh(sx)
    return dict(Phi=Phi, y=y, J=Phi_X, Psi=Psi, theta=theta_hat, prec=prec, sigma=sigma, lam=lam, sx=sx,
                w=w[::-1], U=U[:, ::-1], psi_mat=lambda B: jnp.asarray(Psi) @ B, p=p, n=n)


def _sigma_P(lin, P):
    return la.sigma_PX(lin["J"], P, la.subspace_precision(P, lin["prec"]))


def test_T1_precision_and_sigma_x_match_closed_form(lin):
    prec = lin["prec"]
    Lam = np.linalg.inv(lin["Psi"])
    np.testing.assert_allclose(la.to_dense(prec), Lam, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(prec.diag, np.diag(Lam), rtol=1e-12)
    b = lin["Phi"].T @ lin["y"] / lin["sigma"] ** 2
    for method in ("woodbury", "dense", "cg"):
        np.testing.assert_allclose(la.solve(prec, b, method=method), lin["theta"], rtol=1e-7)
    wood = la.woodbury_covariance(prec.factor, prec.prior)
    np.testing.assert_allclose(la.sigma_X(lin["J"], wood.psi_mat), lin["sx"], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(wood.diag(), np.diag(lin["Psi"]), rtol=1e-10)


def test_T1a_b_optimal_subspace_is_eckart_young(lin):
    w, U = lin["w"], lin["U"]
    curve = la.optimal_error_curve(w)
    for s in range(1, lin["n"] + 1):
        P, info = la.subspace_basis("optimal", s, J_ref=lin["J"], psi_mat=lin["psi_mat"], return_info=True)
        assert P.shape == (lin["p"], s) and not info.capped
        np.testing.assert_allclose(P.T @ P, np.eye(s), atol=1e-12)  # QR-orthonormal (A17)
        S = _sigma_P(lin, P)
        best = (U[:, :s] * w[:s]) @ U[:, :s].T
        assert np.abs(S - best).max() < 1e-12 * np.abs(lin["sx"]).max()  # (a), Eq. 24
        err = la.relative_error(lin["sx"], S)
        assert err == pytest.approx(math.sqrt(np.sum(w[s:] ** 2) / np.sum(w**2)), abs=1e-10)  # (b)
        assert err == pytest.approx(curve[s], abs=1e-10)
    assert curve[lin["n"]] == 0.0 and curve[0] == 1.0


def test_T1c_random_subspaces_are_worse_lemma2_and_ky_fan(lin):
    rng = np.random.default_rng(2)
    w, curve = lin["w"], la.optimal_error_curve(lin["w"])
    for s in (1, 2, 4):
        for _ in range(5):
            P = rng.normal(size=(lin["p"], s))
            S = _sigma_P(lin, P)
            assert la.relative_error(lin["sx"], S) >= curve[s] - 1e-12
            assert np.linalg.eigvalsh(lin["sx"] - S).min() >= -1e-10  # Lemma 2 (Loewner order)
            tc = la.trace_criterion(S, eigs=w, s=s, sigma_x=lin["sx"])
            assert tc.trace <= tc.bound + 1e-12 and tc.bound <= tc.trace_X + 1e-12
            assert tc.log_trace == pytest.approx(math.log(tc.trace))
    P = la.subspace_basis("optimal", 2, J_ref=lin["J"], psi_mat=lin["psi_mat"])
    assert la.trace_criterion(_sigma_P(lin, P), eigs=w, s=2).trace == pytest.approx(w[0] + w[1], rel=1e-10)


def test_T1d_sigma_depends_only_on_the_span(lin):
    rng = np.random.default_rng(3)
    P = rng.normal(size=(lin["p"], 3))
    Q = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    np.testing.assert_allclose(_sigma_P(lin, P @ Q), _sigma_P(lin, P), rtol=1e-9, atol=1e-13)


def test_T1e_full_rank_subspaces_are_exact_and_s_is_capped_at_the_rank(lin):
    P, info = la.subspace_basis("optimal", 10, J_ref=lin["J"], psi_mat=lin["psi_mat"], return_info=True)
    assert info.rank == lin["n"] and info.s == lin["n"] and info.capped  # A9: s <= rank(J_X)
    assert la.relative_error(lin["sx"], _sigma_P(lin, P)) < 1e-12
    P = la.subspace_basis("subset-magnitude", lin["p"], theta_map=lin["theta"])
    assert la.relative_error(lin["sx"], _sigma_P(lin, P)) < 1e-12
    P = la.subspace_basis("full", 0, theta_map=lin["theta"])
    assert la.relative_error(lin["sx"], _sigma_P(lin, P)) < 1e-12


def test_T1f_practical_scheme_with_exact_psi_reproduces_the_optimum(lin):
    wood = la.woodbury_covariance(lin["prec"].factor, lin["prec"].prior)
    for s in (1, 3, 5):
        P_opt = la.subspace_basis("optimal", s, J_ref=lin["J"], psi_mat=lin["psi_mat"])
        P_pr = la.subspace_basis("lowrank-kfac", s, J_ref=lin["J"], psi_approx=wood)  # any psi_mat object
        np.testing.assert_allclose(P_pr @ P_pr.T, P_opt @ P_opt.T, atol=1e-10)


# ----------------------------------------------------------------------------- T2, T3
def test_T2_two_parameters_subset_underestimates_by_rho_squared():
    a, b, c = 2.0, 1.0, 0.8
    Psi = np.array([[a, c], [c, b]])
    Lam = jnp.asarray(np.linalg.inv(Psi))
    prec = la.Precision(lambda v: Lam @ v, jnp.diag(Lam), 2)
    J = np.array([[1.0, 0.0]])
    P_opt = la.subspace_basis("optimal", 1, J_ref=J, psi_mat=lambda B: jnp.asarray(Psi) @ B)
    np.testing.assert_allclose(np.abs(P_opt[:, 0]), np.array([a, c]) / np.hypot(a, c), rtol=1e-12)
    S_opt = la.sigma_PX(J, P_opt, la.subspace_precision(P_opt, prec))
    assert S_opt[0, 0] == pytest.approx(a, rel=1e-12)
    P_sub = la.subspace_basis("subset-diag", 1, precision=prec)  # largest 1/Lambda_jj: parameter 0
    np.testing.assert_array_equal(P_sub, [[1.0], [0.0]])
    S_sub = la.sigma_PX(J, P_sub, la.subspace_precision(P_sub, prec))
    assert S_sub[0, 0] == pytest.approx(a - c**2 / b, rel=1e-12)  # conditional variance
    err = la.relative_error(np.array([[a]]), S_sub)
    assert err == pytest.approx(c**2 / (a * b), rel=1e-12) and err > 0.3 > la.relative_error(np.array([[a]]), S_opt)


def test_T3_diagonal_case_optimal_equals_subset_diag():
    rng = np.random.default_rng(4)
    p = 9
    psi = rng.uniform(0.1, 3.0, size=p)
    prec = la.Precision(lambda v: v / psi, jnp.asarray(1.0 / psi), p)
    J = np.eye(p)
    sx = np.diag(psi)
    for s in (1, 4, 7):
        P_opt = la.subspace_basis("optimal", s, J_ref=J, psi_mat=lambda B: psi[:, None] * B)
        P_sub = la.subspace_basis("subset-diag", s, psi_approx=psi)
        np.testing.assert_allclose(P_opt @ P_opt.T, P_sub @ P_sub.T, atol=1e-12)
        top = np.sort(psi)[::-1]
        err = la.relative_error(sx, la.sigma_PX(J, P_sub, la.subspace_precision(P_sub, prec)))
        assert err == pytest.approx(math.sqrt(np.sum(top[s:] ** 2) / np.sum(top**2)), rel=1e-10)


def test_subset_ties_take_the_lower_index_first():
    P = la.subspace_basis("subset-swag", 3, swag_var=np.array([1.0, 5.0, 5.0, 0.5, 5.0]))
    np.testing.assert_array_equal(np.argmax(np.asarray(P), axis=0), [1, 2, 4])


# ----------------------------------------------------------------------------- networks
@pytest.fixture(scope="module")
def net():
    rng = np.random.default_rng(5)
    sizes = (3, 6, 5, 4)
    layers = la.mlp_layers(sizes)
    d = int(layers[-1].b_index[-1]) + 1
    theta = la.mlp_init(jax.random.PRNGKey(0), sizes)
    X = jnp.asarray(rng.normal(size=(9, 3)))
    fwd = la.dense_forward(layers, X)
    return dict(layers=layers, d=d, theta=theta, X=X, fwd=fwd, out=lambda t: fwd(t)[0])


def test_T4_fisher_factor_is_the_ggn_and_probit_reduces_to_softmax(net):
    out, theta, d = net["out"], net["theta"], net["d"]
    f = out(theta)
    J = np.asarray(la.output_jacobian(out, theta)).reshape(9, 4, d)
    phi = np.asarray(jax.nn.softmax(f))
    ggn = sum(J[i].T @ (np.diag(phi[i]) - np.outer(phi[i], phi[i])) @ J[i] for i in range(9))
    V = la.fisher_factor(out, theta, "categorical")
    assert V.shape == (d, 36)
    np.testing.assert_allclose(V @ V.T, ggn, atol=1e-12)
    np.testing.assert_allclose(la.to_dense(la.ggn_precision(out, theta, la.lik_hessian(f, "categorical"), 0.0)),
                               ggn, atol=1e-12)
    # the softmax Hessian has rank C - 1: the reduced square root is exact
    H = la.lik_hessian(f, "categorical")
    L3 = la.hessian_sqrt(H, rank=3)
    np.testing.assert_allclose(jnp.einsum("nck,ndk->ncd", L3, L3), H, atol=1e-14)
    # Bernoulli (one logit): the two-class factor gives J^T p (1 - p) J
    out1 = lambda t: out(t)[:, :1]
    p = np.asarray(jax.nn.sigmoid(f[:, 0]))
    Vb = la.fisher_factor(out1, theta, "bernoulli")
    np.testing.assert_allclose(Vb @ Vb.T, sum(p[i] * (1 - p[i]) * np.outer(J[i, 0], J[i, 0]) for i in range(9)),
                               atol=1e-12)
    pred = la.linearized_predictive(f, jnp.zeros_like(f), "categorical")
    np.testing.assert_allclose(pred.log_probs, jax.nn.log_softmax(f), atol=1e-14)
    predb = la.linearized_predictive(f[:, 0], jnp.zeros(9), "bernoulli")
    np.testing.assert_allclose(np.exp(predb.log_probs[:, 1]), p, rtol=1e-12)
    v = jnp.full_like(f, 2.0)
    kappa = 1.0 / math.sqrt(1.0 + math.pi / 8.0 * 2.0)
    np.testing.assert_allclose(la.linearized_predictive(f, v, "categorical").log_probs,
                               jax.nn.log_softmax(kappa * f), atol=1e-14)


def test_predictive_variance_blocks_and_regression_predictive(net):
    rng = np.random.default_rng(6)
    d = net["d"]
    J = np.asarray(la.output_jacobian(net["out"], net["theta"]))  # (36, d)
    P = np.linalg.qr(rng.normal(size=(d, 7)))[0]
    A = rng.normal(size=(7, 7))
    M = A @ A.T + np.eye(7)
    S = np.asarray(la.sigma_PX(J, P, M))
    blocks = la.predictive_variance(J, P, M, n_outputs=4)
    for i in range(9):
        np.testing.assert_allclose(blocks[i], S[4 * i:4 * i + 4, 4 * i:4 * i + 4], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(la.predictive_variance(J.reshape(9, 4, d), P, M, diagonal=True),
                               np.diagonal(S).reshape(9, 4), rtol=1e-10)
    f = np.asarray(net["out"](net["theta"]))
    pred = la.linearized_predictive(f, blocks, "gaussian", sigma2=0.3)
    np.testing.assert_allclose(pred.var, np.asarray(blocks) + 0.3 * np.eye(4), rtol=1e-12)
    y = f + rng.normal(size=f.shape)
    ref = [-0.5 * (r @ np.linalg.solve(C, r) + np.linalg.slogdet(2 * np.pi * C)[1])
           for r, C in zip(y - f, np.asarray(pred.var))]
    np.testing.assert_allclose(la.predictive_log_density(pred, y), ref, rtol=1e-10)


def test_T7_nll_minimum_is_mse_minus_sigma2():
    rng = np.random.default_rng(7)
    f = rng.normal(size=300)
    y = f + 0.8 * rng.normal(size=300)
    mse = np.mean((y - f) ** 2)

    def nll(sig, s2):
        pred = la.linearized_predictive(f[:, None], np.full((300, 1), sig), "gaussian", sigma2=s2)
        return -float(jnp.mean(la.predictive_log_density(pred, y)))

    s2 = 0.3
    res = minimize_scalar(lambda s: nll(s, s2), bounds=(0.0, 3.0), method="bounded", options={"xatol": 1e-9})
    assert res.x == pytest.approx(mse - s2, abs=1e-6)  # Eq. 31
    res = minimize_scalar(lambda s: nll(s, mse + 0.2), bounds=(0.0, 3.0), method="bounded")
    assert res.x < 1e-4  # sigma^2 >= MSE: the minimum is at Sigma = 0 (A15)


def test_T8_inactive_relu_unit_gives_dead_parameters():
    rng = np.random.default_rng(8)
    sizes = (3, 4, 1)
    layers = la.mlp_layers(sizes)
    d = int(layers[-1].b_index[-1]) + 1
    theta = np.asarray(la.mlp_init(jax.random.PRNGKey(1), sizes)).copy()
    X = rng.normal(size=(50, 3))
    theta[layers[0].w_index] = np.abs(theta[layers[0].w_index]) * np.array([[1], [1], [1], [0]])
    theta[layers[0].b_index] = [5.0, 5.0, 5.0, -1.0]  # unit 3 never fires
    J = la.output_jacobian(lambda t: la.dense_apply(layers, t, jnp.asarray(X)), jnp.asarray(theta))
    dead = np.zeros(d, bool)
    dead[layers[0].w_index[3]] = dead[layers[0].b_index[3]] = dead[layers[1].w_index[0, 3]] = True
    np.testing.assert_array_equal(la.dead_parameters(J), dead)
    assert la.dead_fraction(J) == pytest.approx(5 / d)
    assert la.jacobian_rank(J) <= d - 5 and la.jacobian_rank(J, method="gram") == la.jacobian_rank(J)


def test_T9_hessian_equals_ggn_for_linear_and_zero_residual_models(lin, net):
    Phi, y, s, lam = lin["Phi"], lin["y"], lin["sigma"], lin["lam"]
    neg = lambda t: 0.5 * jnp.sum((y - Phi @ t) ** 2) / s**2 + 0.5 * lam * jnp.sum(t**2)
    dense = la.to_dense(lin["prec"])
    for hvp, tol in (("autodiff", 1e-10), ("fd", 1e-6)):
        H = la.hessian_precision(neg, jnp.asarray(lin["theta"]), hvp=hvp)
        np.testing.assert_allclose(la.to_dense(H), dense, atol=tol * np.abs(dense).max())
        np.testing.assert_allclose(H.diag, np.diag(dense), rtol=tol)
    theta = net["theta"]
    layers = net["layers"]
    out_t = lambda t: la.dense_apply(layers, t, net["X"], activation=jnp.tanh)  # smooth: H_f != 0
    f0 = out_t(theta)
    ggn = la.to_dense(la.ggn_precision(out_t, theta, la.lik_hessian(f0, "gaussian", 0.7), 1.5))
    for resid, equal in ((0.0, True), (1.0, False)):
        yy = f0 + resid
        neg = lambda t: 0.5 * jnp.sum((yy - out_t(t)) ** 2) / 0.49 + 0.75 * jnp.sum(t**2)
        H = la.to_dense(la.hessian_precision(neg, theta))
        assert (np.abs(H - ggn).max() < 1e-10) == equal


def test_T6_mode_shift_under_prior_14_and_zero_under_restricted_prior(lin):
    Phi, y, s, lam, th = lin["Phi"], lin["y"], lin["sigma"], lin["lam"], jnp.asarray(lin["theta"])
    P = jnp.asarray(np.linalg.qr(np.random.default_rng(9).normal(size=(lin["p"], 3)))[0])
    M = la.subspace_precision(P, lin["prec"])
    lik = lambda mu: 0.5 * jnp.sum((y - Phi @ (th + P @ mu)) ** 2) / s**2
    paper = lambda mu: lik(mu) + 0.5 * lam * mu @ (P.T @ P) @ mu  # prior (14)
    restricted = lambda mu: lik(mu) + 0.5 * lam * jnp.sum((th + P @ mu) ** 2)  # A1
    z = jnp.zeros(3)
    mode = -jnp.linalg.solve(jax.hessian(paper)(z), jax.grad(paper)(z))  # exact: quadratic objective
    np.testing.assert_allclose(la.subspace_mode_shift(P, M, lam, th), mode, rtol=1e-9)
    assert float(jnp.linalg.norm(mode)) > 1e-3
    assert float(jnp.abs(jax.grad(restricted)(z)).max()) < 1e-9
    np.testing.assert_allclose(jax.hessian(restricted)(z), M, rtol=1e-10)  # Lemma 1, Eq. 16


# ----------------------------------------------------------------------------- KFAC, ReluNet, SWAG
def test_kfac_is_exact_for_identical_inputs_and_inverts_consistently(net):
    layers, d, theta, fwd = net["layers"], net["d"], net["theta"], net["fwd"]
    X1 = jnp.repeat(net["X"][:1], 5, axis=0)  # 5 identical inputs: exact iff A = mean a a^T, G = sum g g^T
    fwd1 = la.dense_forward(layers, X1)
    out1 = lambda t: fwd1(t)[0]
    f = out1(theta)
    L = la.lik_hessian_sqrt(f, "categorical")
    K = la.kfac(layers, la.layer_taps(fwd1, theta, L, layers), 0.7, d)
    ggn = np.asarray(la.to_dense(la.ggn_precision(out1, theta, la.lik_hessian(f, "categorical"), 0.7)))
    Kd = np.asarray(K.prec_mat(jnp.eye(d)))
    for lay in layers:  # per-layer diagonal blocks (weights; biases) are exact here
        for idx in (lay.w_index.ravel(), lay.b_index):
            np.testing.assert_allclose(Kd[np.ix_(idx, idx)], ggn[np.ix_(idx, idx)], atol=1e-12)
    Kf = la.kfac(layers, la.layer_taps(fwd, theta, la.lik_hessian_sqrt(net["out"](theta), "categorical"), layers),
                 0.7, d)
    Psi = np.asarray(Kf.psi_mat(jnp.eye(d)))
    np.testing.assert_allclose(Psi @ np.asarray(Kf.prec_mat(jnp.eye(d))), np.eye(d), atol=1e-10)
    np.testing.assert_allclose(Kf.diag(), np.diag(Psi), rtol=1e-10)
    assert np.abs(Psi - Psi.T).max() < 1e-12


def test_relu_net_layout_is_expressible_and_factor_products_are_exact():
    import ppl_loo as pl

    rng = np.random.default_rng(10)
    X = rng.normal(size=(12, 2))
    model = pl.models.ReluNet(X, (X[:, 0] > 0).astype(int), hidden=3)
    st = model.structure
    layers = la.relu_net_layers(st.hidden, st.X.shape[1], st.w1_index, st.w2_index, st.b2_index)
    theta = jnp.asarray(rng.normal(size=model.layout.dim))
    Xa = jnp.asarray(st.X)
    np.testing.assert_allclose(la.dense_apply(layers, theta, Xa)[:, 0], model.linear_predictor(theta), rtol=1e-12)
    out = lambda t: la.dense_apply(layers, t, Xa)
    L = la.lik_hessian_sqrt(out(theta), "bernoulli")
    taps = la.layer_taps(la.dense_forward(layers, Xa), theta, L, layers)
    V = la.fisher_factor(out, theta, "bernoulli")
    d = model.layout.dim
    np.testing.assert_allclose(la.factor_gram(layers, taps), V.T @ V, atol=1e-12)
    np.testing.assert_allclose(la.factor_diag(layers, taps, d), np.sum(V**2, axis=1), atol=1e-12)
    B = jnp.asarray(rng.normal(size=(d, 3)))
    np.testing.assert_allclose(la.factor_rmat(layers, taps, B), V.T @ B, atol=1e-12)
    U = jnp.asarray(rng.normal(size=(V.shape[1], 2)))
    np.testing.assert_allclose(la.factor_mat(layers, taps, U, d), V @ U, atol=1e-12)
    idx = np.array([d - 1, 0, 5, 10, 3])
    np.testing.assert_allclose(la.factor_rows(layers, taps, idx), V[idx], atol=1e-14)
    op = la.factor_operator(layers, taps, d, chunk=2)
    np.testing.assert_allclose(la.woodbury_covariance(op, 1.3).psi_mat(B),
                               np.linalg.solve(V @ V.T + 1.3 * np.eye(d), B), atol=1e-12)


def test_swag_matches_pytorch_sgd_semantics():
    rng = np.random.default_rng(11)
    d = 4
    A = rng.normal(size=(2, 6, d))
    t = rng.normal(size=(2, 6))

    def loss(theta, batch):
        a, tt = batch
        return jnp.mean((a @ (theta * jnp.array([1.0, 1.0, 1.0, 0.0])) - tt) ** 2)

    theta0 = rng.normal(size=d)
    theta0[3] = 0.0  # no gradient, decays from 0: stays 0 -> variance clamped
    var = la.swag_diagonal(loss, jnp.asarray(theta0), (jnp.asarray(A), jnp.asarray(t)), n_snapshots=5)
    th, buf, snaps, mask = theta0.copy(), None, [], np.array([1.0, 1.0, 1.0, 0.0])
    for _ in range(5):  # torch.optim.SGD(lr=0.01, momentum=0.9, weight_decay=3e-4), one snapshot per epoch
        for a, tt in zip(A, t):
            g = 2 * mask * (a.T @ (a @ (th * mask) - tt)) / len(tt) + 3e-4 * th
            buf = g if buf is None else 0.9 * buf + g
            th = th - 0.01 * buf
        snaps.append(th.copy())
    ref = np.mean(np.square(snaps), axis=0) - np.mean(snaps, axis=0) ** 2
    np.testing.assert_allclose(var[:3], ref[:3], rtol=1e-8)
    assert float(var[3]) == 1e-30


def test_orthonormalization_keeps_nested_spans_of_ill_conditioned_bases():
    from ppl_loo.numerics.laplace.subspace import _orthonormalize

    rng = np.random.default_rng(12)
    A = rng.normal(size=(600, 40)) @ np.diag(np.logspace(0, -12, 40)) @ np.triu(rng.normal(size=(40, 40)))
    Q = np.asarray(_orthonormalize(A))
    assert Q.dtype == np.float64 and np.abs(Q.T @ Q - np.eye(40)).max() < 1e-10
    for k in (1, 5, 20):
        Qa = np.linalg.qr(A[:, :k])[0]
        assert np.abs(Qa @ Qa.T - Q[:, :k] @ Q[:, :k].T).max() < 1e-6
