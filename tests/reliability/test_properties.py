"""Property tests of plain PSIS-LOO (``pl.loo(data)``) with ``hypothesis``.

Inputs: log-likelihood arrays ``(chain, draw, obs)`` of ordinary posteriors (``ll = log N(y_i | mu_s, scale)``
with ``mu`` from its posterior, plus noise), hypothesis choosing the numbers of chains (1, 2, 4), draws per chain
(100, 250) and observations (4, 8; few shapes, so that PSIS compiles a few times only), the seed, the scale and
the noise; property (e) adds edge-case columns (tied, constant, heavy-tailed, huge).

Properties (each with ``max_examples=25``, ``deadline=None``, ``derandomize=True``: reproducible in CI):

(a) the result is invariant to permuting chains (``reff`` computed from the draws; to 1e-10);
(b) to the order and names of the observation dims (values follow the coordinates);
(c) to permuting draws when ``reff`` is given;
(d) it equals ``arviz_stats.loo`` (elpd, se, p, pareto_k, elpd_i to 1e-8) on the same input;
(e) no result holds a NaN or infinite elpd_i, pareto_k (other than -inf: uniform weights) or se without
    ``warning=True``, ``doubtful`` and a non-empty ``reason`` for that observation.
"""

from __future__ import annotations

import warnings

import arviz_stats as azs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plain_inputs import ordinary, tree

import ppl_loo as pl

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

inputs = st.fixed_dictionaries({
    "C": st.sampled_from([1, 2, 4]), "D": st.sampled_from([100, 250]), "n": st.sampled_from([4, 8]),
    "seed": st.integers(0, 2**16), "scale": st.sampled_from([0.1, 1.0, 30.0]),
    "noise": st.sampled_from([0.0, 0.01, 0.3]),
})


def quiet(fn, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kw)


def values(res):
    return {k: np.asarray(getattr(res, k).values) for k in ("elpd_i", "pareto_k", "p_loo_i", "mcse_elpd_i")}


def same(a, b, rtol=1e-12):
    assert a.elpd == pytest.approx(b.elpd, rel=rtol, abs=1e-12)
    assert a.se == pytest.approx(b.se, rel=rtol, abs=1e-12)
    va, vb = values(a), values(b)
    for k in va:
        np.testing.assert_allclose(va[k], vb[k], rtol=rtol, atol=1e-12, err_msg=k)


@SETTINGS
@given(inputs, st.randoms(use_true_random=False))
def test_a_chain_permutation(p, rnd):
    ll, mu = ordinary(**p)
    perm = list(range(p["C"]))
    rnd.shuffle(perm)
    # reff (mean ESS / S), PSIS of the pooled draws and the spread over chains of chain_se_psis are all order-free
    a, b = quiet(pl.loo, tree(ll, mu)), quiet(pl.loo, tree(ll[perm], mu[perm]))
    same(a, b, rtol=1e-10)


@SETTINGS
@given(inputs, st.booleans())
def test_b_dim_order_and_names(p, rename):
    p = dict(p, n=12)
    ll, mu = ordinary(**p)
    ll4 = ll.reshape(ll.shape[:2] + (3, 4))
    coords = {"u": ["x", "y", "z"], "v": [5, 6, 7, 8]}
    a = quiet(pl.loo, tree(ll4, mu, dims=("u", "v"), coords=coords))
    names = ("vv", "uu") if rename else ("v", "u")
    coords_t = {names[0]: coords["v"], names[1]: coords["u"]}
    b = quiet(pl.loo, tree(np.swapaxes(ll4, 2, 3), mu, dims=names, coords=coords_t))
    assert b.elpd == pytest.approx(a.elpd, rel=1e-12) and b.se == pytest.approx(a.se, rel=1e-12)
    for k in ("elpd_i", "pareto_k", "p_loo_i"):
        got = getattr(b, k).rename({names[0]: "v", names[1]: "u"}).transpose("u", "v")
        np.testing.assert_allclose(got.values, getattr(a, k).values, rtol=1e-12, atol=1e-14)
        assert list(got.coords["u"].values) == coords["u"] and list(got.coords["v"].values) == coords["v"]


