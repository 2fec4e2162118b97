"""Reliability rows of plain PSIS-LOO (``pl.loo(data)``, no model) and of ``pl.add_loo``.

Each row is one kind of bad or unusual input and what ppl_loo does with it: the right answer (against
``arviz_stats.loo``, a closed form or an identity) with the warning a user should see, or an error naming the
input and the fix. See ``tests/reliability/rows.py``.
"""

from __future__ import annotations

import functools
import warnings

import arviz_stats as azs  # noqa: E402
import numpy as np
import pytest
from plain_inputs import ordinary, tree
from rows import Row, check_row, params
from scipy import stats

import ppl_loo as pl

E = "pl.loo (plain)"
A = "pl.add_loo"


@functools.cache
def base():
    ll, mu = ordinary(seed=1)
    return ll, mu


def with_column(values):
    """The ordinary input with observation 0 replaced by ``values`` ``(chain, draw)``."""
    ll, mu = base()
    ll = ll.copy()
    ll[..., 0] = values
    return tree(ll, mu)


def saturated():
    """A saturated Bernoulli observation: log p = 0 for 95% of the draws, log(0.05) for the rest."""
    rng = np.random.default_rng(3)
    return np.where(rng.random((4, 250)) < 0.95, 0.0, np.log(0.05))


def clipped():
    """A clipped likelihood: 90% of the draws sit at the cap (log p(y_i | theta) = min(raw, cap))."""
    rng = np.random.default_rng(4)
    raw = -np.abs(rng.normal(size=(4, 250))) * 3
    return np.minimum(raw, np.quantile(raw, 0.1))


def heavy():
    """Log ratios with a Student-t(1.2) tail: ll = -|t|."""
    return -np.abs(stats.t(1.2).rvs(size=(4, 250), random_state=5))


