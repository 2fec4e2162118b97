"""Tests of the CmdStan CSV reader (ppl_loo.stan.cmdstan_csv) on real CmdStan 2.18 output."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ppl_loo.stan.cmdstan_csv import from_cmdstan, read_cmdstan_csv, read_rdump

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path("/work/shared/data/cmdstan-eight-schools")
if not DATA_DIR.is_dir():  # pragma: no cover
    DATA_DIR = ROOT.parent / "shared" / "data" / "cmdstan-eight-schools"
CSV_FILES = [DATA_DIR / f"output_{i}.csv" for i in range(1, 5)]
RDATA = DATA_DIR / "eight_schools.data.R"
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"

pytestmark = pytest.mark.skipif(not all(p.exists() for p in CSV_FILES), reason="shared CmdStan data missing")


def _raw_rows(path):
    """Header and draw rows of a CmdStan CSV, parsed independently of the reader."""
    lines = [ln.rstrip("\n") for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    header = lines[0].split(",")
    return header, [ln.split(",") for ln in lines[1:]]


@pytest.fixture(scope="module")
def dt():
    return from_cmdstan(CSV_FILES, posterior_predictive="y_hat")


def test_shapes_groups_and_attrs(dt):
    post = dt["posterior"]
    assert post.sizes["chain"] == 4 and post.sizes["draw"] == 100
    assert post["theta"].dims == ("chain", "draw", "theta_dim_0")
    assert post["theta"].shape == (4, 100, 8)
    assert post["mu"].dims == ("chain", "draw")
    assert set(post.data_vars) == {"mu", "tau", "theta_tilde", "theta"}
    assert set(dt["log_likelihood"].data_vars) == {"log_lik"}
    assert dt["log_likelihood"]["log_lik"].shape == (4, 100, 8)
    assert set(dt["posterior_predictive"].data_vars) == {"y_hat"}
    ss = dt["sample_stats"]
    assert set(ss.data_vars) == {"lp", "acceptance_rate", "step_size", "tree_depth", "n_steps", "diverging", "energy"}
    assert ss["diverging"].dtype == bool
    assert ss["tree_depth"].dtype.kind == "i"
    assert dt.attrs["stan_version"] == "2.18.0"
    assert dt.attrs["model_name"] == "eight_schools_nc_model"
    assert dt.attrs["num_samples"] == 100 and dt.attrs["thin"] == 1
    assert dt["posterior"].attrs["step_size"][0] == pytest.approx(0.457932)
    assert len(dt["posterior"].attrs["step_size"]) == 4
    assert dt["sample_stats"].attrs["inv_metric"].shape == (4, 10)
    assert "warmup_posterior" not in dt.children


def test_values_match_raw_text(dt):
    for chain, path in enumerate(CSV_FILES):
        header, rows = _raw_rows(path)
        assert len(rows) == 100
        for draw in (0, 37, 99):
            row = dict(zip(header, rows[draw]))
            assert dt["posterior"]["mu"].values[chain, draw] == float(row["mu"])
            assert dt["posterior"]["tau"].values[chain, draw] == float(row["tau"])
            for j in range(8):
                assert dt["posterior"]["theta"].values[chain, draw, j] == float(row[f"theta.{j + 1}"])
                assert dt["log_likelihood"]["log_lik"].values[chain, draw, j] == float(row[f"log_lik.{j + 1}"])
                assert dt["posterior_predictive"]["y_hat"].values[chain, draw, j] == float(row[f"y_hat.{j + 1}"])
            ss = dt["sample_stats"]
            assert ss["lp"].values[chain, draw] == float(row["lp__"])
            assert ss["energy"].values[chain, draw] == float(row["energy__"])
            assert ss["n_steps"].values[chain, draw] == int(row["n_leapfrog__"])
            assert ss["diverging"].values[chain, draw] == bool(int(row["divergent__"]))


def test_read_one_file_and_config():
    f = read_cmdstan_csv(CSV_FILES[0])
    assert f.stan_version == "2.18.0"
    assert f.config["num_warmup"] == "1000" and f.config["save_warmup"] == "0"
    assert f.config["data.file"] == "eight_schools.data.R"
    assert f.step_size == pytest.approx(0.457932)
    assert f.inv_metric.shape == (10,) and f.inv_metric[0] == pytest.approx(9.90327)
    assert f.timing == pytest.approx({"warmup": 0.062, "sampling": 0.016, "total": 0.078})
    assert f.n_warmup_rows == 0 and f.sampling.shape == (100, len(f.header))


def test_plain_psis_loo_matches_arviz_stats(dt):
    azs = pytest.importorskip("arviz_stats")
    import ppl_loo

    res = ppl_loo.loo(dt, progressbar=False)
    ref = azs.loo(dt, pointwise=True)
    np.testing.assert_allclose(np.asarray(res.elpd_i).ravel(), np.asarray(ref.elpd_i).ravel(), rtol=0, atol=1e-8)
    np.testing.assert_allclose(np.asarray(res.pareto_k).ravel(), np.asarray(ref.pareto_k).ravel(), rtol=0, atol=1e-8)


def test_read_rdump(tmp_path):
    d = read_rdump(RDATA)
    assert d["J"] == 8 and isinstance(d["J"], int)
    np.testing.assert_array_equal(d["y"], [28, 8, -3, 7, -1, 1, 18, 12])
    np.testing.assert_array_equal(d["sigma"], [15, 10, 16, 11, 9, 11, 10, 18])
    p = tmp_path / "x.data.R"
    p.write_text(
        '"a" <- 2.5\nn <- 3L\nidx <- 1:4\nm <- structure(c(1, 2, 3, 4, 5, 6),\n  .Dim = c(2, 3))\n'
        "z <- c(1.5, NA, Inf)\ne <- integer(0)\n"
    )
    d = read_rdump(p)
    assert d["a"] == 2.5 and d["n"] == 3
    np.testing.assert_array_equal(d["idx"], [1, 2, 3, 4])
    np.testing.assert_array_equal(d["m"], [[1, 3, 5], [2, 4, 6]])  # R is column-major
    assert np.isnan(d["z"][1]) and d["z"][2] == np.inf
    assert d["e"].shape == (0,)


def test_different_header_raises(tmp_path):
    text = CSV_FILES[1].read_text().splitlines(keepends=True)
    k = next(i for i, ln in enumerate(text) if not ln.startswith("#"))
    text[k] = text[k].replace("theta_tilde.", "eta.")
    bad = tmp_path / "other_model.csv"
    bad.write_text("".join(text))
    with pytest.raises(ValueError, match="other_model.csv") as info:
        from_cmdstan([CSV_FILES[0], bad])
    assert "eta.1" in str(info.value) and "theta_tilde.1" in str(info.value)


def _synthetic_csv(path, *, save_warmup, thin=1):
    """A small CmdStan-like CSV with a matrix ``m[2,3]`` written column-major, with optional warmup."""
    n_warmup, n_samples = 4, 6
    lines = [
        "# stan_version_major = 2", "# stan_version_minor = 33", "# stan_version_patch = 1",
        "# model = toy_model", "# method = sample (Default)", "#   sample",
        f"#     num_samples = {n_samples}", f"#     num_warmup = {n_warmup}",
        f"#     save_warmup = {save_warmup}", f"#     thin = {thin}",
    ]
    cols = ["lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__", "divergent__", "energy__", "a"]
    cols += [f"m.{i}.{j}" for j in (1, 2, 3) for i in (1, 2)]  # m.1.1, m.2.1, m.1.2, ...
    lines.append(",".join(cols))

    def row(s):
        m = [100 * s + 10 * i + j for j in (1, 2, 3) for i in (1, 2)]
        return ",".join(str(v) for v in [-s, 0.9, 0.5, 2, 3, s % 2, 1.0 + s, s] + m)

    nw = -(-n_warmup // thin) if save_warmup else 0
    lines += [row(-(k + 1)) for k in range(nw)]
    lines += ["# Adaptation terminated", "# Step size = 0.5", "# Diagonal elements of inverse mass matrix:",
              "# 1, 2, 3, 4, 5, 6, 7"]
    ns = -(-n_samples // thin)
    lines += [row(k) for k in range(ns)]
    lines += ["# ", "#  Elapsed Time: 0.01 seconds (Warm-up)", "#                0.02 seconds (Sampling)",
              "#                0.03 seconds (Total)", "# "]
    path.write_text("\n".join(lines) + "\n")
    return nw, ns


def test_matrix_index_placement_warmup_and_thin(tmp_path):
    p = tmp_path / "toy.csv"
    nw, ns = _synthetic_csv(p, save_warmup=1, thin=2)
    assert (nw, ns) == (2, 3)
    d = from_cmdstan(p, log_likelihood=None)
    assert "warmup_posterior" not in d.children
    m = d["posterior"]["m"]
    assert m.dims == ("chain", "draw", "m_dim_0", "m_dim_1") and m.shape == (1, 3, 2, 3)
    for s in range(3):
        np.testing.assert_array_equal(m.values[0, s], [[100 * s + 10 * i + j for j in (1, 2, 3)] for i in (1, 2)])
    assert d.attrs["thin"] == 2 and d.attrs["stan_version"] == "2.33.1"
    d = from_cmdstan([p, p], log_likelihood={"ll": "a"}, include_warmup=True)
    assert d["warmup_posterior"]["m"].shape == (2, 2, 2, 3)
    np.testing.assert_array_equal(d["warmup_posterior"]["m"].values[1, 0, 1], [-100 + 21, -100 + 22, -100 + 23])
    assert d["warmup_sample_stats"]["diverging"].dtype == bool
    np.testing.assert_array_equal(d["log_likelihood"]["ll"].values[0], [0, 1, 2])
    np.testing.assert_array_equal(d["warmup_log_likelihood"]["ll"].values[0], [-1, -2])
    assert "a" not in d["posterior"].data_vars
    # save_warmup=0: no warmup rows, include_warmup adds nothing
    p0 = tmp_path / "toy0.csv"
    _synthetic_csv(p0, save_warmup=0)
    d0 = from_cmdstan(p0, include_warmup=True, observed_data={"y": np.arange(3.0)})
    assert "warmup_posterior" not in d0.children and d0["posterior"].sizes["draw"] == 6
    np.testing.assert_array_equal(d0["observed_data"]["y"].values, [0, 1, 2])


def _assert_same_tree(ours, ref, groups):
    """Same groups, variables, dims and values (the reference converter may add coordinates)."""
    for g in groups:
        a, b = ours[g].to_dataset(), ref[g].to_dataset()
        assert set(a.data_vars) == set(b.data_vars), (g, set(a.data_vars), set(b.data_vars))
        for v in a.data_vars:
            assert a[v].dims == b[v].dims, (g, v, a[v].dims, b[v].dims)
            assert a[v].dtype.kind == b[v].dtype.kind, (g, v, a[v].dtype, b[v].dtype)
            np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=f"{g}/{v}")


def test_real_cmdstanpy_fit_from_csv(dt):
    """``cmdstanpy.from_csv`` builds a real ``CmdStanMCMC`` from the CSV files without a CmdStan
    installation; ``from_cmdstan`` reads it, and agrees with cmdstanpy's own parsing and with
    ArviZ's ``from_cmdstanpy`` converter on the same object."""
    cmdstanpy = pytest.importorskip("cmdstanpy")
    ab = pytest.importorskip("arviz_base")
    fit = cmdstanpy.from_csv([str(p) for p in CSV_FILES])
    assert type(fit).__name__ == "CmdStanMCMC"
    d = from_cmdstan(fit, posterior_predictive="y_hat")
    _assert_same_tree(d, dt, ["posterior", "sample_stats", "log_likelihood", "posterior_predictive"])
    # cmdstanpy's own reading of the same files: draws (draw, chain, column), chain-major stacking
    np.testing.assert_array_equal(d["posterior"]["theta"].values.reshape(400, 8), fit.stan_variable("theta"))
    mv = fit.method_variables()
    np.testing.assert_array_equal(d["sample_stats"]["lp"].values, mv["lp__"].T)
    np.testing.assert_array_equal(d["sample_stats"]["diverging"].values, mv["divergent__"].T.astype(bool))
    np.testing.assert_array_equal(d["sample_stats"]["tree_depth"].values, mv["treedepth__"].T)
    np.testing.assert_allclose(d["posterior"].attrs["step_size"], fit.step_size, rtol=0)
    np.testing.assert_allclose(d["sample_stats"].attrs["inv_metric"], fit.metric, rtol=0)
    ref = ab.from_cmdstanpy(fit, log_likelihood="log_lik", posterior_predictive="y_hat")
    _assert_same_tree(d, ref, ["posterior", "sample_stats", "log_likelihood", "posterior_predictive"])


