"""Tests of the CmdStan CSV reader (ppl_loo.io.cmdstan) on real CmdStan 2.18 output."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from data_paths import EIGHT_SCHOOLS as DATA_DIR

from ppl_loo.adapters.stan.posterior import loo_adapter
from ppl_loo.io import from_cmdstan, read_cmdstan_csv, read_rdump

ROOT = Path(__file__).resolve().parents[1]
CSV_FILES = [DATA_DIR / f"output_{i}.csv" for i in range(1, 5)]
RDATA = DATA_DIR / "eight_schools.data.R"
EIGHT = ROOT / "stan_models" / "eight_schools_noncentered.stan"


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



def test_read_rdump_forms_of_r_dump(tmp_path):
    """What R's ``dump()`` writes and cmdstanpy's value parser alone does not read: integer arrays
    as ranges (``structure(1:6, .Dim = 2:3)``), ``NA`` among integers, comments; integers stay integers."""
    p = tmp_path / "r.data.R"
    p.write_text('# written by dump()\nm <-\nstructure(1:6, .Dim = 2:3)\nv <- c(1:2, NA) # a comment\n'
                 "w <- c(2L, 5L)\ns <- -Inf\n")
    d = read_rdump(p)
    np.testing.assert_array_equal(d["m"], [[1, 3, 5], [2, 4, 6]])
    assert d["m"].dtype.kind == "i" and d["w"].dtype.kind == "i"
    np.testing.assert_array_equal(d["v"][:2], [1, 2])
    assert np.isnan(d["v"][2]) and d["s"] == -np.inf


def test_names_renamed_and_missing(dt):
    """``{new: stan}`` renames a variable and its dims in both groups; a missing name raises KeyError."""
    d = from_cmdstan(CSV_FILES, log_likelihood={"y": "log_lik"}, posterior_predictive={"y": "y_hat"})
    assert d["log_likelihood"]["y"].dims == d["posterior_predictive"]["y"].dims == ("chain", "draw", "y_dim_0")
    np.testing.assert_array_equal(d["posterior_predictive"]["y"].values, dt["posterior_predictive"]["y_hat"].values)
    assert set(d["posterior"].data_vars) == {"mu", "tau", "theta_tilde", "theta"}
    with pytest.raises(KeyError, match="'nope' is not a variable of the CmdStan output"):
        from_cmdstan(CSV_FILES, posterior_predictive="nope")


RELU = ROOT / "stan_models" / "relu_net.stan"


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """Real Stan output with saved warmup and thinning: Stan's own NUTS (the services CmdStan runs,
    writing through CmdStan's CSV writer) on the ReLU-net program, which has a matrix parameter."""
    if shutil.which("g++") is None:  # pragma: no cover
        pytest.skip("no C++ compiler")
    pytest.importorskip("httpstan")
    import ppl_loo as pl
    from ppl_loo.stan_bridge import relu_data
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    rng = np.random.default_rng(3)
    X = rng.normal(size=(20, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    model = pl.StanModel(RELU, relu_data(X, y, hidden=2), sampler=True)
    paths, logs = sample_cmdstan_csv(model, tmp_path_factory.mktemp("csv"), chains=2, random_seed=42, num_warmup=150,
                                     num_samples=100, thin=3, save_warmup=True, max_depth=6, prefix="relu")
    return model, paths, logs


def test_real_csv_with_warmup_and_thinning(sampled):
    model, paths, logs = sampled
    assert all("Gradient evaluation took" in log for log in logs)
    f = read_cmdstan_csv(paths[0])
    assert f.config["thin"] == "3" and f.get_int("save_warmup", 0) == 1 and f.config["model"] == "relu_net_model"
    assert f.n_warmup_rows == 50 and f.sampling.shape[0] == 34  # ceil(150 / 3), ceil(100 / 3)
    assert f.step_size is not None and f.inv_metric.shape == (model.dim,)
    assert set(f.timing) == {"warmup", "sampling", "total"}
    step_col = f.header.index("stepsize__")
    # after adaptation the step size is the adapted one, printed in the adaptation block
    np.testing.assert_allclose(f.sampling[:, step_col], f.step_size, rtol=5e-6)
    assert np.any(np.abs(f.warmup[:, step_col] - f.step_size) > 1e-3)
    assert f.header[7:10] == ["W1.1.1", "W1.2.1", "W1.1.2"]  # column-major, as Stan writes

    d = from_cmdstan(paths, include_warmup=True, posterior_predictive="y_rep", observed_data={"y": np.arange(3.0)})
    assert dict(d["posterior"].sizes) == {"chain": 2, "draw": 34, "W1_dim_0": 2, "W1_dim_1": 3, "W2_dim_0": 2}
    assert d["warmup_posterior"].sizes["draw"] == 50 and d["warmup_sample_stats"].sizes["draw"] == 50
    assert d["posterior_predictive"]["y_rep"].shape == (2, 34, 20)
    assert d.attrs["thin"] == 3 and d.attrs["save_warmup"] == 1
    np.testing.assert_array_equal(d["observed_data"]["y"].values, [0, 1, 2])
    # values placed by index: W1[i, j] of chain 1, draw 5 is column "W1.{i+1}.{j+1}" of that row
    header, rows = _raw_rows(paths[1])
    row = dict(zip(header, rows[50 + 5]))  # after the 50 warmup rows
    for i in range(2):
        for j in range(3):
            assert d["posterior"]["W1"].values[1, 5, i, j] == float(row[f"W1.{i + 1}.{j + 1}"])
    # every draw, warmup included: Stan's lp__ is the bridge's log density at the unconstrained draw
    # (to the CSV's 6 significant digits) and log_lik its generated quantity
    post = loo_adapter(model, data=d)
    for prefix in ("", "warmup_"):
        u = post.unconstrain(d[f"{prefix}posterior"])
        lp = model.log_density(u, propto=True)
        np.testing.assert_allclose(lp, d[f"{prefix}sample_stats"]["lp"].values.reshape(-1), rtol=1e-5, atol=1e-3)
        ll = model.split_constrained(model.param_constrain(u, include_gq=True), include_gq=True)["log_lik"]
        np.testing.assert_allclose(ll, d[f"{prefix}log_likelihood"]["log_lik"].values.reshape(-1, 20),
                                   rtol=1e-4, atol=1e-4)
    # without include_warmup the warmup rows are dropped
    d0 = from_cmdstan(paths)
    assert "warmup_posterior" not in d0.children
    np.testing.assert_array_equal(d0["posterior"]["W1"].values, d["posterior"]["W1"].values)


def test_chains_side_by_side_write_the_draws_of_chains_one_after_the_other(sampled, tmp_path):
    """Chains in threads (the default, one per CPU) and one after the other (``parallel_chains=1``): each chain has
    its own seed stream, so every CSV row is the same; only the timing lines differ."""
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    model, _, _ = sampled
    kw = dict(chains=3, random_seed=7, num_warmup=100, num_samples=60, max_depth=6)
    side = sample_cmdstan_csv(model, tmp_path / "side", parallel_chains=2, **kw)[0]
    one = sample_cmdstan_csv(model, tmp_path / "one", parallel_chains=1, **kw)[0]
    assert [p.name for p in side] == [p.name for p in one] == ["output_1.csv", "output_2.csv", "output_3.csv"]
    for a, b in zip(side, one):
        header_a, rows_a = _raw_rows(a)
        header_b, rows_b = _raw_rows(b)
        assert header_a == header_b and len(rows_a) == 60
        assert rows_a == rows_b
    assert _raw_rows(side[0])[1] != _raw_rows(side[1])[1]  # the chains differ from each other
    # each chain put back the Ctrl-C handler it found, maybe the library's own that another chain installed: Python's
    # is reinstalled after them, so that Ctrl-C still raises KeyboardInterrupt here
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2.0)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True, np.nan])
def test_parallel_chains_must_be_a_positive_count(sampled, tmp_path, bad):
    from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

    model, _, _ = sampled
    with pytest.raises(ValueError, match=r"parallel_chains=.*give a positive number of chains .* or None"):
        sample_cmdstan_csv(model, tmp_path, chains=2, random_seed=1, num_warmup=10, num_samples=10,
                           parallel_chains=bad)
    assert not list(tmp_path.iterdir())  # nothing sampled, nothing written


