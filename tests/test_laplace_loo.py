"""LOO from a Laplace approximation: the cavity proposal (Laplace notes, T5) and ``pl.laplace`` end to end.

Known answers: on a linear-Gaussian model the Laplace approximation is the posterior, the cavity
formula of the notes is the brute-force refit, and the cavity map sends the draws of ``q`` exactly
onto the LOO posterior, so ``pl.loo`` of a ``pl.laplace`` fit equals the closed-form LOO to Monte
Carlo error.
"""

import jax
import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
from scipy import stats

import ppl_loo as pl
from ppl_loo.numerics.transforms import dense, gaussian_newton
from tests.gaussian_models import LinearRegressionKnownNoise

pytestmark = pytest.mark.x64  # calls the transforms directly on JAX arrays (conftest.py)


def _problem(n=25, p=3, sigma=0.8, tau=2.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = X @ rng.normal(size=p) + sigma * rng.normal(size=n)
    y[3] += 6.0  # an outlier: a large LOO shift
    return LinearRegressionKnownNoise(X, y, sigma=sigma, tau=tau)


def test_cavity_formula_equals_refit():
    """T5: mu_-i, v_-i of the notes' cavity formula equal the refit without observation i."""
    m = _problem()
    mean, cov = m.posterior()
    for i in range(m.n_obs):
        x, y = m.X[i], m.y[i]
        mu_i, v_i = x @ mean, x @ cov @ x
        v_mi = 1.0 / (1.0 / v_i - 1.0 / m.sigma**2)
        mu_mi = v_mi * (mu_i / v_i - y / m.sigma**2)
        m_r, C_r = m.posterior(drop=i)
        assert mu_mi == pytest.approx(x @ m_r, abs=1e-10)
        assert v_mi == pytest.approx(x @ C_r @ x, rel=1e-10)
        assert stats.norm.logpdf(y, mu_mi, np.sqrt(v_mi + m.sigma**2)) == pytest.approx(m.exact_elpd_i()[i], abs=1e-10)


def test_cavity_map_sends_q_to_the_loo_posterior():
    """The Laplace cavity map (gaussian_newton at the mode, with q's own covariance) is the affine
    map from N(m, Sigma) onto N(m_-i, Sigma_-i), with log|det A| = 1/2 log(det Sigma_-i / det Sigma)."""
    m = _problem()
    mean, cov = m.posterior()
    d = m.dim
    pts = jnp.asarray(np.vstack([mean, mean + np.eye(d)]))  # the mode and the unit steps from it: T = m_-i + A z
    for i in (0, 3, 7):
        x = m.X[i]
        r = m.y[i] - x @ mean
        g = jnp.asarray(x * r / m.sigma**2)  # gradient of log l_i at the mode
        V = jnp.asarray((x / np.linalg.norm(x))[:, None])
        D = jnp.asarray([-(x @ x) / m.sigma**2])
        prop = gaussian_newton(pts - jnp.asarray(mean), jnp.asarray([1.0]), g, V, D, jnp.asarray(cov) @ V,
                               jnp.asarray(cov) @ g)
        img = np.asarray(pts + dense(prop.delta, pts))
        m_r, C_r = m.posterior(drop=i)
        np.testing.assert_allclose(img[0], m_r, atol=1e-10)
        A = (img[1:] - img[0]).T
        np.testing.assert_allclose(A @ cov @ A.T, C_r, rtol=1e-9, atol=1e-12)
        half = 0.5 * (np.linalg.slogdet(C_r)[1] - np.linalg.slogdet(cov)[1])
        assert float(prop.logdet[0, 0]) == pytest.approx(half, abs=1e-10)


def _jax_linear_model(m):
    X, y = jnp.asarray(m.X), jnp.asarray(m.y)
    return pl.JaxModel(
        {"beta": ((m.dim,), None)},
        lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0.0, m.tau)),
        lambda v: jst.norm.logpdf(y, X @ v["beta"], m.sigma),
        obs_dims=("obs",),
        observed=np.asarray(m.y),
    )


@pytest.fixture(scope="module")
def linear_laplace():
    m = _problem()
    model = _jax_linear_model(m)
    tree = pl.laplace(None, model, draws=2000, random_seed=1)
    return m, model, tree


