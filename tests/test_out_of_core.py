"""Out-of-core ``pl.loo`` (a log-likelihood larger than memory): a dask-backed log-likelihood read in chunks of
observations gives the numbers of the in-memory path, never loads the whole ``(S, n)`` array, and with a model evaluates
the model only on the observations plain PSIS flags."""

import warnings

import arviz_stats
import dask
import dask.array
import numpy as np
import pytest
import xarray as xr
from dask.callbacks import Callback
from gaussian_models import leverage_regression

import ppl_loo as pl
from ppl_loo.adapters.as_model import as_model

N_OBS = 301  # no chunk size below divides it


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


@pytest.fixture(scope="module")
def reg():
    """Exact posterior draws of a linear regression with two high-leverage outliers (k-hat above 0.7)."""
    model = leverage_regression(seed=3, n=N_OBS)
    return model, model.exact_draws(n_chains=4, n_draws=250, seed=5)


def _lazy(data, chunks):
    """``data`` with its log_likelihood group as dask arrays chunked over the observations."""
    out = data.copy()
    out["log_likelihood"] = data["log_likelihood"].to_dataset().chunk({"obs": chunks})
    assert isinstance(out["log_likelihood"]["y"].data, dask.array.Array)
    return out


POINTWISE = ("elpd_i", "pareto_k", "p_loo_i", "mcse_elpd_i", "pareto_k_psis")


def _assert_same(got, ref, pointwise=POINTWISE, atol=1e-12):
    for key in ("elpd", "se", "p"):
        np.testing.assert_allclose(getattr(got, key), getattr(ref, key), rtol=0, atol=atol, err_msg=key)
    for key in pointwise:
        np.testing.assert_allclose(getattr(got, key).values, getattr(ref, key).values, rtol=0, atol=atol,
                                   err_msg=key)


@pytest.fixture(scope="module")
def plain_ref(reg):
    return _quiet(pl.loo, reg[1])


@pytest.mark.parametrize("chunks", [64, 100, N_OBS])
def test_plain_dask_equals_in_memory(reg, plain_ref, chunks):
    """(a) dask chunks of 64, 100 and all observations: every number of the in-memory path."""
    got = _quiet(pl.loo, _lazy(reg[1], chunks))
    _assert_same(got, plain_ref)
    assert got.warning and plain_ref.warning and np.sum(plain_ref.pareto_k.values > 0.7) >= 1
    np.testing.assert_array_equal(got.doubtful.values, plain_ref.doubtful.values)
    np.testing.assert_array_equal(got.reason.values, plain_ref.reason.values)


@pytest.mark.parametrize("chunk_size", [37, 1000])
def test_plain_chunk_size_argument(reg, plain_ref, chunk_size):
    """(a) ``compute={"chunk_size": ...}`` (observations read at once) with stored chunks of 64 and with NumPy
    values."""
    _assert_same(_quiet(pl.loo, _lazy(reg[1], 64), compute={"chunk_size": chunk_size}), plain_ref)
    _assert_same(_quiet(pl.loo, reg[1], compute={"chunk_size": chunk_size}), plain_ref)


