"""Model adapters: densities against independent SciPy implementations, layouts, errors, NUTS.

Every assertion compares with a known answer: a SciPy log density, an identity
(``constrain(unconstrain(x)) == x``), a closed-form conjugate posterior, or a property of the data.
Timing of NUTS and PSIS lives in ``benchmarks/`` (``benchmarks/nuts.py``, ``benchmarks/psis.py``).
"""

import hashlib

import jax
import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
import xarray as xr
from data_paths import OVARIAN
from scipy import special, stats

from ppl_loo.adapters.jax.bijectors import (
    Exp,
    Identity,
    Interval,
    LowerBound,
    Sigmoid,
    SimplexStickBreaking,
    UpperBound,
)
from ppl_loo.datasets import load_ovarian
from ppl_loo.models import JaxModel, LogisticRegression, PosteriorModel, ReluNet
from ppl_loo.sampling import sample_nuts

# calls the models' and bijectors' JAX functions directly: the user's own JAX code (conftest.py)
pytestmark = pytest.mark.x64

#: SHA-256 of the full ``ovarian_x.csv`` parsed by ``np.loadtxt(..., delimiter=",")`` (float64, C order): the
#: source file itself is 1.6 MB and not in the repository (tests/data/README.md)
OVARIAN_X_SHA256 = "04cd9e02e5e641f2f6ab7e93717d444ff79542b088c4426b7e810b12c97546b7"


# ---------------------------------------------------------------------------------- fixtures
def normal_model(y, mu0=1.0, s0=2.0):
    """y_i ~ N(mu, sigma^2), mu ~ N(mu0, s0^2), sigma ~ Gamma(2, 1), sigma = exp(u)."""
    y = jnp.asarray(y)
    return JaxModel(
        {"mu": ((), None), "sigma": ((), Exp())},
        lambda v: jst.norm.logpdf(v["mu"], mu0, s0) + jst.gamma.logpdf(v["sigma"], 2.0),
        lambda v: jst.norm.logpdf(y, v["mu"], v["sigma"]),
        obs_dims=("obs",),
        observed=np.asarray(y),
    )


