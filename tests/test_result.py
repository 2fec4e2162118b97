"""``LooResult.summary_table()``: every observation by default (as R ``loo``'s pointwise table and ArviZ),
``flagged_only=True`` for the flagged ones; a refit observation's ``pareto_k`` is NaN (no importance sampling)
through printing, compare, the report and the DataTree round trip; and the ``loo`` glossary's reading of
``p_loo`` above the number of parameters. Real fits: exact posterior draws of conjugate Gaussian models, and
one NumPyro refit of a one-parameter JAX model."""

from __future__ import annotations

import warnings

import jax.scipy.stats as st
import numpy as np
import pytest
import xarray as xr
from gaussian_models import leverage_regression, normal_mean_model

import ppl_loo as pl
from ppl_loo.sampling import sample_nuts

MISSPEC = "badly misspecified"


def _quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


@pytest.fixture(scope="module")
def leverage():
    """Linear regression (3 coefficients) with two high-leverage outliers: some observations adapted."""
    model = leverage_regression(seed=1, n=40)
    data = model.exact_draws(n_chains=2, n_draws=500, seed=11)
    return model, _quiet(pl.loo, data, model, progressbar=False)


def _flat(da, dtype=float):
    return np.asarray(da.values).astype(dtype).ravel()


def test_every_observation_by_default(leverage):
    model, res = leverage
    df = res.summary_table()
    n = res.n_data_points
    assert len(df) == n == model.n_obs
    assert list(df.index) == res.obs_labels(range(n)) == [f"y[obs={i}]" for i in range(n)]
    assert df.index.name == "observation" and df.index.is_unique
    np.testing.assert_array_equal(df["elpd_i"].to_numpy(), _flat(res.elpd_i))
    np.testing.assert_array_equal(df["p_loo_i"].to_numpy(), _flat(res.p_loo_i))
    np.testing.assert_array_equal(df["pareto_k"].to_numpy(), _flat(res.pareto_k))
    np.testing.assert_array_equal(df["pareto_k_psis"].to_numpy(), _flat(res.pareto_k_psis))
    np.testing.assert_array_equal(df["mcse_elpd_i"].to_numpy(), _flat(res.mcse_elpd_i))
    assert list(df["transform"]) == list(_flat(res.transform, str))
    assert list(df["evidence"]) == list(_flat(res.evidence, str))
    assert list(df["doubtful"]) == list(_flat(res.doubtful, bool))
    assert df["elpd_i"].sum() == pytest.approx(res.elpd)
    assert df.attrs["summary"] == res.trust_lines()
    # the index names observation i as res.obs_labels does
    assert df.loc["y[obs=0]", "elpd_i"] == res.elpd_i.values[0]


def test_flagged_only_keeps_exactly_the_flagged(leverage):
    _, res = leverage
    full, df = res.summary_table(), res.summary_table(flagged_only=True)
    k0 = _flat(res.pareto_k_psis)
    tr = _flat(res.transform, str)
    want = (k0 > res.good_k) | (tr != "psis") | _flat(res.doubtful, bool) | _flat(res.refit, bool)
    assert 0 < want.sum() < res.n_data_points  # the outliers are flagged, the rest not
    assert list(df.index) == list(full.index[want])
    assert df.equals(full[want])
    assert set(res.obs_labels(res.pareto_k_ids())) <= set(df.index)
    assert res.summary_table(True).equals(df)
    with pytest.raises(TypeError, match="only_adapted"):  # the old keyword is gone (no aliases before 1.0)
        res.summary_table(only_adapted=True)


def test_summary_table_plain_loo():
    """Without a model (plain PSIS), every observation too; no parameter count, so no p_loo line."""
    model = normal_mean_model(np.linspace(-1, 1, 9))
    res = _quiet(pl.loo, model.exact_draws(n_chains=2, n_draws=300, seed=1))
    df = res.summary_table()
    assert list(df.index) == [f"y[obs={i}]" for i in range(9)] and res.n_params is None
    np.testing.assert_array_equal(df["elpd_i"].to_numpy(), _flat(res.elpd_i))
    assert not any(MISSPEC in line for line in res.trust_lines())


# ---- p_loo above the number of parameters -----------------------------------------------------------------