def test_plain_dask_equals_arviz_stats(reg):
    """(b) the chunked result equals ``arviz_stats.loo`` on the same values to 1e-8 (arviz_stats 1.3.3
    itself refuses a dask-backed log-likelihood: its psislw has no ``dask=`` in apply_ufunc)."""
    got = _quiet(pl.loo, _lazy(reg[1], 64))
    ref = _quiet(arviz_stats.loo, reg[1], pointwise=True)
    for key in ("elpd", "se", "p"):
        np.testing.assert_allclose(getattr(got, key), getattr(ref, key), rtol=1e-8, err_msg=key)
    np.testing.assert_allclose(got.elpd_i.values, ref.elpd_i.values, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(got.pareto_k.values, ref.pareto_k.values, rtol=1e-8, atol=1e-8)


def test_zarr_round_trip(reg, plain_ref, tmp_path):
    """(c) written to zarr in chunks of 50 observations, opened lazily: the same result, values read lazily."""
    data = _lazy(reg[1], 50)
    path = tmp_path / "fit.zarr"
    data.to_zarr(path)
    opened = xr.open_datatree(path, engine="zarr", chunks={})
    ll = opened["log_likelihood"]["y"]
    assert isinstance(ll.data, dask.array.Array) and ll.chunksizes["obs"][0] == 50
    _assert_same(_quiet(pl.loo, opened), plain_ref)


class _Sizes(Callback):
    """Records the bytes of every array a dask computation produces."""

    def __init__(self):
        super().__init__()
        self.nbytes = []

    def _posttask(self, key, result, dsk, state, worker_id):
        if isinstance(result, np.ndarray):
            self.nbytes.append(result.nbytes)


@pytest.mark.parametrize("how", ["chunk_size", "budget"])
def test_peak_memory_is_one_chunk(reg, plain_ref, how, monkeypatch):
    """(d) built by ``map_blocks`` of a function that counts what it produces: every block is produced once,
    and no array the scheduler computes is larger than one chunk of observations (the whole array is 10x;
    with the default 512 MB budget these 301 observations are one chunk, so the budget is set to 31 of them
    here: the test fails where the whole array is read)."""
    import ppl_loo.workflow.loo.chunked as chunked

    kwargs = {"compute": {"chunk_size": 31}} if how == "chunk_size" else {}
    if how == "budget":
        monkeypatch.setattr(chunked, "CHUNK_BYTES", 8 * 1000 * chunked.COPIES * 31)
    full = np.asarray(reg[1]["log_likelihood"]["y"].values)
    produced = []

    def block(x, block_info=None):
        (a, b) = block_info[None]["array-location"][2]
        produced.append((a, b))
        return full[:, :, a:b].copy()

    chunks = ((4,), (250,), (31,) * 9 + (N_OBS - 9 * 31,))
    lazy_ll = dask.array.map_blocks(block, dask.array.zeros((4, 250, N_OBS), chunks=chunks), dtype=float)
    data = reg[1].copy()
    data["log_likelihood"] = xr.Dataset({"y": (("chain", "draw", "obs"), lazy_ll)})
    with _Sizes() as sizes, dask.config.set(scheduler="synchronous"):
        got = _quiet(pl.loo, data, **kwargs)
    _assert_same(got, plain_ref)
    assert sorted(produced) == sorted(zip(np.cumsum((0,) + chunks[2][:-1]), np.cumsum(chunks[2])))  # each once
    one_chunk = 4 * 250 * 31 * 8
    assert sizes.nbytes and max(sizes.nbytes) <= one_chunk < full.nbytes / 9


def test_auto_chunks_follow_stored_chunks(monkeypatch):
    """Whole stored chunks are read, grouped within the budget (or ``chunk_size``); an in-memory array is read
    in ranges of that many observations."""
    import ppl_loo.workflow.loo.chunked as chunked
    from ppl_loo.workflow.loo.chunked import obs_blocks

    ll = xr.DataArray(dask.array.zeros((2, 10, 20), chunks=(2, 10, (3, 3, 8, 6))), dims=("chain", "draw", "obs"))
    assert obs_blocks(ll, None) == [(0, 20)]
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 8 * 20 * chunked.COPIES * 7)  # 7 observations per chunk
    assert obs_blocks(ll, None) == [(0, 6), (6, 14), (14, 20)]  # the chunk of 8 read once, whole
    assert obs_blocks(ll, 8) == [(0, 6), (6, 14), (14, 20)]
    assert obs_blocks(ll.compute(), 8) == [(0, 8), (8, 16), (16, 20)]


def test_nan_in_one_chunk_gives_the_in_memory_error(reg):
    """(f) a NaN and an inf in different chunks: the in-memory error, with both counted."""
    bad = reg[1].copy()
    ll = bad["log_likelihood"]["y"].values.copy()
    ll[1, 7, 200], ll[0, 3, 250] = np.nan, np.inf
    bad["log_likelihood"] = xr.Dataset({"y": (("chain", "draw", "obs"), ll)})
    with pytest.raises(ValueError) as in_memory:
        pl.loo(bad)
    with pytest.raises(ValueError) as chunked:
        pl.loo(_lazy(bad, 64))
    assert str(chunked.value) == str(in_memory.value)
    assert "log_likelihood['y'] has 2 non-finite value(s)" in str(chunked.value)