def test_laplace_is_the_posterior_of_a_linear_gaussian_model(linear_laplace):
    """T1 in the workflow: the mode and the covariance of pl.laplace are the closed-form posterior's."""
    m, _, tree = linear_laplace
    mean, cov = m.posterior()
    g = tree["laplace"]
    assert g.attrs["curvature"] == "hessian" and g.attrs["map_converged"] == 1
    np.testing.assert_allclose(g["map"].values, mean, atol=1e-7)
    np.testing.assert_allclose(g["sd"].values, np.sqrt(np.diag(cov)), rtol=1e-7)
    draws = tree["posterior"]["beta"].values.reshape(-1, m.dim)
    lq = stats.multivariate_normal(mean, cov).logpdf(draws)
    np.testing.assert_allclose(g["log_q"].values.ravel(), lq, atol=1e-6)


def test_loo_of_laplace_equals_closed_form(linear_laplace):
    """pl.loo(tree, model): Eq. 13 weights plus the cavity proposal give the exact LOO to MC error,
    on every observation, the outlier included."""
    m, model, tree = linear_laplace
    res = pl.loo(tree, model)
    exact = m.exact_elpd_i()
    err = res.elpd_i.values - exact
    se = np.maximum(res.mcse_elpd_i.values, 1e-3)
    assert np.all(np.abs(err) < 4 * se + 1e-3), (err, se)
    assert res.approximation == "laplace" and res.pareto_k_q == -np.inf  # q is the posterior: constant p/q
    assert bool(np.all(res.approx_ok.values))
    assert abs(res.elpd - exact.sum()) < 4 * np.sqrt(np.sum(se**2)) + 1e-2
    assert not np.any(res.doubtful.values)


# ------------------------------------------------------------------------ the three backends
@pytest.fixture(scope="module")
def backend_fits():
    import shutil

    from tests.linear_models import problem, pymc_model, stan_model

    m = problem()
    out = {"pymc": (pymc_model(m), None)}
    if shutil.which("g++") is not None:
        out["stan"] = (stan_model(m), None)
    return m, {k: (model, pl.laplace(None, model, draws=2000, random_seed=1)) for k, (model, _) in out.items()}


@pytest.mark.parametrize("backend", ["pymc", "stan"])
def test_laplace_and_loo_in_pymc_and_stan(backend_fits, backend):
    """The same regression in PyMC (Hessian by autodiff of PyTensor's JAX graph) and Stan (Hessian-vector
    products by finite differences of Stan's gradients): the closed-form posterior, and LOO to MC error."""
    m, fits = backend_fits
    if backend not in fits:
        pytest.skip("no C++ compiler for Stan")
    model, tree = fits[backend]
    mean, cov = m.posterior()
    g = tree["laplace"]
    tol = 1e-6 if backend == "pymc" else 1e-4  # central differences of the gradient: O(h^2)
    np.testing.assert_allclose(g["map"].values, mean, atol=1e-6)
    np.testing.assert_allclose(g["sd"].values, np.sqrt(np.diag(cov)), rtol=tol)
    res = pl.loo(tree, model, progressbar=False)
    err = res.elpd_i.values - m.exact_elpd_i()
    se = np.maximum(res.mcse_elpd_i.values, 1e-3)
    assert np.all(np.abs(err) < 4 * se + 1e-3), (err, se)


# ------------------------------------------------------------------------ networks and subspaces
@pytest.fixture(scope="module")
def relu():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 20))
    y = (rng.random(30) < 1 / (1 + np.exp(-2 * X[:, 0]))).astype(int)
    return X, y, pl.models.ReluNet(X, y, hidden=3)


@pytest.fixture(scope="module")
def relu_full(relu):
    """The full Laplace approximation of the network (one MAP search and compile shared by the tests that
    only read its mode, basis and precision)."""
    X, y, net = relu
    return pl.laplace(None, net, draws=200, random_seed=0)