def test_real_csv_read_by_cmdstanpy_and_arviz(sampled):
    """cmdstanpy and ArviZ read the same files to the same values (warmup included)."""
    cmdstanpy = pytest.importorskip("cmdstanpy")
    ab = pytest.importorskip("arviz_base")
    _, paths, _ = sampled
    fit = cmdstanpy.from_csv([str(p) for p in paths])
    assert fit.num_draws_warmup == 50 and fit.num_draws_sampling == 34
    d = from_cmdstan(fit, include_warmup=True, posterior_predictive="y_rep")
    ref = ab.from_cmdstanpy(fit, log_likelihood="log_lik", posterior_predictive="y_rep")
    _assert_same_tree(d, ref, ["posterior", "log_likelihood", "posterior_predictive"])
    # sample statistics and warmup: cmdstanpy's own draws (draw, chain, column), warmup rows first.
    # (arviz_base 1.3's from_cmdstanpy puts the warmup rows into sample_stats when the files saved
    # them, 84 draws instead of 34, so it is no reference there.)
    raw = fit.draws(inc_warmup=True)
    cols = list(fit.column_names)
    assert raw.shape[:2] == (84, 2)
    for stan_name, ours in (("lp__", "lp"), ("stepsize__", "step_size"), ("treedepth__", "tree_depth"),
                            ("n_leapfrog__", "n_steps"), ("divergent__", "diverging"), ("energy__", "energy"),
                            ("accept_stat__", "acceptance_rate")):
        np.testing.assert_array_equal(d["sample_stats"][ours].values, raw[50:, :, cols.index(stan_name)].T)
        np.testing.assert_array_equal(d["warmup_sample_stats"][ours].values, raw[:50, :, cols.index(stan_name)].T)
    np.testing.assert_array_equal(d["warmup_sample_stats"]["lp"].values, raw[:50, :, cols.index("lp__")].T)
    np.testing.assert_array_equal(d["warmup_posterior"]["W1"].values[:, :, 1, 2],
                                  raw[:50, :, cols.index("W1[2,3]")].T)
    np.testing.assert_array_equal(d["posterior"]["W1"].values[:, :, 1, 2], raw[50:, :, cols.index("W1[2,3]")].T)


def test_csv_files_of_different_models_raise(sampled):
    """Chains from two different programs (eight schools by CmdStan, the ReLU net by Stan's NUTS)."""
    _, paths, _ = sampled
    with pytest.raises(ValueError,
                       match=r"(?s)relu_1.csv.*different header from.*output_1.csv.*a different model") as info:
        from_cmdstan([CSV_FILES[0], paths[0]])
    assert "missing columns ['mu', 'tau', 'theta_tilde.1'" in str(info.value)
    assert "extra columns ['W1.1.1'" in str(info.value)


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
    post = loo_adapter(model, data=d)
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
    from ppl_loo.stan_bridge import StanModel

    data = read_rdump(RDATA)
    model = StanModel(str(EIGHT), data)
    names = model.constrained_param_names(include_tp=False, include_gq=False)
    assert names == ["mu", "tau"] + [f"theta_tilde.{j}" for j in range(1, 9)]
    post = dt["posterior"]
    cons = np.concatenate(
        [post["mu"].values.reshape(-1, 1), post["tau"].values.reshape(-1, 1),
         post["theta_tilde"].values.reshape(-1, 8)],
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