def test_too_few_draws_gives_the_in_memory_error(reg):
    few = reg[1].isel(draw=slice(0, 5))
    with pytest.raises(ValueError) as in_memory:
        pl.loo(few)
    with pytest.raises(ValueError) as chunked:
        pl.loo(_lazy(few, 64))
    assert str(chunked.value) == str(in_memory.value) and "needs at least 25 draws" in str(chunked.value)


def test_bad_chunk_size_is_named(reg):
    with pytest.raises(ValueError, match=r"chunk_size=0: give the number of observations processed at once"):
        pl.loo(reg[1], compute={"chunk_size": 0})


@pytest.fixture(scope="module")
def model_runs(reg):
    """The model path in memory and from a dask-backed log-likelihood, with the observations the model was
    asked for counted (our own protocol's ``log_lik``, wrapped)."""
    model, data = reg
    base = as_model(model)
    asked = []

    def counting(theta, obs=None):
        asked.append(base.obs_shape[0] if obs is None else len(np.atleast_1d(obs)))
        return base.log_lik(theta, obs=obs)

    counted = base._replace(log_lik=counting)
    # the mixture run evaluates every observation at its own draws: out of core it does not run, so both paths go
    # without it
    ref = _quiet(pl.loo, data, counted, progressbar=False, second_opinions={"mixture": False})
    asked_ref, asked[:] = list(asked), []
    got = _quiet(pl.loo, _lazy(data, 64), counted, progressbar=False, second_opinions={"mixture": False})
    return ref, got, asked_ref, list(asked)


def test_model_path_dask_equals_in_memory(model_runs):
    """(e) elpd, se, p and every pointwise array equal to 1e-10; the same observations searched."""
    ref, got, _, _ = model_runs
    assert 0 < int(ref.searched.values.sum()) < N_OBS
    _assert_same(got, ref, POINTWISE + ("n_eff_i", "influence", "hbar_used"), atol=1e-10)
    for key in ("searched", "doubtful", "transform", "reason"):
        np.testing.assert_array_equal(getattr(got, key).values, getattr(ref, key).values, err_msg=key)
    np.testing.assert_allclose(got.adapted_log_weights.values, ref.adapted_log_weights.values, atol=1e-10)


def test_candidates_table_holds_the_searched_rows(model_runs):
    """Out of core, ``res.candidates`` has one row per searched observation (``"index"``: their indices), equal
    to those rows of the in-memory table; the in-memory rows of the others are all NaN."""
    ref, got, _, _ = model_runs
    searched = np.flatnonzero(ref.searched.values)
    np.testing.assert_array_equal(got.candidates["index"], searched)
    assert got.candidates["labels"] == ref.candidates["labels"]
    assert set(got.candidates) == set(ref.candidates) | {"index"}
    for key, value in ref.candidates.items():
        if key != "labels":
            np.testing.assert_allclose(got.candidates[key], value[searched], rtol=0, atol=1e-10, err_msg=key)
            assert np.all(np.isnan(np.delete(value, searched, axis=0))), key


def test_model_evaluated_on_flagged_observations_only(model_runs):
    """(e) in memory the model gives all 301 columns; out of core only the flagged ones."""
    ref, _, asked_ref, asked = model_runs
    assert asked_ref == [N_OBS]
    assert asked == [int(ref.searched.values.sum())]


def test_model_path_log_weights_are_lazy(model_runs):
    ref, got, _, _ = model_runs
    assert isinstance(got.log_weights.data, dask.array.Array)
    assert got.log_weights.dims == ref.log_weights.dims
    np.testing.assert_allclose(got.log_weights.values, ref.log_weights.values, rtol=0, atol=1e-10)


def test_model_path_refit_asks_for_memory(reg):
    with pytest.raises(ValueError, match=r"refit= needs the whole log-likelihood in memory"):
        pl.loo(_lazy(reg[1], 64), reg[0], refit="doubtful", random_seed=1, progressbar=False)