def test_relu_full_laplace_is_exact_through_the_gauss_newton_factor(relu, relu_full):
    """d = 67 > n = 30 with an isotropic N(0, 1) prior: q is N(theta_hat, (V V^T + I)^-1) exactly,
    formed on span(V) plus 1/lambda on its complement; compared with the dense inverse."""
    X, y, net = relu
    tree = relu_full
    g = tree["laplace"]
    assert g.attrs["curvature"] == "ggn" and g.attrs["complement_variance"] == pytest.approx(1.0)
    from ppl_loo.jax_settings import x64
    from ppl_loo.numerics.laplace.precision import ggn_precision, lik_hessian, to_dense

    pm = pl.as_model(net)
    with x64():
        th = jnp.asarray(g["map"].values)
        prec = ggn_precision(pm.output.fn, th, lik_hessian(pm.output.fn(th), "bernoulli"), 1.0)
        cov = np.linalg.inv(np.asarray(to_dense(prec)))
    np.testing.assert_allclose(g["sd"].values, np.sqrt(np.diag(cov)), rtol=1e-8)
    assert g.attrs["relative_error"] == pytest.approx(0.0, abs=1e-8)  # the full Laplace: Sigma_{P,X} = Sigma_X


def test_relu_subspaces_theorem_1(relu):
    """Theorem 1 in the workflow: the optimal subspace of rank s reaches the Ky Fan bound and has the
    smallest relative error of all methods; at s = rank(J) its error is zero."""
    X, y, net = relu
    errs, traces = {}, {}
    for method in ("optimal", "lowrank-diag", "lowrank-kfac", "subset-magnitude", "subset-diag", "subset-swag"):
        g = pl.laplace(None, net, subspace=method, rank=5, prior_precision=1.0, draws=100, random_seed=0)["laplace"]
        assert g.attrs["rank"] == 5 and g["P"].shape == (net.dim, 5)
        errs[method], traces[method] = g.attrs["relative_error"], g.attrs["trace"]
        assert traces[method] <= g.attrs["trace_bound"] * (1 + 1e-8)  # Lemma 2 / Ky Fan
    assert traces["optimal"] == pytest.approx(g.attrs["trace_bound"], rel=1e-8)
    assert all(errs["optimal"] <= e + 1e-10 for e in errs.values()), errs
    full = pl.laplace(None, net, subspace="optimal", rank=30, prior_precision=1.0, draws=100, random_seed=0)["laplace"]
    assert full.attrs["jacobian_rank"] == 30 and full.attrs["relative_error"] < 1e-8


def test_laplace_predictive_probit(relu, relu_full):
    """Eq. 12: p = sigmoid(f / sqrt(1 + pi/8 var)), var = J Sigma J^T at the new inputs."""
    X, y, net = relu
    tree = relu_full  # the predictive reads the mode, P and M only (not the draws)
    pred = pl.laplace_predictive(tree, net, X[:4])
    g = tree["laplace"]
    pm = pl.as_model(net)
    from ppl_loo.jax_settings import x64

    with x64():
        th = jnp.asarray(g["map"].values)
        J = np.asarray(jax.jacrev(lambda t: pm.output.fn(t, X[:4])[:, 0])(th))
        f = np.asarray(pm.output.fn(th, X[:4])[:, 0])
    P, M = g["P"].values, g["M"].values
    var = np.einsum("id,de,ie->i", J, P @ np.linalg.inv(M) @ P.T, J)
    np.testing.assert_allclose(pred["var_f"].values, var, rtol=1e-8)
    np.testing.assert_allclose(pred["p"].values, 1 / (1 + np.exp(-f / np.sqrt(1 + np.pi / 8 * var))), rtol=1e-8)