def synthetic_binary(n=30, p=8, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = np.zeros(p)
    beta[:2] = [1.5, -1.0]
    y = (rng.uniform(size=n) < special.expit(0.3 + X @ beta)).astype(int)
    return X, y


def scipy_logistic_logp(model, theta):
    """Independent NumPy/SciPy log density of LogisticRegression in its unconstrained layout."""
    p, X, y = model.p, model.X, model.y
    b0, beta = theta[0], theta[1 : p + 1]
    mu = b0 + X @ beta
    out = stats.bernoulli.logpmf(y, special.expit(mu)).sum()
    out += stats.norm.logpdf(b0, 0, model.scale_icept)
    if model.prior == "normal":
        return out + stats.norm.logpdf(beta, 0, model.prior_scale).sum()
    lam = np.exp(theta[p + 1 : 2 * p + 1])
    tau, caux = np.exp(theta[2 * p + 1]), np.exp(theta[2 * p + 2])
    c2 = model.slab_scale**2 * caux
    lam_tilde = np.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
    out += stats.norm.logpdf(beta, 0, lam_tilde * tau).sum()
    out += (np.log(2) + stats.t.logpdf(lam, model.nu_local)).sum()
    out += np.log(2) + stats.t.logpdf(tau, model.nu_global, scale=model.scale_global)
    out += stats.invgamma.logpdf(caux, model.slab_df / 2, scale=model.slab_df / 2)
    return out + np.log(lam).sum() + np.log(tau) + np.log(caux)  # log-Jacobians of exp


def numpy_relu_logp(model, theta):
    h, pa = model.hidden, model.p + 1
    W1 = theta[: h * pa].reshape(h, pa)
    W2 = theta[h * pa : h * pa + h]
    b2 = theta[-1]
    Xa = np.column_stack([model.X, np.ones(model.n)])
    mu = np.maximum(Xa @ W1.T, 0) @ W2 + b2
    ll = stats.bernoulli.logpmf(model.y, special.expit(mu))
    return ll.sum() + stats.norm.logpdf(theta, 0, model.prior_scale).sum(), ll


# ---------------------------------------------------------------------------------- bijectors
ELEMENTWISE = [
    (Identity(), 0.7),
    (Exp(), np.log(0.7)),
    (LowerBound(-1.5), 0.3),
    (UpperBound(2.0), -0.4),
    (Interval(-1.0, 3.0), 1.2),
    (Sigmoid(), -2.0),
]


@pytest.mark.parametrize("bij,u", ELEMENTWISE, ids=lambda b: repr(b))
def test_elementwise_bijector_logdet_equals_log_derivative(bij, u):
    deriv = jax.grad(lambda t: bij.forward(t))(jnp.asarray(u))
    np.testing.assert_allclose(bij.log_det_jacobian(jnp.asarray(u)), np.log(abs(deriv)), rtol=1e-12)
    np.testing.assert_allclose(bij.inverse(bij.forward(u)), u, rtol=1e-12, atol=1e-12)
    assert bool(bij.in_support(bij.forward(jnp.asarray(u))))


def test_simplex_stick_breaking():
    bij = SimplexStickBreaking()
    u = jnp.array([0.3, -1.1, 2.0])
    x = bij.forward(u)
    assert x.shape == (4,)
    np.testing.assert_allclose(x.sum(), 1.0, rtol=1e-14)
    np.testing.assert_allclose(bij.inverse(x), u, rtol=1e-12)
    np.testing.assert_allclose(bij.forward(jnp.zeros(3)), np.full(4, 0.25), rtol=1e-14)
    J = jax.jacfwd(lambda t: bij.forward(t)[:-1])(u)
    np.testing.assert_allclose(bij.log_det_jacobian(u), np.log(abs(np.linalg.det(J))), rtol=1e-12)
    # batched over leading axes
    U = jnp.stack([u, -u])
    np.testing.assert_allclose(bij.forward(U)[1], bij.forward(-u), rtol=1e-14)
    assert bij.log_det_jacobian(U).shape == (2,)


# ---------------------------------------------------------------------------------- JaxModel
def test_jax_model_logp_matches_scipy_with_jacobian():
    y = np.array([0.3, -1.2, 0.8, 2.1])
    m = normal_model(y)
    assert (m.dim, m.n_obs, m.obs_shape, m.obs_dims) == (2, 4, (4,), ("obs",))
    mu, sigma = 0.3, 0.7
    expected = (
        stats.norm.logpdf(mu, 1.0, 2.0)
        + stats.gamma.logpdf(sigma, 2.0)
        + stats.norm.logpdf(y, mu, sigma).sum()
        + np.log(sigma)  # d sigma / d log sigma
    )
    theta = np.array([mu, np.log(sigma)])
    np.testing.assert_allclose(m.logp(theta), expected, rtol=1e-13)
    np.testing.assert_allclose(m.loglik(theta), stats.norm.logpdf(y, mu, sigma), rtol=1e-13)
    np.testing.assert_allclose(m.log_density(theta[None])[0], expected, rtol=1e-13)
    np.testing.assert_allclose(
        m.loo_logp(theta, 2), expected - stats.norm.logpdf(y[2], mu, sigma), rtol=1e-13
    )
    assert m.log_var_target(theta, 0) is None
    assert not m.has_var_target


def test_jax_model_custom_loo_and_var_target():
    y = jnp.array([0.5, -0.5, 1.5])
    m = JaxModel(
        {"mu": ((), None)},
        lambda v: jst.norm.logpdf(v["mu"]),
        lambda v: jst.norm.logpdf(y, v["mu"]),
        loo_log_density=lambda v, i: jst.norm.logpdf(v["mu"]) + 0.0 * i,
        log_var_target=lambda v, i: v["mu"] * 2.0,
    )
    assert not m.factorizes
    assert isinstance(m, JaxModel)
    assert m.has_var_target
    np.testing.assert_allclose(m.loo_logp(jnp.array([0.25]), 1), stats.norm.logpdf(0.25), rtol=1e-14)
    np.testing.assert_allclose(m.log_var_target(jnp.array([0.25]), 0), 0.5)


def make_multi_param_model():
    return JaxModel(
        {
            "a": ((2, 3), None),
            "s": ((3,), Exp()),
            "r": ((), Interval(-1.0, 2.0)),
            "w": ((4,), SimplexStickBreaking()),
            "l": ((2,), LowerBound(5.0)),
        },
        lambda v: -jnp.sum(v["a"] ** 2) - jnp.sum(v["s"]) + jnp.sum(jnp.log(v["w"])) - jnp.sum(v["l"]),
        lambda v: v["a"] * v["r"],
        param_dims={"a": ("row", "col"), "s": ("col",)},
    )


def test_constrain_unconstrain_roundtrip():
    m = make_multi_param_model()
    assert m.dim == 6 + 3 + 1 + 3 + 2
    assert m.obs_shape == (2, 3) and m.n_obs == 6 and m.obs_dims == ("y_dim_0", "y_dim_1")
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(7, m.dim))
    values = m.constrain(theta)
    assert values["a"].shape == (7, 2, 3) and values["w"].shape == (7, 4) and values["r"].shape == (7,)
    np.testing.assert_allclose(values["w"].sum(-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(m.unconstrain(values), theta, rtol=1e-10, atol=1e-12)
    # C-order layout: first block is a (2, 3) flattened row-major
    np.testing.assert_array_equal(np.asarray(values["a"][:, 0, 1]), theta[:, 1])
    # chain-major flattening from a Dataset with (chain, draw); event dims given in another order
    v = {k: np.asarray(x) for k, x in values.items()}
    ds = xr.Dataset(
        {
            "a": (("chain", "draw", "row", "col"), v["a"][:6].reshape(2, 3, 2, 3)),
            "s": (("chain", "draw", "col"), v["s"][:6].reshape(2, 3, 3)),
            "r": (("chain", "draw"), v["r"][:6].reshape(2, 3)),
            "w": (("chain", "draw", "w_dim_0"), v["w"][:6].reshape(2, 3, 4)),
            "l": (("chain", "draw", "l_dim_0"), v["l"][:6].reshape(2, 3, 2)),
        }
    )
    ds["a"] = ds["a"].transpose("draw", "col", "chain", "row")
    np.testing.assert_allclose(m.unconstrain(ds), theta[:6], rtol=1e-10, atol=1e-12)
    tree = xr.DataTree.from_dict({"posterior": ds})
    np.testing.assert_allclose(m.unconstrain(tree), theta[:6], rtol=1e-10, atol=1e-12)
    # logp on the constrained values of one draw, plus the summed log-Jacobians
    th = theta[0]
    c = {k: np.asarray(x[0]) for k, x in values.items()}
    bij = m.layout.bijectors
    ldj = sum(float(jnp.sum(bij[k].log_det_jacobian(u))) for k, u in m.layout.split(th).items())
    expected = -np.sum(c["a"] ** 2) - c["s"].sum() + np.log(c["w"]).sum() - c["l"].sum()
    expected += np.sum(c["a"] * c["r"])
    np.testing.assert_allclose(m.logp(th), expected + ldj, rtol=1e-12)


def test_unconstrain_errors_are_clear():
    m = normal_model([0.1, 0.2])
    good = {"mu": np.zeros(4), "sigma": np.ones(4)}
    np.testing.assert_allclose(m.unconstrain(good), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="'sigma' is missing"):
        m.unconstrain({"mu": np.zeros(4)})
    with pytest.raises(ValueError, match="'mu' has shape"):
        m.unconstrain({"mu": np.zeros((4, 3, 2)), "sigma": np.ones(4)})
    ds = xr.Dataset({"mu": (("chain", "draw", "k"), np.zeros((2, 2, 3))),
                     "sigma": (("chain", "draw"), np.ones((2, 2)))})
    with pytest.raises(ValueError, match=r"'mu' has per-draw shape \(3,\)"):
        m.unconstrain(ds)
    with pytest.raises(ValueError, match="'mu' has 1 draw.*non-finite"):
        m.unconstrain({"mu": np.array([0.0, np.nan, 1.0, 2.0]), "sigma": np.ones(4)})
    with pytest.raises(ValueError, match="'sigma' has 2 draw.*outside the support of its transform Exp"):
        m.unconstrain({"mu": np.zeros(4), "sigma": np.array([1.0, -1.0, 0.0, 2.0])})
    with pytest.raises(ValueError, match="dims"):
        m.unconstrain(xr.Dataset({"mu": (("sample",), np.zeros(4)), "sigma": (("sample",), np.ones(4))}))


# ---------------------------------------------------------------------------------- logistic
@pytest.mark.parametrize(
    "kwargs",
    [
        {"prior": "normal", "prior_scale": 1.3},
        {"prior": "horseshoe", "p0": 2},
        {"prior": "horseshoe", "p0": 3, "nu_local": 3.0, "nu_global": 2.0, "slab_df": 4.0},
    ],
    ids=["normal", "horseshoe", "horseshoe-t"],
)
def test_logistic_logp_matches_scipy(kwargs):
    X, y = synthetic_binary()
    m = LogisticRegression(X, y, **kwargs)
    p = X.shape[1]
    assert m.dim == (p + 1 if kwargs["prior"] == "normal" else 2 * p + 3)
    rng = np.random.default_rng(2)
    theta = rng.normal(size=(5, m.dim))
    if kwargs["prior"] == "horseshoe":
        theta[:, p + 1 :] -= 1.0
        np.testing.assert_allclose(m.scale_global, kwargs["p0"] / ((p - kwargs["p0"]) * np.sqrt(30)))
    expected = np.array([scipy_logistic_logp(m, t) for t in theta])
    np.testing.assert_allclose(m.log_density(theta), expected, rtol=1e-12)
    mu = theta[:, :1] + theta[:, 1 : p + 1] @ X.T
    ll = stats.bernoulli.logpmf(y, special.expit(mu))
    np.testing.assert_allclose(m.log_lik(theta), ll, rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(m.loglik_i, (0, None))(theta, 4), ll[:, 4], rtol=1e-12)
    # complement probability p^{1-y} (1-p)^y (paper S.9)
    pr = special.expit(mu[:, 7])
    comp = pr ** (1 - y[7]) * (1 - pr) ** y[7]
    np.testing.assert_allclose(np.exp(jax.vmap(m.log_var_target, (0, None))(theta, 7)), comp, rtol=1e-12)


def test_logistic_structure_and_layout():
    X, y = synthetic_binary(n=12, p=4)
    m = LogisticRegression(X, y, prior="horseshoe", p0=1)
    np.testing.assert_array_equal(m.structure.X, np.column_stack([np.ones(12), X]))
    np.testing.assert_array_equal(m.structure.beta_index, np.arange(5))
    np.testing.assert_array_equal(m.adapt_index, np.arange(5))
    assert m.param_names == ("beta0", "beta", "lam", "tau", "caux")
    theta = np.arange(m.dim, dtype=float)[None] / 10
    c = m.constrain(theta)
    np.testing.assert_allclose(c["beta"][0], theta[0, 1:5])
    np.testing.assert_allclose(c["lam"][0], np.exp(theta[0, 5:9]))
    np.testing.assert_allclose(c["caux"][0], np.exp(theta[0, -1]))
    np.testing.assert_allclose(m.unconstrain(c), theta, rtol=1e-12)
    m2 = LogisticRegression(X, y, intercept=False)
    assert m2.dim == 4 and m2.structure.X.shape == (12, 4) and m2.param_names == ("beta",)
    with pytest.raises(ValueError, match="only 0 and 1"):
        LogisticRegression(X, y + 1)
    with pytest.raises(ValueError, match="p0"):
        LogisticRegression(X, y, prior="horseshoe", p0=10)


@pytest.mark.parametrize("prior", ["normal", "horseshoe"])
def test_logp_line_fast_path_equals_default(prior):
    X, y = load_ovarian()
    m = LogisticRegression(X, y, prior=prior)
    rng = np.random.default_rng(3)
    S = 6
    theta = 0.05 * rng.normal(size=(S, m.dim))
    if prior == "horseshoe":
        theta[:, m.q : m.q + m.p] += 0.5
        theta[:, -2] = np.log(m.scale_global)
    delta = np.zeros_like(theta)
    delta[:, : m.q] = 0.02 * rng.normal(size=(S, m.q))
    ts = 4.0 ** -np.arange(11)
    ts = np.concatenate([ts, [0.0, -0.5, 2.0]])
    default = PosteriorModel.logp_line
    for i in (None, 0, 41):
        fast = np.asarray(m.logp_line(theta, delta, ts, i=i))
        ref = np.asarray(default(m, theta, delta, ts, i=i))
        assert fast.shape == (len(ts), S)
        np.testing.assert_allclose(fast, ref, rtol=1e-10, atol=0)
    # t = 0 is the log density itself; traced (jit) delta takes the fast path too
    np.testing.assert_allclose(m.logp_line(theta, delta, ts)[11], m.log_density(theta), rtol=1e-12)
    jitted = jax.jit(lambda th, de: m.logp_line(th, de, ts, i=5))
    np.testing.assert_allclose(jitted(theta, delta), default(m, theta, delta, ts, i=5), rtol=1e-10)
    if prior == "horseshoe":
        # delta touching the hyperparameters falls back to the exact default
        delta2 = delta.copy()
        delta2[:, -1] = 0.1
        np.testing.assert_allclose(
            m.logp_line(theta, delta2, ts), default(m, theta, delta2, ts), rtol=1e-12
        )


def test_numpyro_model_same_posterior_as_logp():
    """Non-centered NumPyro density = ours + log|d beta / d z| (exact change of variables)."""
    from numpyro.infer.util import potential_energy

    X, y = synthetic_binary()
    m = LogisticRegression(X, y, prior="horseshoe", p0=2, nu_local=3.0)
    rng = np.random.default_rng(4)
    p = m.p
    for _ in range(2):
        theta = rng.normal(size=m.dim) - np.r_[np.zeros(p + 1), np.ones(p + 2)]
        lam, tau, caux = np.exp(theta[p + 1 : 2 * p + 1]), np.exp(theta[-2]), np.exp(theta[-1])
        c2 = m.slab_scale**2 * caux
        sd = np.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2)) * tau
        params = {
            "beta0": theta[0],
            "z": theta[1 : p + 1] / sd,
            "lam": np.log(lam),
            "tau_raw": np.log(tau / m.scale_global),
            "caux": np.log(caux),
        }
        npy = -potential_energy(m.numpyro_model(), (), {}, params)
        np.testing.assert_allclose(npy - np.log(sd).sum(), m.logp(theta), rtol=1e-12)
    m_n = LogisticRegression(X, y, prior="normal", prior_scale=0.7)
    theta = rng.normal(size=m_n.dim)
    npy = -potential_energy(m_n.numpyro_model(), (), {}, {"beta0": theta[0], "beta": theta[1:]})
    np.testing.assert_allclose(npy, m_n.logp(theta), rtol=1e-12)