def plain_loo(data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return azs.loo(data, pointwise=True, **kw)


def doubtful_at(res, i, says, strict=True):
    k = np.asarray(res.pareto_k.values)
    assert not np.isfinite(k[i]) or k[i] > res.good_k
    assert bool(np.asarray(res.doubtful.values)[i]) and res.warning
    reason = str(np.asarray(res.reason.values)[i])
    assert says in reason, reason
    if not strict:
        return
    others = np.delete(np.arange(k.size), i)
    assert not np.asarray(res.doubtful.values)[others].any()
    assert all(r == "" for r in np.asarray(res.reason.values)[others])


def agrees_with_arviz_elsewhere(data, res, skip):
    ref = plain_loo(data)
    keep = np.delete(np.arange(res.n_data_points), skip)
    np.testing.assert_allclose(np.asarray(res.elpd_i.values)[keep], np.asarray(ref.elpd_i.values)[keep], rtol=1e-8)


def check_ties(res, data=None, says="tie"):
    doubtful_at(res, 0, says)
    assert np.isnan(np.asarray(res.pareto_k.values)[0])
    assert np.isfinite(res.elpd) and np.isfinite(res.se)


def check_array_input(res):
    """A constant log-likelihood of -1 per draw: every ``elpd_i`` is -1 and ``p_loo_i`` 0 exactly."""
    np.testing.assert_array_equal(res.elpd_i.values, [-1.0, -1.0, -1.0])
    np.testing.assert_array_equal(res.p_loo_i.values, [0.0, 0.0, 0.0])


def check_constant(res):
    c = -1.25
    assert np.asarray(res.pareto_k.values)[0] == -np.inf
    assert np.asarray(res.elpd_i.values)[0] == pytest.approx(c, abs=1e-12)
    assert np.asarray(res.p_loo_i.values)[0] == pytest.approx(0.0, abs=1e-12)
    assert np.asarray(res.mcse_elpd_i.values)[0] == pytest.approx(0.0, abs=1e-12)
    assert not np.asarray(res.doubtful.values).any() and not res.warning
    assert np.asarray(res.reason.values)[0] == ""
    lw = np.asarray(res.log_weights.values) if res.log_weights is not None else None
    if lw is not None:
        np.testing.assert_allclose(lw[..., 0], -np.log(1000), atol=1e-12)


def big_tree():
    ll, mu = base()
    return tree(ll * 1e298, mu)


def check_big(res):
    assert np.isfinite(res.elpd) and np.isfinite(res.se) and res.se > 0
    elpd_i = np.asarray(res.elpd_i.values)
    assert np.all(np.isfinite(elpd_i))
    assert res.se == pytest.approx(np.sqrt(elpd_i.size) * np.std(elpd_i / 1e298, ddof=1) * 1e298, rel=1e-12)
    assert res.warning and np.asarray(res.doubtful.values).all()
    assert all("exp(700)" in r for r in np.asarray(res.reason.values))


def scaled_tree(factor):
    ll, mu = ordinary(seed=1, scale=1.0)
    return tree(ll * factor, mu)


def check_scaled(res):
    ref = plain_loo(scaled_tree(1e200))  # arviz_stats: se = inf (its variance overflows)
    np.testing.assert_allclose(np.asarray(res.elpd_i.values), np.asarray(ref.elpd_i.values), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(res.pareto_k.values), np.asarray(ref.pareto_k.values), rtol=1e-8)
    elpd_i = np.asarray(res.elpd_i.values)
    assert np.isfinite(res.se) and res.se == pytest.approx(1e200 * np.sqrt(8) * np.std(elpd_i / 1e200, ddof=1))


def shift_identity(scale):
    """loo(ll + c_i)_i - loo(ll)_i = c_i exactly (shifting column i by a constant), at magnitude ``scale``."""
    ll, mu = base()
    c = scale * np.linspace(-1, 1, ll.shape[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning may come from the shift
        a = pl.loo(tree(ll, mu))
        b = pl.loo(tree(ll + c, mu))
    return a, b, c


def check_shift(out):
    a, b, c = out
    diff = np.asarray(b.elpd_i.values) - np.asarray(a.elpd_i.values)
    np.testing.assert_allclose(diff, c, rtol=1e-12, atol=1e-9 * np.max(np.abs(c)))
    np.testing.assert_allclose(np.asarray(b.pareto_k.values), np.asarray(a.pareto_k.values), atol=1e-6)
    np.testing.assert_allclose(np.asarray(b.p_loo_i.values), np.asarray(a.p_loo_i.values),
                               atol=1e-8 * max(1.0, np.max(np.abs(c))))


def outlier_tree():
    """An ordinary input with observation 0 a gross outlier: plain PSIS k-hat above 0.7."""
    rng = np.random.default_rng(6)
    n = 6
    y = rng.normal(size=n)
    y[0] = 9.0
    mu = y.mean() + rng.normal(size=(4, 250)) / np.sqrt(n)
    return tree(-0.5 * (y - mu[..., None]) ** 2, mu)


def check_high_k(res):
    k = np.asarray(res.pareto_k.values)
    ref = plain_loo(outlier_tree())
    np.testing.assert_allclose(k, np.asarray(ref.pareto_k.values), rtol=1e-8)
    assert k[0] > res.good_k
    doubtful_at(res, 0, "above", strict=False)
    assert np.array_equal(np.asarray(res.doubtful.values), k > res.good_k)


def transposed():
    """A log-likelihood over dims ("b", "a") with coordinates: the result follows the DataTree's own dims."""
    ll, mu = ordinary(n=12, seed=7)
    ll = ll.reshape(4, 250, 3, 4)
    coords = {"b": ["u", "v", "w"], "a": [10, 20, 30, 40]}
    return tree(ll, mu, dims=("b", "a"), coords=coords), ll


def check_transposed(out):
    res, ll = out
    assert res.elpd_i.dims == ("b", "a")
    for bi, b in enumerate(["u", "v", "w"]):
        for ai, a in enumerate([10, 20, 30, 40]):
            col = tree(ll[..., bi, ai][..., None])
            one = pl.loo(col, reff=1.0)
            got = float(res.elpd_i.sel(b=b, a=a))
            assert got == pytest.approx(float(one.elpd_i.values[0]), rel=1e-12)


def reff_matches_arviz():
    data = tree(*base())
    return pl.loo(data, reff=0.7), plain_loo(data, reff=0.7)


def check_reff(out):
    res, ref = out
    np.testing.assert_allclose(np.asarray(res.elpd_i.values), np.asarray(ref.elpd_i.values), rtol=1e-8)
    np.testing.assert_allclose(np.asarray(res.pareto_k.values), np.asarray(ref.pareto_k.values), rtol=1e-8)
    assert res.se == pytest.approx(ref.se, rel=1e-8)


def dup_chains():
    ll, mu = base()
    ll, mu = ll.copy(), mu.copy()
    ll[2], mu[2] = ll[0], mu[0]
    return tree(ll, mu)


def check_same_as_arviz(data_fn):
    def check(res):
        ref = plain_loo(data_fn())
        np.testing.assert_allclose(np.asarray(res.elpd_i.values), np.asarray(ref.elpd_i.values), rtol=1e-8)
    return check


def with_nan_posterior():
    ll, mu = base()
    mu = mu.copy()
    mu[1, [3, 7, 9]] = np.nan
    return tree(ll, mu)


def with_nan_ll():
    ll, mu = base()
    ll = ll.copy()
    ll[0, 5, 2] = np.nan
    return tree(ll, mu)


def few(C, D):
    ll, mu = base()
    return tree(ll[:C, :D], mu[:C, :D])


# ------------------------------------------------------------------------------------------- add_loo
@functools.cache
def plain_res():
    return pl.loo(tree(*base()))


def added_twice():
    data = pl.add_loo(tree(*base()), plain_res())
    return pl.add_loo(data, plain_res())


def overwritten():
    data = pl.add_loo(tree(*base()), plain_res())
    ll, mu = base()
    other = pl.loo(tree(ll[..., :8] + 1.0, mu))
    return pl.add_loo(data, other, overwrite=True), other


def check_overwritten(out):
    data, other = out
    back = pl.LooResult.from_datatree(data)
    assert back.elpd == pytest.approx(other.elpd, rel=1e-12)


def check_first_write(data):
    back = pl.LooResult.from_datatree(data)
    assert back.elpd == pytest.approx(plain_res().elpd, rel=1e-12)
    assert list(np.asarray(back.reason.values)) == [""] * 8


def other_sizes():
    ll, mu = base()
    return pl.add_loo(tree(ll[..., :5], mu), plain_res())


def other_coords():
    ll, mu = base()
    return pl.add_loo(tree(ll, mu, coords={"y_dim_0": np.arange(10, 18)}), plain_res())


def other_var():
    ll, mu = base()
    return pl.add_loo(tree(ll, mu, name="z"), plain_res())


ROWS = [
    # ties and constants
    Row(E, "ties and constants", "saturated Bernoulli column (95% of draws tie)",
        lambda: pl.loo(with_column(saturated())),
        check=check_ties, warns=UserWarning, says=("y[y_dim_0=0]", "tie", "pl.loo(data, model)"), regression=True),
    Row(E, "ties and constants", "clipped likelihood (90% of draws at the cap)", lambda: pl.loo(with_column(clipped())),
        check=lambda r: doubtful_at(r, 0, "k-hat"), warns=UserWarning, says=("y[y_dim_0=0]",), regression=True),
    Row(E, "ties and constants", "all-constant column: exact LOO density", lambda: pl.loo(with_column(-1.25)),
        check=check_constant, warns=None),
    Row(E, "extreme magnitudes", "Student-t(1.2) tail of the log ratios", lambda: pl.loo(with_column(heavy())),
        check=lambda r: doubtful_at(r, 0, "k-hat"), warns=UserWarning, says=("y[y_dim_0=0]",), regression=True),
    # extreme magnitudes
    Row(E, "extreme magnitudes", "log-likelihood times 1e298", lambda: pl.loo(big_tree()), check=check_big,
        warns=UserWarning, says=("no usable Pareto k-hat", "exp(700)"), regression=True),
    Row(E, "extreme magnitudes", "column shifted by c_i up to 1e8: elpd_i shifts by c_i",
        lambda: shift_identity(1e8), check=check_shift, warns=None),
    Row(E, "extreme magnitudes", "log-likelihood times 1e200: equals arviz_stats, finite se",
        lambda: pl.loo(scaled_tree(1e200)), check=check_scaled, warns=UserWarning, says=("exp(700)",)),
    # k above the threshold
    Row(E, "ties and constants", "k-hat above 0.7 warns (as arviz_stats.loo)", lambda: pl.loo(outlier_tree()),
        check=check_high_k, warns=UserWarning, says=("greater than", "y[y_dim_0=0]", "pl.loo(data, model)"),
        regression=True),
    # dimensions
    Row(E, "dimensions", "obs dims ('b', 'a') with coords: values follow the coords",
        lambda: (pl.loo(transposed()[0], reff=1.0), transposed()[1]), check=check_transposed, warns=None),
    # shapes, NaN
    Row(E, "shapes and types", "2 chains x 1 draw", lambda: pl.loo(few(2, 1)), error=ValueError,
        says=("2 draws", "at least 25", "sample more"), regression=True),
    Row(E, "shapes and types", "4 chains x 5 draws (fewer than PSIS needs)", lambda: pl.loo(few(4, 5)),
        error=ValueError, says=("20 draws", "at least 25"), regression=True),
    Row(E, "shapes and types", "data is a numpy array of the log-likelihood (R's loo.array)",
        lambda: pl.loo(-np.ones((4, 100, 3))), check=check_array_input, warns=UserWarning,
        says=("identical draws",)),
    Row(E, "shapes and types", "data is a 1-D numpy array", lambda: pl.loo(np.ones(10)), error=ValueError,
        says=("shape (10,)", "(draw, obs)", "(chain, draw, *obs)")),
    Row(E, "shapes and types", "data is a string", lambda: pl.loo("fit.nc"), error=TypeError,
        says=("DataTree", "str")),
    Row(E, "NaN and inf", "NaN in posterior draws", lambda: pl.loo(with_nan_posterior()), error=ValueError,
        says=("posterior variable 'mu'", "3 NaN", "chain(s) [1]")),
    Row(E, "NaN and inf", "NaN in the log-likelihood", lambda: pl.loo(with_nan_ll()), error=ValueError,
        says=("log_likelihood['y']", "1 non-finite")),
    # options
    Row(E, "options", "k_threshold='x'", lambda: pl.loo(tree(*base()), k_threshold="x"),
        error=ValueError, says=("k_threshold='x'", "at most 1"), regression=True),
    Row(E, "options", "k_threshold='0.7' (a string)", lambda: pl.loo(tree(*base()), k_threshold="0.7"),
        error=ValueError, says=("k_threshold='0.7'", "at most 1")),
    Row(E, "options", "k_threshold=1.5", lambda: pl.loo(tree(*base()), k_threshold=1.5), error=ValueError,
        says=("k_threshold=1.5", "at most 1")),
    Row(E, "options", "k_threshold=nan", lambda: pl.loo(tree(*base()), k_threshold=float("nan")),
        error=ValueError, says=("k_threshold=nan", "at most 1")),
    Row(E, "options", "reff=-1", lambda: pl.loo(tree(*base()), reff=-1), error=ValueError,
        says=("reff=-1", "positive")),
    Row(E, "options", "reff given: equals arviz_stats.loo(reff=...)", reff_matches_arviz, check=check_reff,
        warns=None),
    Row(E, "names", "var_name=3", lambda: pl.loo(tree(*base()), var_name=3), error=TypeError,
        says=("var_name=3", "string")),
    Row(E, "names", "var_name not in the group", lambda: pl.loo(tree(*base()), var_name="z"), error=ValueError,
        says=("var_name='z'", "['y']")),
    Row(E, "options", "refit= without a model", lambda: pl.loo(tree(*base()), refit="doubtful"), error=ValueError,
        says=("refit=", "model")),
    # duplicates
    Row(E, "duplicates", "the same chain twice", lambda: pl.loo(dup_chains()), check=check_same_as_arviz(dup_chains),
        warns=UserWarning, says=("chains 0 and 2", "identical", "drop the duplicate")),
    # add_loo
    Row(A, "overwrite and escaping", "first write", lambda: pl.add_loo(tree(*base()), plain_res()),
        check=check_first_write, warns=None),
    Row(A, "overwrite and escaping", "group 'loo' exists", added_twice, error=ValueError,
        says=("'loo'", "overwrite=True")),
    Row(A, "overwrite and escaping", "overwrite=True replaces it", overwritten, check=check_overwritten, warns=None),
    Row(A, "mismatched data and results", "result of 8 observations, data of 5", other_sizes, error=ValueError,
        says=("y_dim_0", "8", "5", "computed from"), regression=True),
    Row(A, "mismatched data and results", "other coordinates", other_coords, error=ValueError,
        says=("coordinates of 'y_dim_0'", "computed from")),
    Row(A, "mismatched data and results", "other log-likelihood variable", other_var, error=ValueError,
        says=("'y'", "['z']", "computed from")),
]


@params(ROWS)
def test_row(row):
    check_row(row)
