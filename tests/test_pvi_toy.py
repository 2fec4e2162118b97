"""``pl.pvi`` on JAX models with known answers (notes, section 6: T1, T2, T8, Cor. 2) and its
DataTree, errors, and ``pl.loo`` with the variational correction (Eq. 13).

The normal toy: model y ~ N(theta, 1), prior N(0, 10^2), q = N(m, s^2). On the fixed data
y = [-3, -1, 0, 1, 3] the optimum has m = 0 and the s of the notes' table T2 (checked there with
numpy/scipy).
"""

import math
import warnings

import jax
import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import optax
import pytest
import xarray as xr
from scipy import stats

import ppl_loo as pl
from ppl_loo.adapters.as_model import as_model
from ppl_loo.adapters.jax.bijectors import Exp
from ppl_loo.numerics.vi.optim import step_decay

pytestmark = pytest.mark.x64  # calls the models' JAX functions directly: the user's own JAX code (conftest.py)

Y5 = np.array([-3.0, -1.0, 0.0, 1.0, 3.0])
TAU = 10.0


def normal_model(y, tau=TAU, **kw):
    y = np.asarray(y, dtype=np.float64)
    yj = jnp.asarray(y)
    return pl.JaxModel({"theta": ((), None)}, lambda v: jst.norm.logpdf(v["theta"], 0.0, tau),
                       lambda v: jst.norm.logpdf(yj, v["theta"], 1.0), observed=y, **kw)


def normal_sim(values, key):
    return values["theta"] + jax.random.normal(key, Y5.shape)


@pytest.fixture(scope="module")
def toy():
    """One PVI model for every T2 fit, so the compiled steps are reused across lam."""
    return as_model(normal_model(Y5), pvi=True, simulator=normal_sim)


def _fit(pm, optimizer=None, **kw):
    args = dict(random_seed=11, draws=200, output={"compare_vi": False})
    args.update(kw)
    opt = {"steps": 2000, "draws_per_step": 1000, "init_scale": 1.0, **(optimizer or {})}
    return pl.pvi(None, pm, optimizer=opt, **args)


# T2 of the notes: (score, reg, lam) -> s
T2 = [
    ("log", None, 0.0, 1.73205), ("crps", None, 0.0, 1.88386),
    ("log", "prior", 0.1, 1.76215), ("crps", "prior", 0.1, 1.97429),
    ("log", "prior", 1.0, 2.05920), ("crps", "prior", 1.0, 2.62952),
    ("log", "posterior", 0.1, 1.45526), ("crps", "posterior", 0.1, 1.03592),
    ("log", "posterior", 1.0, 0.86578), ("crps", "posterior", 1.0, 0.48866),
    ("log", "posterior", 10.0, 0.49281), ("crps", "posterior", 10.0, 0.45060),
]


@pytest.mark.parametrize("score, reg, lam, s_expected", T2)
def test_t2_fixed_data_optimum(toy, score, reg, lam, s_expected):
    tree = _fit(toy, score=score, reg=reg, lam=lam)
    g = tree["pvi"]
    assert abs(float(g["loc"][0])) < 0.02
    tol = 0.006 if score == "log" else 0.012  # log: O(1/M) bias of estimator (a); CRPS: SGD noise
    assert float(g["sd"][0]) == pytest.approx(s_expected, abs=tol)


def test_optax_transformation_as_optimizer(toy):
    """``optimizer.method`` takes an optax transformation: Adam with the default schedule is the default fit."""
    opt = dict(steps=400, draws_per_step=100)
    ref = _fit(toy, optimizer=opt, draws=50)["pvi"]
    tree = _fit(toy, optimizer={**opt, "method": optax.adam(step_decay(1e-2, 200))}, draws=50)
    g = tree["pvi"]
    np.testing.assert_allclose(g["objective"].values, ref["objective"].values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g["sd"].values, ref["sd"].values, rtol=1e-12)
    assert g.attrs["optimizer"] == "custom"
    clipped = _fit(toy, optimizer={**opt, "method": optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(1e-2))},
                   draws=50)["pvi"]
    assert np.all(np.isfinite(clipped["objective"].values))