# ---------------------------------------------------------------------------------- ReLU net
def test_relu_logp_matches_numpy():
    X, y = synthetic_binary(n=20, p=5)
    m = ReluNet(X, y, hidden=3, prior_scale=0.8)
    assert m.dim == 3 * 6 + 3 + 1
    rng = np.random.default_rng(5)
    theta = rng.normal(size=(4, m.dim))
    ref = [numpy_relu_logp(m, t) for t in theta]
    np.testing.assert_allclose(m.log_density(theta), [r[0] for r in ref], rtol=1e-12)
    np.testing.assert_allclose(m.log_lik(theta), np.array([r[1] for r in ref]), rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(m.loglik_i, (0, None))(theta, 3), [r[1][3] for r in ref], rtol=1e-12)
    s = m.structure
    np.testing.assert_array_equal(s.X, np.column_stack([X, np.ones(20)]))
    assert (s.hidden, s.b2_index) == (3, 21)
    np.testing.assert_array_equal(s.w1_index, np.arange(18))
    np.testing.assert_array_equal(s.w2_index, np.arange(18, 21))
    c = m.constrain(theta)
    assert c["W1"].shape == (4, 3, 6) and c["W2"].shape == (4, 3) and c["b2"].shape == (4,)
    np.testing.assert_allclose(c["W1"][:, 1, 0], theta[:, 6])  # unit 1's first weight
    np.testing.assert_allclose(m.unconstrain(c), theta)
    # complement probability f_2 = 1 - p(y_2 | theta)
    np.testing.assert_allclose(
        np.exp(m.log_var_target(theta[0], 2)), 1 - np.exp(ref[0][1][2]), rtol=1e-10
    )