def _misspec_cases():
    rng = np.random.default_rng(4)
    y = rng.normal(0.0, 3.0, size=25)
    return {
        # known sigma 0.5 on data of spread 3: the one-parameter model cannot fit it, p_loo far above 1
        "misspecified": normal_mean_model(y, sigma=0.5, tau=10.0),
        # a tight prior and the right sigma: p_loo well below 1
        "shrunk": normal_mean_model(y, sigma=3.0, tau=0.2),
    }


@pytest.mark.parametrize("case", ["misspecified", "shrunk"])
def test_p_loo_above_parameter_count_gets_the_glossary_line(case):
    model = _misspec_cases()[case]
    res = _quiet(pl.loo, model.exact_draws(n_chains=2, n_draws=500, seed=3), model, progressbar=False)
    assert res.n_params == model.dim == 1
    np.testing.assert_allclose(res.p, float(np.sum(res.p_loo_i.values)))
    lines = [line for line in res.trust_lines() if MISSPEC in line]
    se = res.p_loo_se  # R loo's se_p_loo: sqrt(n) times the sample SD of p_loo_i
    np.testing.assert_allclose(se, np.sqrt(25) * np.std(res.p_loo_i.values.ravel(), ddof=1))
    assert bool(lines) == (res.p - res.n_params > 2 * se)
    if case == "misspecified":
        assert res.p - 1 > 2 * se > 0
        assert len(lines) == 1 and f"p_loo {res.p:.1f} (SE {se:.1f})" in lines[0] and "1 parameter" in lines[0]
        assert "loo glossary" in lines[0] and "posterior predictive checks" in lines[0]  # p = 1 << n = 25
        assert MISSPEC in str(res)
        assert res.summary_table().attrs["summary"] == res.trust_lines()
        # kept through the DataTree round trip
        again = pl.LooResult.from_datatree(pl.add_loo(model.exact_draws(n_chains=2, n_draws=500, seed=3), res))
        assert again.n_params == 1 and again.trust_lines() == res.trust_lines()
    else:
        assert res.p < 1
    # the rule itself at the boundary: an excess within twice the SE raises no alarm, one beyond it does
    res.n_params = int(np.ceil(res.p - 2 * se))
    assert res.p - res.n_params <= 2 * se
    assert not any(MISSPEC in line for line in res.trust_lines())
    if case == "misspecified":
        res.n_params = int(np.floor(res.p - 2 * se)) - 1
        assert res.n_params >= 0 and any(MISSPEC in line for line in res.trust_lines())


# ---- a refit observation: pareto_k NaN --------------------------------------------------------------------

Y = np.array([0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 9.0, 0.7])
OUTLIER = 10


@pytest.fixture(scope="module")
def refit_fit():
    """The conjugate normal mean of tests/test_refit.py with a gross outlier, refit once with NumPyro."""
    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: st.norm.logpdf(Y, v["mu"], 1.0), obs_dims=("obs",), observed=Y)
    data = sample_nuts(model, num_chains=4, num_warmup=300, num_samples=500, random_seed=3)
    res = _quiet(pl.loo, data, model, progressbar=False, refit=[OUTLIER], random_seed=5)
    return model, data, res