def test_t1_population_optimum_log_and_crps():
    """Truth N(0, 2^2): the PVI optimum is s = sqrt(sigma^2 - 1) = sqrt(3) for both scores; for the log
    score on a finite sample s^2 = S_n^2 - 1 exactly (T2's formula)."""
    y = np.random.default_rng(3).normal(0.0, 2.0, 1000)
    sim = lambda v, key: v["theta"] + jax.random.normal(key, y.shape)
    pm = as_model(normal_model(y), pvi=True, simulator=sim)
    s_log = float(_fit(pm, score="log", optimizer={"draws_per_step": 200, "steps": 1000})["pvi"]["sd"][0])
    s_crps = float(_fit(pm, score="crps", optimizer={"draws_per_step": 100, "steps": 1000})["pvi"]["sd"][0])
    assert s_log == pytest.approx(math.sqrt(np.var(y) - 1.0), abs=0.02)
    assert s_log == pytest.approx(math.sqrt(3.0), abs=0.1)
    assert s_crps == pytest.approx(math.sqrt(3.0), abs=0.12)


def test_t8_large_posterior_weight_is_vi_and_vi_is_exact_on_conjugate():
    """T8: r^post with lam = 1e4 gives the plain-VI solution of the same family; on a conjugate
    Gaussian model, full-rank VI is the exact posterior."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    y = 0.5 + 1.2 * x + rng.normal(0, 0.8, size=30)
    X = np.column_stack([np.ones(30), x])
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    model = pl.JaxModel({"beta": ((2,), None), "sigma": ((), Exp())},
                        lambda v: jnp.sum(jst.norm.logpdf(v["beta"], 0, 5)) + jst.norm.logpdf(jnp.log(v["sigma"])),
                        lambda v: jst.norm.logpdf(yj, Xj @ v["beta"], v["sigma"]), observed=y)
    pm = as_model(model, pvi=True)
    kw = dict(family="fullrank", optimizer={"steps": 3000, "draws_per_step": 200}, random_seed=5,
              output={"compare_vi": False})
    vi = pl.pvi(None, pm, score=None, **kw)["pvi"]
    big = pl.pvi(None, pm, score="log", reg="posterior", lam=1e4, **kw)["pvi"]
    np.testing.assert_allclose(big["loc"].values, vi["loc"].values, atol=0.02)
    np.testing.assert_allclose(big["sd"].values, vi["sd"].values, rtol=0.06)
    # conjugate: y ~ N(theta, 1), theta ~ N(0, 10^2); q = posterior exactly
    yc = np.random.default_rng(1).normal(1.0, 1.0, 15)
    post_var = 1.0 / (15 + 1 / TAU**2)
    exact = pl.pvi(None, normal_model(yc), score=None, random_seed=2,
                   optimizer={"steps": 2000, "draws_per_step": 200})["pvi"]
    assert float(exact["loc"][0]) == pytest.approx(post_var * yc.sum(), abs=0.01)
    assert float(exact["sd"][0]) == pytest.approx(math.sqrt(post_var), rel=0.03)


def test_rejection_estimator_end_to_end():
    """Appendix B's unbiased estimator (bound C = 1/sqrt(2 pi) of N(y|theta, 1)) reaches the same
    optimum s = sqrt(3) on the T2 data."""
    tree = pl.pvi(None, normal_model(Y5), score="log", random_seed=4, draws=100, output={"compare_vi": False},
                  optimizer={"estimator": "rejection", "log_lik_bound": -0.5 * math.log(2 * math.pi), "steps": 3000,
                             "draws_per_step": 100, "init_scale": 1.0})
    assert float(tree["pvi"]["sd"][0]) == pytest.approx(math.sqrt(3.0), abs=0.06)
    # a wrong bound is detected, never silently used
    with pytest.raises(ValueError, match="not an upper bound"):
        pl.pvi(None, normal_model(Y5), score="log", random_seed=4, output={"compare_vi": False},
               optimizer={"estimator": "rejection", "log_lik_bound": -3.0, "steps": 20, "draws_per_step": 20})


def test_likelihood_free_simulator_model():
    """A differentiable simulator without a likelihood: CRPS gives the T2 optimum 1.88386."""
    sm = pl.SimulatorModel({"theta": ((), None)}, normal_sim, Y5,
                           log_prior=lambda v: jst.norm.logpdf(v["theta"], 0.0, TAU))
    tree = _fit(sm, score="crps")
    assert float(tree["pvi"]["sd"][0]) == pytest.approx(1.88386, abs=0.012)
    assert "log_likelihood" not in tree.children
    tree = _fit(sm, score="crps", reg="prior", lam=1.0, optimizer={"steps": 1500})
    assert float(tree["pvi"]["sd"][0]) == pytest.approx(2.62952, abs=0.03)
    with pytest.raises(ValueError, match="log"):
        _fit(sm, score="log", optimizer={"steps": 5})
    with pytest.raises(ValueError, match="posterior"):
        _fit(sm, score="crps", reg="posterior", lam=1.0, optimizer={"steps": 5})


def test_jax_quadratic_score_and_vector_energy_score():
    """JaxModel with probs= (quadratic score, T5: the predictive is the frequency of ones) and a
    likelihood-free model with vector outcomes (energy score, L2 norm): the score is strictly proper,
    so when q N(m, s^2 I) can reproduce the truth N(0, 2^2 I) through y = theta + N(0, I), s = sqrt(3)."""
    z = (np.arange(200) % 4 == 0).astype(float)  # a quarter are ones
    zj = jnp.asarray(z)
    model = pl.JaxModel({"a": ((), None)}, lambda v: jst.norm.logpdf(v["a"], 0.0, 3.0),
                        lambda v: zj * jax.nn.log_sigmoid(v["a"]) + (1 - zj) * jax.nn.log_sigmoid(-v["a"]),
                        observed=z)

    def probs(v):
        p1 = jax.nn.sigmoid(v["a"]) * jnp.ones(200)
        return jnp.stack([1 - p1, p1], axis=-1)

    tree = pl.pvi(None, model, score="quadratic", reg="prior", lam=0.1, random_seed=2, draws=4000,
                  optimizer={"steps": 600, "draws_per_step": 100}, score_options={"probs": probs},
                  output={"compare_vi": False})
    p = 1 / (1 + np.exp(-tree.posterior["a"].values.ravel()))
    assert p.mean() == pytest.approx(0.25, abs=0.01)

    y2 = np.random.default_rng(4).normal(0.0, 2.0, (600, 2))
    sim = pl.SimulatorModel({"theta": ((2,), None)}, lambda v, key: v["theta"] + jax.random.normal(key, y2.shape),
                            y2, vector=True)
    g = pl.pvi(None, sim, score="crps", random_seed=3, draws=100, output={"compare_vi": False},
               optimizer={"steps": 600, "draws_per_step": 100, "init_scale": 1.0})["pvi"]
    np.testing.assert_allclose(g["sd"].values, math.sqrt(3.0), atol=0.15)
    np.testing.assert_allclose(g["loc"].values, 0.0, atol=0.15)


def test_flow_recovers_a_bimodal_population():
    """Cor. 2: when p_true(y) = int N(y | theta, 0.3^2) pi(theta) dtheta, PVI recovers pi. With a
    bimodal pi (+-2) the flow family puts its mass at the two modes; a Gaussian q cannot."""
    rng = np.random.default_rng(7)
    n = 800
    theta_i = np.where(rng.uniform(size=n) < 0.5, -2.0, 2.0) + rng.normal(0, 0.2, n)
    y = theta_i + rng.normal(0, 0.3, n)
    yj = jnp.asarray(y)
    model = pl.JaxModel({"theta": ((), None)}, lambda v: jst.norm.logpdf(v["theta"], 0.0, 10.0),
                        lambda v: jst.norm.logpdf(yj, v["theta"], 0.3), observed=y)
    kw = dict(score="log", random_seed=3, draws=4000, output={"compare_vi": False},
              optimizer={"steps": 2500, "draws_per_step": 200, "init_scale": 1.0, "learning_rate": 0.02})
    flow_draws = pl.pvi(None, model, family=pl.FlowOptions(n_layers=4, hidden=8, n_bins=10),
                        **kw).posterior["theta"].values.ravel()
    gauss_draws = pl.pvi(None, model, **kw).posterior["theta"].values.ravel()
    assert np.mean(np.abs(flow_draws)) == pytest.approx(2.0, abs=0.25)
    assert np.mean(np.abs(flow_draws) < 1.0) < 0.12
    assert np.mean(np.abs(gauss_draws) < 1.0) > 0.3  # the Gaussian puts a third of its mass between the modes


def test_datatree_layout_and_heterogeneity_table():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(3), 40)
    y = rng.normal(np.array([0.0, 1.0, 2.0])[groups], 1.0) + rng.normal(0, 1.5, 120)  # extra spread
    yj, gj = jnp.asarray(y), jnp.asarray(groups)
    model = pl.JaxModel({"mu": ((3,), None), "sigma": ((), Exp())},
                        lambda v: jnp.sum(jst.norm.logpdf(v["mu"], 0, 5)) + jst.expon.logpdf(v["sigma"]),
                        lambda v: jst.norm.logpdf(yj, v["mu"][gj], v["sigma"]), observed=y, var_name="y",
                        obs_dims=("obs",), param_dims={"mu": ("group",)},
                        coords={"group": ["a", "b", "c"], "obs": np.arange(120)})
    tree = pl.pvi(None, model, score="log", random_seed=0, draws=300, optimizer={"steps": 400, "draws_per_step": 50})
    post = tree.posterior
    assert post["mu"].dims == ("chain", "draw", "group") and list(post["group"].values) == ["a", "b", "c"]
    assert post["sigma"].dims == ("chain", "draw") and np.all(post["sigma"].values > 0)
    assert tree.log_likelihood["y"].dims == ("chain", "draw", "obs")
    np.testing.assert_allclose(tree.observed_data["y"].values, y)
    g = tree["pvi"]
    assert list(g["param"].values) == ["mu[0]", "mu[1]", "mu[2]", "sigma_log__"]
    ratio = g["pvi_sd"].values / g["vi_sd"].values
    np.testing.assert_allclose(g["sd_ratio"].values, ratio)
    np.testing.assert_array_equal(g["flagged"].values, ratio > 2.0)
    assert g.attrs["score"] == "log" and g.attrs["family"] == "meanfield" and g.attrs["steps"] == 400
    assert g["objective"].shape == (400,) and g["vi_objective"].shape == (400,)
    # the stored log-likelihood is the model's at the stored draws; training log score from it
    theta = model.unconstrain(tree)
    ll = np.asarray(jax.vmap(model.loglik)(jnp.asarray(theta)))
    np.testing.assert_allclose(tree.log_likelihood["y"].values.reshape(300, -1), ll, rtol=1e-10)
    lse = np.log(np.mean(np.exp(ll - ll.max(0)), axis=0)) + ll.max(0)
    assert float(g["train_log_score"]) == pytest.approx(lse.sum(), rel=1e-10)
    assert float(g["final_score"]) == float(g["train_log_score"])
    # log q per draw is the family's density at the draws
    mf = g["phi"].values
    lq = stats.norm.logpdf(theta, mf[:4], np.exp(mf[4:])).sum(1)
    np.testing.assert_allclose(g["log_q"].values.ravel(), lq, rtol=1e-9)
    # warm start from a previous result: its marginal means and sds (no movement at a zero learning rate)
    again = pl.pvi(None, model, random_seed=1, draws=20, output={"compare_vi": False},
                   optimizer={"init": tree, "steps": 2, "learning_rate": 1e-12, "average": 0.0})["pvi"]
    np.testing.assert_allclose(again["loc"].values, g["loc"].values, atol=1e-9)
    np.testing.assert_allclose(again["sd"].values, g["sd"].values, rtol=1e-9)
    # user groups are kept; an existing posterior is refused unless another group is named
    base = xr.DataTree.from_dict({"constant_data": xr.Dataset({"g": ("obs", groups)})})
    out = pl.pvi(base, model, score="log", random_seed=0, draws=20, optimizer={"steps": 20},
                 output={"compare_vi": False})
    assert "constant_data" in out.children and "posterior" in out.children
    with pytest.raises(ValueError, match="already has a 'posterior'"):
        pl.pvi(out, model, score="log", random_seed=0, optimizer={"steps": 20})
    other = pl.pvi(out, model, score="log", random_seed=0, draws=20, optimizer={"steps": 20},
                   output={"group": "posterior_pvi", "compare_vi": False})
    assert "posterior_pvi" in other.children


def _exact_loo_normal(y, tau=TAU):
    out = []
    for i in range(len(y)):
        rest = np.delete(y, i)
        v = 1.0 / (len(rest) + 1 / tau**2)
        out.append(stats.norm.logpdf(y[i], v * rest.sum(), math.sqrt(1 + v)))
    return np.array(out)


def test_loo_on_pvi_draws_uses_eq13():
    """pl.loo(pvi result, model) picks q up from the pvi group: importance ratios p(theta|y)/q(theta)
    (Eq. 13) make the LOO of draws from q equal the exact conjugate LOO of the model."""
    y = np.random.default_rng(8).normal(0.0, 1.5, 20)
    model = normal_model(y)
    exact = _exact_loo_normal(y)
    trees = {}
    for score in ("log", None):  # PVI draws and plain-VI draws
        trees[score] = tree = pl.pvi(None, model, score=score, random_seed=1, draws=2000, output={"compare_vi": False},
                                     optimizer={"steps": 1000, "draws_per_step": 200, "init_scale": 1.0})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = pl.loo(tree, model, progressbar=False)
        assert res.approx_posterior
        err = res.elpd_i.values - exact
        assert np.all(np.abs(err) < 4 * res.mcse_elpd_i.values + 0.02), (score, err)
        if score == "log":
            right = res
    # the PVI q is wider than the posterior: without the correction the same draws give a wrong LOO
    tree = trees["log"]
    assert float(tree["pvi"]["sd"][0]) > 3 * float(np.sqrt(1 / 20))
    plain = xr.DataTree.from_dict({"posterior": tree.posterior.to_dataset()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrong = pl.loo(plain, model, progressbar=False,
                       second_opinions={"mixture": False, "smc": False})  # the draws alone (the mixture
        # run, independent of them, would report its own estimates for what it finds doubtful)
    assert abs(wrong.elpd - exact.sum()) > 10 * abs(right.elpd - exact.sum()) + 0.5
    # draws that q did not produce are refused, not silently mis-weighted
    shifted = tree.copy()
    shifted["posterior"] = xr.DataTree(tree.posterior.to_dataset() + 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # refused by the stored log-likelihood check (the shifted draws' stored values are not the model's there)
        # or, with it off, by the pvi group's log_q
        with pytest.raises(ValueError, match="differs from the model's at the same draws"):
            pl.loo(shifted, model, progressbar=False)
        with pytest.raises(ValueError, match="log_q"):
            pl.loo(shifted, model, progressbar=False, compute={"check_log_lik": False})


def test_bad_input_errors():
    model = normal_model(Y5)
    with pytest.raises(TypeError, match="random_seed"):
        pl.pvi(None, model, random_seed="abc", optimizer={"steps": 5})
    with pytest.raises(ValueError, match="score="):
        pl.pvi(None, model, score="brier", random_seed=0)
    with pytest.raises(ValueError, match="lam"):
        pl.pvi(None, model, lam=-1.0, reg="prior", random_seed=0)
    with pytest.raises(ValueError, match="regularizer"):
        pl.pvi(None, model, lam=1.0, random_seed=0)
    with pytest.raises(ValueError, match="family"):
        pl.pvi(None, model, family="diagonal", random_seed=0, optimizer={"steps": 5})
    with pytest.raises(ValueError, match="simulator"):
        pl.pvi(None, model, score="crps", random_seed=0, optimizer={"steps": 5})
    with pytest.raises(ValueError, match="probs"):
        pl.pvi(None, model, score="quadratic", random_seed=0, optimizer={"steps": 5})
    with pytest.raises(ValueError, match="log_lik_bound"):
        pl.pvi(None, model, random_seed=0, optimizer={"estimator": "rejection", "steps": 5})
    with pytest.raises(ValueError, match="even"):
        pl.pvi(None, model, score="crps", random_seed=0, optimizer={"draws_per_step": 7, "steps": 5},
               score_options={"simulator": normal_sim})
    with pytest.raises(TypeError, match="not supported"):
        pl.pvi(None, object(), random_seed=0)
