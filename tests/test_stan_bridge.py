"""Tests of the in-process Stan bridge (ppl_loo.stan_bridge) with real compiled Stan programs.

Two distinct programs are compiled (about a minute each the first time; cached afterwards in
``$PPL_LOO_STAN_CACHE`` or ``~/.cache/ppl_loo/stan``). The PyStan 3 comparison builds the eight
schools program once more through httpstan (cached by httpstan in ``~/.cache/httpstan``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

from data_paths import EIGHT_SCHOOLS

from ppl_loo.stan_bridge import (
    StanCompileError,
    StanDataError,
    StanEvaluationError,
    StanModel,
    cache_dir,
    data_to_json,
)

ROOT = Path(__file__).resolve().parents[1]
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"
NORMAL = ROOT / "stan_models" / "normal_known_sigma.stan"
CMDSTAN_CSV = EIGHT_SCHOOLS / "output_1.csv"

EIGHT_DATA = {
    "J": 8,
    "y": np.array([28.0, 8, -3, 7, -1, 1, 18, 12]),
    "sigma": np.array([15.0, 10, 16, 11, 9, 11, 10, 18]),
}
NORMAL_DATA = {
    "N": 12,
    "y": np.random.default_rng(3).normal(1.5, 2.0, size=12),
    "sigma": 2.0,
    "mu0": 0.5,
    "tau0": 3.0,
}


@pytest.fixture(scope="module")
def eight():
    return StanModel(EIGHT, EIGHT_DATA)


@pytest.fixture(scope="module")
def normal():
    return StanModel(NORMAL, NORMAL_DATA)


def _points(d, n=5, seed=0):
    return np.random.default_rng(seed).normal(scale=1.5, size=(n, d))


def eight_logp_numpy(u, data=EIGHT_DATA):
    """Hand-written eight-schools log density (all constants kept, log-Jacobian of tau included)."""
    mu, log_tau, tt = u[:, 0], u[:, 1], u[:, 2:]
    tau = np.exp(log_tau)
    theta = mu[:, None] + tau[:, None] * tt
    return (
        stats.norm.logpdf(mu, 0, 5)
        + stats.cauchy.logpdf(tau, 0, 5)
        + log_tau
        + stats.norm.logpdf(tt).sum(1)
        + stats.norm.logpdf(data["y"], theta, data["sigma"]).sum(1)
    )


def central_fd(f, x, h=1e-6):
    g = np.empty_like(x)
    for k in range(x.shape[1]):
        e = np.zeros(x.shape[1])
        e[k] = h
        g[:, k] = (f(x + e) - f(x - e)) / (2 * h)
    return g


# ---------------------------------------------------------------- structure, names, cache
def test_names_and_dims_match_cmdstan_header(eight):
    header = next(ln for ln in CMDSTAN_CSV.read_text().splitlines() if not ln.startswith("#"))
    names = eight.constrained_param_names(include_tp=True, include_gq=True)
    assert eight.dim == 10 and eight.param_num() == 10 and eight.param_num(True, True) == 34
    assert eight.unconstrained_param_names()[:3] == ["mu", "tau", "theta_tilde.1"]
    assert eight.get_dims() == {"mu": (), "tau": (), "theta_tilde": (8,), "theta": (8,), "log_lik": (8,), "y_hat": (8,)}
    assert eight.get_dims(False, False) == {"mu": (), "tau": (), "theta_tilde": (8,)}
    assert names == header.split(",")[7:]


def test_second_construction_uses_cache(eight):
    lib = eight.build.library
    assert lib.exists() and lib.parent.parent == cache_dir()
    mtime = lib.stat().st_mtime_ns
    again = StanModel(EIGHT.read_text(), EIGHT_DATA)
    # loaded from the cache, not compiled again: the same library file, untouched
    assert again.compiled is False
    assert again.build.library == lib and lib.stat().st_mtime_ns == mtime
    x = _points(eight.dim)
    np.testing.assert_array_equal(again.log_density(x), eight.log_density(x))


# ---------------------------------------------------------------- densities and gradients
def test_log_density_matches_numpy(eight):
    x = _points(eight.dim, n=6)
    np.testing.assert_allclose(eight.log_density(x), eight_logp_numpy(x), rtol=1e-8)
    # without the Jacobian the log(tau) term goes away
    np.testing.assert_allclose(
        eight.log_density(x, jacobian=False), eight_logp_numpy(x) - x[:, 1], rtol=1e-8
    )
    # single draw: scalar
    assert np.isclose(eight.log_density(x[0]), eight_logp_numpy(x[:1])[0], rtol=1e-8)


def test_log_density_gradient_vs_finite_differences(eight):
    x = _points(eight.dim, n=4, seed=1)
    for propto in (False, True):
        for jacobian in (True, False):
            lp, g = eight.log_density_gradient(x, propto=propto, jacobian=jacobian)
            assert lp.shape == (4,) and g.shape == (4, eight.dim)
            np.testing.assert_allclose(lp, eight.log_density(x, propto=propto, jacobian=jacobian), rtol=1e-12)
            fd = central_fd(lambda z, j=jacobian: eight.log_density(z, propto=False, jacobian=j), x)
            np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


def test_propto_differs_by_a_constant(eight):
    x = _points(eight.dim, n=5, seed=2)
    diff = eight.log_density(x) - eight.log_density(x, propto=True)
    np.testing.assert_allclose(diff, diff[0], rtol=1e-10)
    # dropped terms: -0.5 log(2 pi) per normal term, -log(sigma_j), cauchy's -log(pi * 5) ...
    assert abs(diff[0]) > 1.0


def test_threads_give_identical_results(eight):
    x = _points(eight.dim, n=37, seed=4)
    lp1, g1 = eight.log_density_gradient(x)
    c1 = eight.param_constrain(x, include_tp=True, include_gq=True, random_seed=7)
    eight.n_threads = 3
    try:
        lp3, g3 = eight.log_density_gradient(x)
        c3 = eight.param_constrain(x, include_tp=True, include_gq=True, random_seed=7)
    finally:
        eight.n_threads = 1
    np.testing.assert_array_equal(lp1, lp3)
    np.testing.assert_array_equal(g1, g3)
    np.testing.assert_array_equal(c1, c3)


@pytest.mark.filterwarnings("ignore:It is recommended to use web.AppKey")
def test_matches_pystan(eight):
    stan = pytest.importorskip("stan")
    try:
        posterior = stan.build(EIGHT.read_text(), data={k: np.asarray(v).tolist() for k, v in EIGHT_DATA.items()},
                               random_seed=1)
    except Exception as exc:  # noqa: BLE001  # pragma: no cover - no httpstan server here
        pytest.skip(f"PyStan could not build the model here: {exc}")
    x = _points(eight.dim, n=3, seed=5)
    lp_b, g_b = eight.log_density_gradient(x, propto=True, jacobian=True)
    for s in range(x.shape[0]):
        pt = x[s].tolist()
        assert np.isclose(posterior.log_prob(pt, adjust_transform=True), lp_b[s], rtol=1e-8, atol=1e-10)
        assert np.isclose(
            posterior.log_prob(pt, adjust_transform=False),
            eight.log_density(x[s], propto=True, jacobian=False),
            rtol=1e-8,
            atol=1e-10,
        )
        np.testing.assert_allclose(posterior.grad_log_prob(pt), g_b[s], rtol=1e-8, atol=1e-10)
    # constrain / unconstrain agree as well
    c_b = eight.param_constrain(x[0], include_tp=True)
    np.testing.assert_allclose(posterior.constrain_pars(x[0].tolist(), include_tparams=True, include_gqs=False), c_b,
                               rtol=1e-12)


# ---------------------------------------------------------------- transforms
def _cmdstan_draws():
    lines = [ln for ln in CMDSTAN_CSV.read_text().splitlines() if ln and not ln.startswith("#")]
    header = lines[0].split(",")
    values = np.array([[float(v) for v in ln.split(",")] for ln in lines[1:]])
    return header, values


def test_constrain_unconstrain_roundtrip_on_cmdstan_draws(eight):
    _, values = _cmdstan_draws()
    par = values[:, 7:17]  # mu, tau, theta_tilde.1-8
    u = eight.param_unconstrain(par)
    assert u.shape == (len(values), 10)
    np.testing.assert_allclose(u[:, 1], np.log(par[:, 1]), rtol=1e-12)
    np.testing.assert_allclose(eight.param_constrain(u), par, rtol=1e-12, atol=1e-14)
    # transformed parameters and log_lik reproduce CmdStan's output (its inputs are rounded to
    # 6 significant digits, and theta = mu + tau * theta_tilde loses some of them to cancellation)
    full = eight.param_constrain(u, include_tp=True, include_gq=True, random_seed=3)
    np.testing.assert_allclose(full[:, 10:26], values[:, 17:33], rtol=1e-5, atol=1e-4)
    # transform_inits path for one draw
    pt = {"mu": par[0, 0], "tau": par[0, 1], "theta_tilde": par[0, 2:]}
    np.testing.assert_allclose(eight.param_unconstrain_dict(pt), u[0], rtol=1e-12)


def test_roundtrip_random_and_split(eight):
    u = _points(eight.dim, n=20, seed=6)
    c = eight.param_constrain(u)
    np.testing.assert_allclose(eight.param_unconstrain(c), u, rtol=1e-12, atol=1e-12)
    full = eight.param_constrain(u, include_tp=True, include_gq=True, random_seed=11)
    parts = eight.split_constrained(full, include_tp=True, include_gq=True)
    np.testing.assert_allclose(parts["theta"], parts["mu"][:, None] + parts["tau"][:, None] * parts["theta_tilde"],
                               rtol=1e-12)
    # GQ RNG is reproducible for a seed and changes with it
    np.testing.assert_array_equal(full, eight.param_constrain(u, include_tp=True, include_gq=True, random_seed=11))
    other = eight.param_constrain(u, include_tp=True, include_gq=True, random_seed=12)
    assert not np.allclose(other[:, 26:], full[:, 26:])
    np.testing.assert_array_equal(other[:, :26], full[:, :26])


def test_normal_model_log_lik_and_density(normal):
    d = NORMAL_DATA
    assert normal.dim == 1 and normal.constrained_param_names() == ["mu"] + [f"log_lik.{i}" for i in range(1, 13)]
    u = np.linspace(-3, 4, 9)[:, None]
    ll = normal.param_constrain(u, include_gq=True)[:, 1:]
    np.testing.assert_allclose(ll, stats.norm.logpdf(d["y"][None, :], u, d["sigma"]), rtol=1e-12)
    expected = stats.norm.logpdf(u[:, 0], d["mu0"], d["tau0"]) + ll.sum(1)
    np.testing.assert_allclose(normal.log_density(u), expected, rtol=1e-10)
    _, g = normal.log_density_gradient(u)
    exact = -(u[:, 0] - d["mu0"]) / d["tau0"] ** 2 + (d["y"][None, :] - u).sum(1) / d["sigma"] ** 2
    np.testing.assert_allclose(g[:, 0], exact, rtol=1e-10)
    np.testing.assert_allclose(normal.param_unconstrain(u), u, rtol=0)


# ---------------------------------------------------------------- errors
def test_broken_code_raises_with_stanc_message(tmp_path, monkeypatch):
    monkeypatch.setenv("PPL_LOO_STAN_CACHE", str(tmp_path))
    with pytest.raises(StanCompileError, match=r"Syntax error in 'model.stan', line 1(.|\n)*Ill-formed"):
        StanModel("parameters { real mu; } model { mu ~ normal(0, 1) }", {})
    with pytest.raises(StanCompileError, match=r"Semantic error(.|\n)*Identifier \"nu\" not in scope"):
        StanModel("parameters { real mu; } model { nu ~ normal(0, 1); }", {})
    assert list(tmp_path.iterdir()) == []  # nothing left in the cache


def test_mismatched_data_raise_with_stan_message(eight):
    with pytest.raises(StanDataError, match="variable name=sigma"):
        StanModel(EIGHT, {"J": 8, "y": EIGHT_DATA["y"]})
    with pytest.raises(StanDataError, match="(?i)mismatch in dimension"):
        StanModel(EIGHT, {**EIGHT_DATA, "y": EIGHT_DATA["y"][:7]})
    with pytest.raises(StanDataError, match="sigma.*greater than or equal to 0"):
        StanModel(EIGHT, {**EIGHT_DATA, "sigma": -EIGHT_DATA["sigma"]})
    with pytest.raises(StanDataError, match="(?i)int"):
        StanModel(EIGHT, {**EIGHT_DATA, "J": 8.5})


def test_evaluation_errors_are_exceptions(eight):
    bad = np.array([[0.0, -1.0] + [0.0] * 8, [0.0, 1.0] + [0.0] * 8])
    with pytest.raises(StanEvaluationError, match="draw 0.*greater than or equal to 0"):
        eight.param_unconstrain(bad)
    with pytest.raises(ValueError, match="expected shape"):
        eight.log_density(np.zeros((2, 3)))
    # the model still works afterwards
    assert np.isfinite(eight.log_density(np.zeros(10)))


def test_data_to_json():
    js = data_to_json({"J": np.int64(3), "x": np.arange(3), "z": np.array([1.0, np.inf]), "b": True})
    assert js == '{"J": 3, "x": [0, 1, 2], "z": [1.0, Infinity], "b": 1}'


def test_domain_errors_reject_or_raise(eight):
    """A draw where Stan throws std::domain_error (tau = exp(800) = inf makes theta infinite):
    ``on_error="reject"`` gives -inf (gradient NaN) for that draw only and counts it, the default
    raises with Stan's message and the draw index."""
    x = _points(eight.dim, n=4, seed=8)
    x[2, 1] = 800.0
    lp = eight.log_density(x, on_error="reject")
    assert eight.last_n_rejected == 1 and lp[2] == -np.inf
    ok = np.array([0, 1, 3])
    np.testing.assert_allclose(lp[ok], eight_logp_numpy(x[ok]), rtol=1e-8)
    lp2, g2 = eight.log_density_gradient(x, on_error="reject")
    assert eight.last_n_rejected == 1 and lp2[2] == -np.inf and np.all(np.isnan(g2[2]))
    np.testing.assert_allclose(g2[ok], eight.log_density_gradient(x[ok])[1], rtol=0)
    with pytest.raises(StanEvaluationError, match=r"log_density: draw 2: .*normal_lpdf: "
                                                  r"Location parameter\[1\] is -?inf, but must be finite"):
        eight.log_density(x)
    with pytest.raises(StanEvaluationError, match=r"draw 2: "):
        eight.log_density_gradient(x)
    with pytest.raises(ValueError, match="on_error"):
        eight.log_density(x, on_error="ignore")


def test_data_forms_and_threads():
    """Data as an R dump file (CmdStan's format) or JSON text give the same model; default threads."""
    from_r = StanModel(EIGHT, CMDSTAN_CSV.with_name("eight_schools.data.R"))
    from_json = StanModel(EIGHT, data_to_json(EIGHT_DATA))
    assert from_r.data["J"] == 8 and from_r.n_threads >= 1
    x = _points(10, n=40, seed=9)
    np.testing.assert_array_equal(from_r.log_density(x), from_json.log_density(x))
    with pytest.raises(FileNotFoundError, match="nope.json"):
        StanModel(EIGHT, "nope.json")


def test_time_gradient(eight):
    x = _points(eight.dim, n=1, seed=10)[0]
    t = eight.time_gradient(x, n_reps=200)
    # the C++ timing loop ran and reports seconds per gradient; how fast is the benchmark's business
    assert isinstance(t, float) and np.isfinite(t) and t > 0