# ---------------------------------------------------------------------------------- NUTS
def test_nuts_recovers_conjugate_normal_posterior():
    rng = np.random.default_rng(6)
    y = rng.normal(1.5, 1.0, size=20)
    s0 = 3.0
    m = JaxModel(
        {"mu": ((), None)},
        lambda v: jst.norm.logpdf(v["mu"], 0.0, s0),
        lambda v: jst.norm.logpdf(jnp.asarray(y), v["mu"], 1.0),
        obs_dims=("obs",),
        observed=y,
    )
    prec = len(y) + 1 / s0**2
    post_mean, post_sd = y.sum() / prec, np.sqrt(1 / prec)
    dt = sample_nuts(m, num_chains=2, num_warmup=200, num_samples=200, random_seed=11)
    draws = dt["posterior"]["mu"].values
    assert draws.shape == (2, 200)
    S = draws.size
    assert abs(draws.mean() - post_mean) < 4 * post_sd / np.sqrt(S / 2)  # ESS >= S/2
    assert abs(draws.std(ddof=1) / post_sd - 1) < 4 / np.sqrt(S / 2)
    ll = dt["log_likelihood"]["y"]
    assert ll.dims == ("chain", "draw", "obs")
    np.testing.assert_allclose(
        ll.values, stats.norm.logpdf(y[None, None], draws[..., None], 1.0), rtol=1e-12
    )
    np.testing.assert_array_equal(dt["observed_data"]["y"].values, y)
    ss = dt["sample_stats"]
    for name in ("diverging", "tree_depth", "n_steps", "energy", "step_size", "lp", "acceptance_rate"):
        assert ss[name].shape == (2, 200)
    assert int(ss["diverging"].sum()) == 0
    np.testing.assert_allclose(ss["lp"].values, np.asarray(m.log_density(draws.reshape(-1, 1))).reshape(2, 200),
                               rtol=1e-10)
    np.testing.assert_allclose(m.unconstrain(dt).ravel(), draws.ravel())  # chain-major