@pytest.fixture(scope="module")
def pystan_fit():
    """A real PyStan 3 fit of eight schools: 4 chains, warmup saved, thinned by 3."""
    stan = pytest.importorskip("stan")
    pytest.importorskip("httpstan")
    data = read_rdump(RDATA)
    model = stan.build(EIGHT.read_text(), data={k: np.asarray(v).tolist() for k, v in data.items()},
                       random_seed=11)
    fit = model.sample(num_chains=4, num_warmup=200, num_samples=150, num_thin=3, save_warmup=True)
    return data, fit


def test_real_pystan_fit(pystan_fit):
    """``from_cmdstan`` on a real PyStan fit: chains kept apart, warmup and thinning honoured, the
    same groups and values as ArviZ's ``from_pystan``, and the adaptation / timing messages."""
    ab = pytest.importorskip("arviz_base")
    _, fit = pystan_fit
    d = from_cmdstan(fit, posterior_predictive="y_hat", include_warmup=True)
    assert d["posterior"].sizes["chain"] == 4
    assert d["posterior"].sizes["draw"] == 50  # ceil(150 / 3)
    assert d["warmup_posterior"].sizes["draw"] == 67  # ceil(200 / 3)
    assert d.attrs["thin"] == 3 and d.attrs["num_warmup"] == 200 and d.attrs["save_warmup"] == 1
    assert set(d["posterior"].data_vars) == {"mu", "tau", "theta_tilde", "theta"}
    assert d["posterior"]["mu"].dims == ("chain", "draw")  # a scalar, not a length-1 vector
    assert d["posterior_predictive"]["y_hat"].shape == (4, 50, 8)
    assert d["log_likelihood"]["log_lik"].shape == (4, 50, 8)
    ss = d["sample_stats"]
    assert ss["diverging"].dtype == bool and ss["tree_depth"].dtype.kind == "i"
    # after adaptation every chain keeps its own step size: equal within a chain, as the adaptation
    # message reports it (to the 6 digits it prints), and different between chains
    step = ss["step_size"].values
    assert np.all(step == step[:, :1])
    assert len(np.unique(step[:, 0])) == 4
    np.testing.assert_allclose(step[:, 0], d["posterior"].attrs["step_size"], rtol=5e-6)
    assert ss.attrs["inv_metric"].shape == (4, 10)
    assert np.all(ss.attrs["gradient_seconds"] > 0)
    # warmup step sizes still move
    assert np.any(d["warmup_sample_stats"]["step_size"].values != step[:, :1])
    ref = ab.from_pystan(fit, log_likelihood="log_lik", posterior_predictive="y_hat", save_warmup=True)
    # (not warmup_posterior: arviz_base 1.3's io_pystan.get_draws returns the sampling draws there,
    # ``values[:, num_warmup:]``; test_pystan_draws_match_bridge checks ours against lp__)
    _assert_same_tree(d, ref, ["posterior", "sample_stats", "log_likelihood", "posterior_predictive",
                               "warmup_sample_stats"])
    assert d["warmup_posterior"].sizes["draw"] == d["warmup_sample_stats"].sizes["draw"] == 67
    # without include_warmup: sampling draws only
    d2 = from_cmdstan(fit)
    assert "warmup_posterior" not in d2.children and d2["posterior"].sizes["draw"] == 50
    np.testing.assert_array_equal(d2["posterior"]["theta"].values, d["posterior"]["theta"].values)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_pystan_draws_match_bridge(pystan_fit):
    """Every PyStan draw, unconstrained by the bridge: Stan's ``lp__`` is the bridge's log density
    (``propto``, Jacobian), the transformed parameters and ``log_lik`` are the bridge's, to double
    precision; so every variable of a draw sits in the right chain and draw."""
    pytest.importorskip("httpstan")
    import ppl_loo as pl

    data, fit = pystan_fit
    d = from_cmdstan(fit, include_warmup=True)
    model = pl.StanModel(EIGHT, data)
    post = model.loo_model(data=d)
    for prefix in ("", "warmup_"):
        u = post.unconstrain(d[f"{prefix}posterior"])
        lp = model.log_density(u, propto=True, jacobian=True)
        np.testing.assert_allclose(lp, d[f"{prefix}sample_stats"]["lp"].values.reshape(-1), rtol=1e-10, atol=1e-10)
        out = model.split_constrained(model.param_constrain(u, include_tp=True, include_gq=True),
                                      include_tp=True, include_gq=True)
        np.testing.assert_allclose(out["theta"], d[f"{prefix}posterior"]["theta"].values.reshape(-1, 8), rtol=1e-12)
        np.testing.assert_allclose(out["log_lik"], d[f"{prefix}log_likelihood"]["log_lik"].values.reshape(-1, 8),
                                   rtol=1e-12)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_bridge_reproduces_csv_log_lik(dt):
    """Rebuild the model with the bridge, unconstrain the CSV draws, recompute the generated ``log_lik``.

    The CSV prints 6 significant digits, so inputs and outputs carry relative rounding errors up to
    5e-6; the check is ``|bridge - csv| <= 1e-5 * |csv|`` (``rtol=1e-5``, ``atol=0``).
    """
    pytest.importorskip("httpstan")
    from ppl_loo.stan import StanModel

    data = read_rdump(RDATA)
    model = StanModel(str(EIGHT), data)
    names = model.constrained_param_names(include_tp=False, include_gq=False)
    assert names == ["mu", "tau"] + [f"theta_tilde.{j}" for j in range(1, 9)]
    post = dt["posterior"]
    cons = np.concatenate(
        [post["mu"].values.reshape(-1, 1), post["tau"].values.reshape(-1, 1), post["theta_tilde"].values.reshape(-1, 8)],
        axis=1,
    )
    unc = model.param_unconstrain(cons)
    assert unc.shape == (400, 10)
    np.testing.assert_allclose(unc[:, 1], np.log(cons[:, 1]), rtol=1e-12)
    out = model.split_constrained(
        model.param_constrain(unc, include_tp=True, include_gq=True), include_tp=True, include_gq=True
    )
    csv_ll = dt["log_likelihood"]["log_lik"].values.reshape(-1, 8)
    np.testing.assert_allclose(out["log_lik"], csv_ll, rtol=1e-5, atol=0)
    # theta = mu + tau * theta_tilde cancels, so bound its error by the propagated input rounding
    # (each printed value is within 5e-6 * |value| of the sampler's double)
    mu, tau, tt = cons[:, :1], cons[:, 1:2], cons[:, 2:]
    csv_theta = post["theta"].values.reshape(-1, 8)
    bound = 5e-6 * (np.abs(mu) + 2 * np.abs(tau * tt) + np.abs(csv_theta)) + 1e-12
    assert np.all(np.abs(out["theta"] - csv_theta) <= bound)