def test_model_path_mixture_asks_for_memory(reg):
    with pytest.raises(ValueError,
                       match=r"second_opinions=\{'mixture': True\} needs the whole log-likelihood in memory"):
        pl.loo(_lazy(reg[1], 64), reg[0], progressbar=False, second_opinions={"mixture": True})


def test_model_path_result_round_trips(model_runs, tmp_path):
    """The out-of-core result written to netCDF (its lazy weights computed chunk by chunk) and read back."""
    _, got, _, _ = model_runs
    path = tmp_path / "loo.nc"
    got.to_datatree().to_netcdf(path)
    back = pl.LooResult.from_datatree(xr.open_datatree(path).load())
    np.testing.assert_array_equal(back.elpd_i.values, got.elpd_i.values)
    np.testing.assert_array_equal(back.log_weights.values, got.log_weights.values)
    np.testing.assert_array_equal(back.candidates["index"], got.candidates["index"])
    assert back.elpd == got.elpd


def test_two_observation_dims(reg, plain_ref):
    """A (7, 43) observation variable chunked over its first dim: the same numbers, in C order."""
    data = reg[1].copy()
    ll = data["log_likelihood"]["y"].values.reshape(4, 250, 7, 43)
    data["log_likelihood"] = xr.Dataset({"y": (("chain", "draw", "a", "b"), ll)}).chunk({"a": 2, "b": 20})
    got = _quiet(pl.loo, data)
    assert got.elpd_i.dims == ("a", "b")
    for key in POINTWISE:
        np.testing.assert_allclose(getattr(got, key).values.ravel(), getattr(plain_ref, key).values, rtol=0,
                                   atol=1e-12, err_msg=key)
    assert abs(got.elpd - plain_ref.elpd) < 1e-12


def test_draws_of_an_approximation(reg):
    """Eq. 13 (``log_q`` given: the draws' density is not the posterior's): the log ratios carry
    ``log p - log q`` per draw in the chunks and in the lazy weights; the same numbers as in memory."""
    from scipy import stats

    model, data = reg
    m, C = model.posterior()
    beta = data["posterior"]["beta"].values.reshape(-1, model.dim)
    log_q = stats.multivariate_normal(m, 1.3 * C).logpdf(beta)  # a wider Gaussian than the posterior
    kwargs = dict(log_q=log_q, progressbar=False, search={"transforms": ("pmm1", "kl"), "hbar": (0.25, 0.0625)})
    ref = _quiet(pl.loo, data, model, **kwargs)
    got = _quiet(pl.loo, _lazy(data, 64), model, **kwargs)
    assert got.approx_posterior and ref.approx_posterior
    _assert_same(got, ref, POINTWISE + ("n_eff_i", "influence"), atol=1e-10)
    np.testing.assert_array_equal(got.searched.values, ref.searched.values)
    np.testing.assert_allclose(got.log_weights.values, ref.log_weights.values, rtol=0, atol=1e-10)


def test_nan_k_explained_from_the_chunks(reg):
    """A NaN k-hat (one draw with nearly all the weight) is explained from that observation's column, read
    again from the stored chunks: the same reason and warning as in memory."""
    data = reg[1].copy()
    ll = data["log_likelihood"]["y"].values.copy()
    rng = np.random.default_rng(0)
    for j in (10, 200):
        ll[:, :, j] = -1.0 + 0.1 * rng.normal(size=(4, 250))
        ll[1, 3, j], ll[2, 5, j] = -2000.0, -1000.0
    data["log_likelihood"] = xr.Dataset({"y": (("chain", "draw", "obs"), ll)})
    with pytest.warns(UserWarning) as in_memory:
        ref = pl.loo(data)
    with pytest.warns(UserWarning) as chunked:
        got = pl.loo(_lazy(data, 64))
    assert np.flatnonzero(np.isnan(ref.pareto_k.values)).tolist() == [10, 200]
    assert "differ by more than a factor exp(700)" in ref.reason.values[10]
    np.testing.assert_array_equal(got.reason.values, ref.reason.values)
    assert [str(w.message) for w in chunked] == [str(w.message) for w in in_memory]