def test_nuts_constrained_parameter_and_numpyro_model_path():
    X, y = synthetic_binary(n=25, p=3, seed=7)
    m = LogisticRegression(X, y, prior="horseshoe", p0=1)
    dt = sample_nuts(
        m, num_chains=1, num_warmup=100, num_samples=50, random_seed=3, numpyro_model=m.numpyro_model()
    )
    post = dt["posterior"]
    assert set(post.data_vars) == {"beta0", "beta", "lam", "tau", "caux"}
    assert post["beta"].dims == ("chain", "draw", "feature") and post["beta"].shape == (1, 50, 3)
    theta = m.unconstrain(dt)
    np.testing.assert_allclose(dt["log_likelihood"]["y"].values[0], m.log_lik(theta), rtol=1e-12)
    np.testing.assert_array_equal(dt["observed_data"]["y"].values, y)
    # same model through potential_fn, constrained sigma (Exp) in JaxModel
    m2 = normal_model(np.array([0.3, -0.2, 0.5, 1.0]))
    dt2 = sample_nuts(m2, num_chains=2, num_warmup=100, num_samples=50, random_seed=0)
    assert float(dt2["posterior"]["sigma"].min()) > 0
    np.testing.assert_allclose(
        dt2["log_likelihood"]["y"].values,
        stats.norm.logpdf(
            np.array([0.3, -0.2, 0.5, 1.0]),
            dt2["posterior"]["mu"].values[..., None],
            dt2["posterior"]["sigma"].values[..., None],
        ),
        rtol=1e-12,
    )