@SETTINGS
@given(inputs, st.randoms(use_true_random=False))
def test_c_draw_permutation_with_reff(p, rnd):
    ll, mu = ordinary(**p)
    S = p["C"] * p["D"]
    perm = list(range(S))
    rnd.shuffle(perm)
    flat_ll, flat_mu = ll.reshape(S, -1)[perm], mu.reshape(S)[perm]
    a = quiet(pl.loo, tree(ll, mu), reff=0.8)
    b = quiet(pl.loo, tree(flat_ll.reshape(ll.shape), flat_mu.reshape(mu.shape)), reff=0.8)
    # per-observation quantities from the pooled draws are order-free; the per-chain spread is not (a
    # reshuffle mixes the chains), so mcse is compared where it is the delta-method one (one chain)
    for k in ("elpd_i", "pareto_k", "p_loo_i"):
        np.testing.assert_allclose(getattr(b, k).values, getattr(a, k).values, rtol=1e-10, atol=1e-12)
    assert b.elpd == pytest.approx(a.elpd, rel=1e-10) and b.se == pytest.approx(a.se, rel=1e-10)
    if p["C"] == 1:
        np.testing.assert_allclose(b.mcse_elpd_i.values, a.mcse_elpd_i.values, rtol=1e-10)


@SETTINGS
@given(inputs)
def test_d_equals_arviz_stats(p):
    ll, mu = ordinary(**p)
    data = tree(ll, mu)
    res = quiet(pl.loo, data)
    ref = quiet(azs.loo, data, pointwise=True)
    assert res.elpd == pytest.approx(ref.elpd, rel=1e-8)
    assert res.se == pytest.approx(ref.se, rel=1e-8)
    assert res.p == pytest.approx(ref.p, rel=1e-8, abs=1e-8)
    np.testing.assert_allclose(res.elpd_i.values, ref.elpd_i.values, rtol=1e-8)
    np.testing.assert_allclose(res.pareto_k.values, ref.pareto_k.values, rtol=1e-8, atol=1e-8)
    assert res.warning == bool(np.any(ref.pareto_k.values > ref.good_k))


def edge_column(kind, rng, shape):
    if kind == "tied":
        return np.where(rng.random(shape) < rng.uniform(0.6, 0.99), 0.0, np.log(rng.uniform(0.01, 0.5)))
    if kind == "constant":
        return np.full(shape, rng.normal())
    if kind == "heavy":
        return -np.abs(rng.standard_t(rng.uniform(0.6, 2.0), size=shape)) * rng.uniform(1, 50)
    if kind == "huge":
        return -np.abs(rng.normal(size=shape)) * 10.0 ** rng.uniform(3, 300)
    return -np.abs(rng.normal(size=shape)) * rng.uniform(5, 40)  # "outlier": k-hat high


@SETTINGS
@given(inputs, st.lists(st.sampled_from(["tied", "constant", "heavy", "huge", "outlier"]), min_size=4, max_size=4))
def test_e_no_silent_nan(p, kinds):
    ll, mu = ordinary(**p)
    rng = np.random.default_rng(p["seed"])
    extra = np.stack([edge_column(k, rng, ll.shape[:2]) for k in kinds], axis=-1)
    data = tree(np.concatenate([ll, extra], axis=-1), mu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = pl.loo(data)
    elpd_i, k = np.asarray(res.elpd_i.values), np.asarray(res.pareto_k.values)
    doubtful, reason = np.asarray(res.doubtful.values), np.asarray(res.reason.values)
    bad = ~np.isfinite(elpd_i) | np.isnan(k) | (k == np.inf)
    assert np.isfinite(res.se) and np.isfinite(res.elpd)
    assert np.all(doubtful[bad]) and all(reason[bad] != "")
    assert np.all((reason != "") == doubtful)
    if doubtful.any():
        assert res.warning
        assert any("doubtful" in str(w.message) for w in caught if issubclass(w.category, UserWarning))
    const = [i for i, kind in enumerate(kinds) if kind == "constant"]
    for j in const:
        i = ll.shape[-1] + j
        assert k[i] == -np.inf and not doubtful[i]
        assert elpd_i[i] == pytest.approx(extra[0, 0, j], abs=1e-12)