def test_refit_row_has_nan_pareto_k(refit_fit, tmp_path, monkeypatch):
    model, data, res = refit_fit
    assert bool(res.refit.values[OUTLIER]) and res.transform.values[OUTLIER] == "refit"
    assert np.isnan(res.pareto_k.values[OUTLIER])
    assert np.isfinite(res.pareto_k_psis.values[OUTLIER]) and res.pareto_k_psis.values[OUTLIER] > res.good_k
    others = np.delete(np.arange(Y.size), OUTLIER)
    assert np.all(np.isfinite(res.pareto_k.values[others]))
    assert res.n_params == 1

    df = res.summary_table()
    label = f"y[obs={OUTLIER}]"
    assert len(df) == Y.size and np.isnan(df.loc[label, "pareto_k"]) and df.loc[label, "refit"]
    assert df.loc[label, "evidence"] == "refit" and not df.loc[label, "doubtful"]  # the refit converged
    assert label in res.summary_table(flagged_only=True).index
    # NaN is never "above": not among the k-hats after
    assert OUTLIER not in res.pareto_k_ids(after=True) and OUTLIER in res.pareto_k_ids()

    # printing: the k table counts the others and says why one is missing
    text = str(res)
    assert "1 observation(s) have no Pareto k-hat" in text and "1 refit (exact LOO)" in text

    # DataTree round trip (pl.add_loo, netCDF) keeps the NaN
    path = tmp_path / "fit.nc"
    pl.add_loo(data, res).to_netcdf(path)
    again = pl.LooResult.from_datatree(xr.open_datatree(path))
    assert np.isnan(again.pareto_k.values[OUTLIER]) and bool(again.refit.values[OUTLIER])
    assert again.summary_table().equals(df)

    # compare: with a plain-PSIS result of the same draws
    plain = _quiet(pl.loo, data)
    table = _quiet(pl.compare, {"refit": res, "psis": plain})
    assert int(table.loc["refit", "n_refit"]) == 1

    # the report's Pareto-k figure: the NaN is not a point (not at 0), but a tick outside the k scale
    from ppl_loo.workflow.report import figures as report_figures

    figs = []
    real_png = report_figures.png_uri

    def keep(fig):
        figs.append(fig)
        return real_png(fig)

    monkeypatch.setattr(report_figures, "png_uri", keep)
    out = _quiet(pl.report, {"refit": res, "psis": plain}, tmp_path / "r.html")
    html = out.read_text()
    assert "no k-hat after" in html
    khat = [f for f in figs if any("after adaptation" in ax.get_title() for ax in f.axes)]
    ax_after = next(ax for ax in khat[0].axes if "after adaptation" in ax.get_title())
    points = np.concatenate([c.get_offsets() for c in ax_after.collections if len(c.get_offsets())])
    assert points.shape[0] == Y.size - 1 and OUTLIER not in points[:, 0]
    ticks = [line for line in ax_after.lines if line.get_label().startswith("no k-hat")]
    assert len(ticks) == 1 and list(ticks[0].get_xdata()) == [OUTLIER]


def test_pareto_k_table_before_and_after(leverage, refit_fit):
    """R loo's pareto_k_table: counts of plain PSIS's k-hats (identical to arviz_stats.loo's own k-hats of the same
    draws) and of the reported estimates' (a refit counted as having none)."""
    import arviz_stats as azs

    model, res = leverage
    before = res.pareto_k_table()
    k = _flat(res.pareto_k_psis)
    g = res.good_k
    assert list(before["count"]) == [int(np.sum(k <= g)), int(np.sum((k > g) & (k <= 1))), int(np.sum(k > 1))]
    assert before["count"].sum() == k.size and before["pct"].sum() == pytest.approx(100.0)
    assert before.index[0] == f"(-Inf, {g:.2f}] (good)" and before["count"].iloc[1:].sum() > 0  # the outliers
    after = res.pareto_k_table(after=True)
    assert after["count"].iloc[1:3].sum() == len(res.pareto_k_ids(after=True))
    _, data, refit_res = refit_fit
    ref = azs.loo(data, pointwise=True)
    kz = np.asarray(ref.pareto_k.values).ravel()
    np.testing.assert_allclose(_flat(refit_res.pareto_k_psis), kz, rtol=1e-10)
    t = refit_res.pareto_k_table(after=True)
    assert t.loc["no k-hat (refit, mixture, SMC)", "count"] == 1 and t["count"].sum() == Y.size
    assert refit_res.pareto_k_table()["count"].iloc[1:].sum() == int(np.sum(kz > refit_res.good_k))


def test_model_free_print_speaks_of_plain_psis_only():
    """``print(pl.loo(log_lik))`` without a model: a doubtful observation (a normal mean's draws, one far outlier)
    keeps plain PSIS's estimate, and the advice names what a model adds, not a search or mixture that never ran."""
    rng = np.random.default_rng(0)
    mu = rng.normal(0.0, 0.3, size=(4, 500))
    y = np.r_[rng.normal(size=20), 5.0]
    ll = -0.5 * np.log(2 * np.pi) - 0.5 * (y - mu[..., None]) ** 2
    with pytest.warns(UserWarning, match="Pareto"):
        res = pl.loo(ll)
    assert res.doubtful.values[-1] and not res.doubtful.values[:-1].any()
    lines = res.trust_lines()
    advice = [line for line in lines if line.startswith("Doubtful observations")]
    assert advice == ["Doubtful observations keep plain PSIS's estimate (res.reason says why); with the model, "
                      "pl.loo(data, model) adapts the importance-sampling proposal for them and checks it with "
                      "independent evidence, and refit='doubtful' refits the model without each."]
    assert not any("search" in line or "mixture" in line for line in lines[1:]), lines