def test_glm_curvatures_agree():
    """T9 and App. G: for a logistic regression (linear in theta) the Hessian, the GGN and the Fisher
    factor V V^T of eq. 8 are the same precision."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    y = (rng.random(40) < 0.5).astype(int)
    lr = pl.models.LogisticRegression(X, y)
    sds = [pl.laplace(None, lr, curvature=c, draws=20, random_seed=0)["laplace"]["sd"].values
           for c in ("ggn", "hessian", "fisher")]
    np.testing.assert_allclose(sds[0], sds[1], rtol=1e-8)
    np.testing.assert_allclose(sds[0], sds[2], rtol=1e-8)


def test_laplace_bad_input_names_the_fix(relu):
    X, y, net = relu
    m = _problem()
    with pytest.raises(ValueError, match="needs rank="):
        pl.laplace(None, net, subspace="optimal", random_seed=0)
    with pytest.raises(ValueError, match="curvature='hessian'"):
        pl.laplace(None, _jax_linear_model(m), curvature="ggn", random_seed=0)
    with pytest.raises(TypeError, match="random_seed"):
        pl.laplace(None, net, random_seed="abc")
    with pytest.raises(ValueError, match=r"unknown option 'max_steps'.*LaplaceOptions.*steps"):
        pl.laplace(None, net, optimizer={"max_steps": 10})
    # random_seed=None: a seed derived from the observed data, so a rerun on the same input reproduces
    a, b = (pl.laplace(None, _jax_linear_model(m), draws=20)["posterior"] for _ in range(2))
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values)
    with pytest.raises(ValueError, match="lowrank-kfac"):
        pl.laplace(None, _jax_linear_model(m), subspace="lowrank-kfac", rank=2, random_seed=0)


def test_laplace_refuses_a_posterior_without_a_mode():
    """A centred hierarchical model: as tau -> 0 with beta -> 0 the density grows without bound (the
    funnel), so there is no mode and no Laplace approximation; the error names the scale."""
    from ppl_loo.adapters.jax.bijectors import Exp

    y = np.random.default_rng(3).normal(size=40)
    groups = np.repeat(np.arange(20), 2)
    model = pl.JaxModel({"tau": ((), Exp()), "beta": ((20,), None)},
                        lambda v: jst.cauchy.logpdf(v["tau"]) + jnp.sum(jst.norm.logpdf(v["beta"], 0.0, v["tau"])),
                        lambda v: jst.norm.logpdf(jnp.asarray(y), v["beta"][groups], 3.0), obs_dims=("obs",),
                        observed=y)
    with pytest.raises(ValueError, match="no mode.*tau"):
        pl.laplace(None, model, random_seed=0)


def test_declared_gaussian_output_ggn_and_regression_predictive():
    """A JAX model that declares its output (the regression mean): the GGN of eq. 6-7 equals the
    Hessian for a model linear in theta (T9), and the linearized predictive is exact there (eq. 10):
    mean x^T m, variance x^T Sigma x + sigma^2, the closed-form posterior predictive."""
    from ppl_loo.model import Output

    m = _problem()
    X, y = jnp.asarray(m.X), jnp.asarray(m.y)

    def mean_fn(v, X_new=None):
        return (X if X_new is None else jnp.asarray(X_new)) @ v["beta"]

    model = pl.JaxModel({"beta": ((m.dim,), None)}, lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0.0, m.tau)),
                        lambda v: jst.norm.logpdf(y, X @ v["beta"], m.sigma), obs_dims=("obs",),
                        observed=np.asarray(m.y), output=Output(mean_fn, "gaussian", m.sigma))
    tree = pl.laplace(None, model, draws=100, random_seed=0)
    assert tree["laplace"].attrs["curvature"] == "ggn"
    mean, cov = m.posterior()
    np.testing.assert_allclose(tree["laplace"]["sd"].values, np.sqrt(np.diag(cov)), rtol=1e-8)
    X_new = np.random.default_rng(9).normal(size=(4, m.dim))
    pred = pl.laplace_predictive(tree, model, X_new)
    np.testing.assert_allclose(pred["f"].values, X_new @ mean, atol=1e-8)
    np.testing.assert_allclose(pred["var_y"].values, np.einsum("id,de,ie->i", X_new, cov, X_new) + m.sigma**2,
                               rtol=1e-8)


def test_laplace_predictive_bad_input_names_the_fix(relu, relu_full):
    X, y, net = relu
    tree = relu_full
    with pytest.raises(ValueError, match=r"X has shape \(4, 7\).*rows of 21 inputs \(or 20"):
        pl.laplace_predictive(tree, net, np.zeros((4, 7)))
    with pytest.raises(ValueError, match="no laplace group"):
        pl.laplace_predictive(pl.qnvb(None, net, draws=20, random_seed=0, optimizer={"steps": 5}), net, X[:2])