# ---------------------------------------------------------------------------------- data
def test_load_ovarian():
    X, y = load_ovarian()
    assert X.shape == (54, 1536) and y.shape == (54,) and X.dtype == np.float64
    assert int(y.sum()) == 30 and set(np.unique(y)) == {0, 1}
    np.testing.assert_allclose(X.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(X.std(axis=0, ddof=1), 1.0, rtol=1e-12)
    # the shipped raw values are the source CSV's: all of them by their hash, the first 8 columns by value
    raw, y_raw = load_ovarian(standardized=False)
    np.testing.assert_array_equal(y_raw, y)
    assert hashlib.sha256(np.ascontiguousarray(raw, dtype=np.float64).tobytes()).hexdigest() == OVARIAN_X_SHA256
    excerpt = np.loadtxt(OVARIAN / "ovarian_x_columns_1-8.csv", delimiter=",")
    np.testing.assert_array_equal(raw[:, :8], excerpt)
    np.testing.assert_array_equal(y, np.loadtxt(OVARIAN / "ovarian_y.csv").astype(int))
    # standardized by an independent formula from the raw values
    ref = (raw - raw.mean(0)) / raw.std(0, ddof=1)
    np.testing.assert_allclose(X, np.nan_to_num(ref), rtol=0, atol=1e-12)


@pytest.mark.parametrize("prior", ["normal", "horseshoe"])
def test_logistic_line_eval_fast_path_equals_default(prior):
    """The cached line evaluation equals the generic vmapped one (base-class implementation)."""
    from ppl_loo.adapters.jax.base import PosteriorModel

    rng = np.random.default_rng(7)
    X = rng.normal(size=(15, 6))
    y = (rng.random(15) < 0.5).astype(int)
    m = LogisticRegression(X, y, prior=prior, p0=2)
    theta = jnp.asarray(rng.normal(size=(9, m.dim)) * 0.3)
    delta = jnp.zeros_like(theta).at[:, : m.q].set(rng.normal(size=(9, m.q)))
    ts = jnp.asarray([1.0, 0.25, 0.0, -0.5])
    for i in (0, 4, 14):
        fast = m.line_eval(m.line_cache(theta), theta, delta, ts, i)
        slow = PosteriorModel.line_eval(m, None, theta, delta, ts, i)
        for a, b in zip(fast, slow):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)


def test_logistic_line_eval_low_rank_equals_dense():
    from ppl_loo.adapters.jax.base import PosteriorModel
    from ppl_loo.numerics.transforms import LowRank

    rng = np.random.default_rng(8)
    X = rng.normal(size=(15, 6))
    y = (rng.random(15) < 0.5).astype(int)
    m = LogisticRegression(X, y, prior="horseshoe", p0=2)
    theta = jnp.asarray(rng.normal(size=(9, m.dim)) * 0.3)
    basis = jnp.zeros((3, m.dim)).at[:, : m.q].set(rng.normal(size=(3, m.q)))
    delta = LowRank(jnp.asarray(rng.normal(size=(9, 3))), basis)
    ts = jnp.asarray([1.0, 0.25, -0.5])
    fast = m.line_eval(m.line_cache(theta), theta, delta, ts, 3)
    slow = PosteriorModel.line_eval(m, None, theta, delta.dense(), ts, 3)
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("prior", ["normal", "horseshoe"])
def test_logistic_line_eval_diag_affine_equals_dense(prior):
    """A diagonal affine field (PMM2, iterated MM) evaluated from per-run sums equals the dense line."""
    from ppl_loo.adapters.jax.base import PosteriorModel
    from ppl_loo.numerics.transforms import DiagAffine

    rng = np.random.default_rng(9)
    X = rng.normal(size=(15, 6))
    y = (rng.random(15) < 0.5).astype(int)
    m = LogisticRegression(X, y, prior=prior, p0=2)
    theta = jnp.asarray(rng.normal(size=(9, m.dim)) * 0.3 + 2.0)
    shift = jnp.zeros(m.dim).at[: m.q].set(rng.normal(size=m.q))
    slope = jnp.zeros(m.dim).at[: m.q].set(rng.normal(size=m.q) * 0.5)
    delta = DiagAffine(shift, slope)
    ts = jnp.asarray([1.0, 0.25, -0.5])
    for i in (0, 3, 14):
        fast = m.line_eval(m.line_cache(theta), theta, delta, ts, i)
        slow = PosteriorModel.line_eval(m, None, theta, shift + slope * theta, ts, i)
        for a, b in zip(fast, slow):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("kind", ["dense", "lowrank", "diag"])
def test_relu_line_eval_fast_path_equals_default(kind):
    """ReluNet's cached line evaluation equals the generic vmapped one for every displacement type."""
    from ppl_loo.adapters.jax.base import PosteriorModel
    from ppl_loo.numerics.transforms import DiagAffine, LowRank

    rng = np.random.default_rng(10)
    X = rng.normal(size=(12, 5))
    y = (rng.random(12) < 0.5).astype(int)
    m = ReluNet(X, y, hidden=3, prior_scale=1.3)
    theta = jnp.asarray(rng.normal(size=(7, m.dim)))
    if kind == "dense":
        delta = jnp.asarray(rng.normal(size=(7, m.dim)))
        dense = delta
    elif kind == "lowrank":
        delta = LowRank(jnp.asarray(rng.normal(size=(7, 2))), jnp.asarray(rng.normal(size=(2, m.dim))))
        dense = delta.dense()
    else:
        delta = DiagAffine(jnp.asarray(rng.normal(size=m.dim)), jnp.asarray(rng.normal(size=m.dim) * 0.3))
        dense = delta.dense(theta)
    ts = jnp.asarray([1.0, 0.25, 0.0, -0.5])
    for i in (0, 5, 11):
        fast = m.line_eval(m.line_cache(theta), theta, delta, ts, i)
        slow = PosteriorModel.line_eval(m, None, theta, dense, ts, i)
        for a, b in zip(fast, slow):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-9)
