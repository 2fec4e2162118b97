"""Reading and checking the user's DataTree (posterior, log_likelihood, observed_data)."""

from __future__ import annotations

import re

import jax
import numpy as np
import xarray as xr

from ppl_loo.numerics.random import seed_from

__all__ = ["check_datatree", "get_log_likelihood", "stack_draws", "r_eff_of", "max_rhat_of", "fit_seconds", "rank_rhat",
           "RHAT_VOUCH", "RHAT_NOT_MIXED",
           "SAMPLE_DIMS", "MIN_DRAWS", "check_posterior_draws", "identical_chains", "align_obs_dims", "obs_labels",
           "obs_label_list",
           "check_finite", "non_finite_error", "STAN_LIBRARIES", "stan_labelled", "with_stan_labels", "posterior_seed",
           "check_random_seed"]

SAMPLE_DIMS = ("chain", "draw")
#: MCMC draws are vouched for only up to this rank-normalized split R-hat of every posterior variable
#: (Vehtari et al. 2021): above it the draws are not yet a sample of the posterior, and no estimate from
#: them, plain PSIS or adapted, can be vouched for, however small its k-hat (``docs/method.md``, section 5)
RHAT_VOUCH = 1.01
#: a largest parameter R-hat above this means chains that have not mixed (Gelman et al. 2013), not a chance excess of
#: :data:`RHAT_VOUCH` over many coordinates: such draws vouch for no estimate, whatever its own R-hat
RHAT_NOT_MIXED = 1.1
#: PSIS fits a Pareto tail to at least 5 draws: ``floor(S / 5) >= 5`` needs ``S >= 25`` (arviz_stats too)
MIN_DRAWS = 25


def check_datatree(data):
    """Return ``data`` as a DataTree with a ``posterior`` group, or raise a clear error."""
    if not isinstance(data, xr.DataTree):
        try:
            from arviz_base import convert_to_datatree

            data = convert_to_datatree(data)
        except Exception as err:  # noqa: BLE001
            raise TypeError(
                f"`data` must be an xarray.DataTree (ArviZ 1.x) with a 'posterior' group; got "
                f"{type(data).__name__}. Convert it with arviz_base.convert_to_datatree."
            ) from err
    if "posterior" not in data.children:
        raise ValueError(
            "`data` has no 'posterior' group: ppl_loo needs posterior draws. Pass the DataTree "
            "returned by pm.sample / ppl_loo.from_cmdstan / ppl_loo.sample_nuts."
        )
    post = data["posterior"].to_dataset()
    for dim in SAMPLE_DIMS:
        if dim not in post.dims:
            raise ValueError(
                f"the 'posterior' group has no '{dim}' dimension (dims: {tuple(post.dims)}); "
                "draws must be stored with dims ('chain', 'draw', ...)."
            )
    return data


def get_log_likelihood(data, var_name=None):
    """The log-likelihood DataArray ``(chain, draw, *obs_dims)`` of ``var_name``, or None."""
    if "log_likelihood" not in data.children:
        return None
    ds = data["log_likelihood"].to_dataset()
    if var_name is None:
        names = list(ds.data_vars)
        if len(names) != 1:
            raise ValueError(
                f"the 'log_likelihood' group has several variables {names}: pick one with var_name=..."
            )
        var_name = names[0]
    if var_name not in ds.data_vars:
        raise ValueError(
            f"var_name={var_name!r} is not in the 'log_likelihood' group (it has {list(ds.data_vars)})."
        )
    da = ds[var_name]
    for dim in SAMPLE_DIMS:
        if dim not in da.dims:
            raise ValueError(f"log_likelihood[{var_name!r}] has no '{dim}' dimension (dims {da.dims}).")
    return da.transpose(*SAMPLE_DIMS, ...)


def stack_draws(da):
    """``(chain, draw, *obs)`` DataArray -> ``(S, n)`` float64 array, chain-major, obs C-order."""
    arr = np.asarray(da.transpose(*SAMPLE_DIMS, ...).values, dtype=np.float64)
    S = arr.shape[0] * arr.shape[1]
    return arr.reshape(S, -1)


def check_finite(arr, what, fix):
    """Raise a ValueError naming ``what`` when ``arr`` has NaN or infinite entries."""
    arr = np.asarray(arr)
    bad = ~np.isfinite(arr)
    if bad.any():
        raise non_finite_error(int(bad.sum()), what, fix)


def non_finite_error(n_bad, what, fix):
    """The ValueError of :func:`check_finite` for ``n_bad`` non-finite values of ``what``."""
    return ValueError(f"{what} has {n_bad} non-finite value(s) (NaN or inf). {fix}")


def r_eff_of(data, n_samples):
    """Relative efficiency as ``arviz_stats.loo`` computes it (mean ESS / S over all variables)."""
    post = data["posterior"].to_dataset()
    if post.sizes["chain"] == 1:
        return 1.0
    import arviz_stats  # noqa: F401  (registers the azstats accessor)

    if any(hasattr(post[v].data, "dask") for v in post.data_vars):  # dask-backed (xr.open_datatree(..., chunks={}))
        # arviz_stats' ess refuses dask arrays: one variable in memory at a time
        ess = xr.Dataset({v: post[v].compute().azstats.ess(method="mean") for v in post.data_vars})
    else:
        ess = post.azstats.ess(method="mean")
    vals = np.hstack([np.asarray(ess[v].values).ravel() for v in ess.data_vars])
    return float(vals.mean() / n_samples)


def fit_seconds(data):
    """The wall time of the fit that made ``data``'s draws, in seconds, where the data records it: ``pm.sample``'s
    and ``pl.sample``'s ``posterior.attrs["sampling_time"]``, else the per-chain ``elapsed_time_warmup`` and
    ``elapsed_time_sampling`` of a Stan fit (``sample_stats`` attributes, chains summed: run one after the other);
    None where neither is there."""
    try:
        t = float(data["posterior"].attrs.get("sampling_time", np.nan))
    except (TypeError, ValueError):
        t = float("nan")
    if np.isfinite(t) and t > 0:
        return t
    if "sample_stats" in data.children:
        attrs = data["sample_stats"].attrs
        parts = [np.asarray(attrs[k], dtype=float) for k in ("elapsed_time_warmup", "elapsed_time_sampling")
                 if k in attrs]
        total = float(sum(np.nansum(p) for p in parts)) if parts else float("nan")
        if np.isfinite(total) and total > 0:
            return total
    return None


def max_rhat_of(data, stan=False):
    """The largest rank-normalized split R-hat (Vehtari et al. 2021, ``arviz_stats``' default) over every
    element of every posterior variable, with where it is: ``(rhat, "name[index]")`` (the index 1-based, as Stan
    names it, with ``stan``: ``beta[1]`` for the first entry of a Stan vector), or ``(nan, None)`` where it cannot
    be computed (one chain, fewer than 4 draws, constant variables)."""
    post = data["posterior"].to_dataset()
    worst, where = float("nan"), None
    for name, da in post.data_vars.items():
        if da.dims[:2] != SAMPLE_DIMS or not np.issubdtype(da.dtype, np.number):
            continue
        a = np.asarray(da.values, dtype=float)
        rh = rank_rhat(a.reshape(a.shape[0], a.shape[1], -1)).reshape(a.shape[2:])
        if not np.any(np.isfinite(rh)):
            continue
        j = int(np.nanargmax(rh))
        if not worst >= rh.flat[j]:
            worst = float(rh.flat[j])
            idx = np.unravel_index(j, rh.shape) if rh.ndim else ()
            where = str(name) + (f"[{', '.join(str(int(x) + int(stan)) for x in idx)}]" if idx else "")
    return worst, where


def rank_rhat(a):
    """Rank-normalized split R-hat of every column of ``a`` ``(chain, draw, k)``: ``(k,)``, NaN where it is
    undefined (one chain, fewer than 4 draws, NaN or constant values; infinite values are ranked).

    The same numbers as ``arviz_stats``' ``rhat`` (``method="rank"``: the larger of the bulk and the
    folded split R-hat of the rank-normalized draws), computed in one vectorized pass: arviz_stats
    loops over the columns in Python, 0.61 s for the 1,537 coefficients of the ovarian regression
    (here 0.26 s, most of it ranking). ``tests/test_engine_selection.py`` checks the identity.
    """
    from scipy.special import ndtri
    from scipy.stats import rankdata

    C, N, k = a.shape
    if C < 2 or N < 4:
        return np.full(k, np.nan)
    h = N // 2
    split = np.concatenate([a[:, :h], a[:, N - h:]], axis=0)  # (2C, h, k), the middle draw dropped when N is odd

    def z_scale(x):
        flat = x.reshape(-1, k)
        r = rankdata(flat, axis=0, method="average")
        return ndtri((r - 3 / 8) / (flat.shape[0] + 1 / 4)).reshape(x.shape)

    def rhat(x):
        n = x.shape[1]
        within = np.mean(np.var(x, axis=1, ddof=1), axis=0)
        between = n * np.var(np.mean(x, axis=1), axis=0, ddof=1)
        return np.sqrt((between / within + n - 1) / n)

    with np.errstate(divide="ignore", invalid="ignore"):
        bulk = rhat(z_scale(split))
        tail = rhat(z_scale(np.abs(split - np.median(split.reshape(-1, k), axis=0))))
    out = np.maximum(bulk, tail)
    out[np.any(np.isnan(a), axis=(0, 1))] = np.nan
    return out


def check_posterior_draws(data):
    """Refuse posterior draws PSIS cannot use, naming the variable and the fix: NaN or infinite draws, fewer
    than :data:`MIN_DRAWS` draws in all."""
    post = data["posterior"].to_dataset()
    for name, da in post.data_vars.items():
        if not np.issubdtype(da.dtype, np.number):
            continue
        a = np.asarray(da.values)
        n_nan, n_inf = int(np.isnan(a).sum()), int(np.isinf(a).sum())
        if n_nan or n_inf:
            what = " and ".join(f"{c} {w}" for c, w in ((n_nan, "NaN"), (n_inf, "infinite")) if c)
            bad = np.any(~np.isfinite(a.reshape(a.shape[0], a.shape[1], -1)), axis=-1)
            chains = sorted({int(c) for c in np.nonzero(bad)[0]})
            raise ValueError(
                f"posterior variable {name!r} has non-finite draws: {what} value(s) (in chain(s) {chains}); "
                "importance sampling needs finite draws. Drop the chains or draws that hold them "
                "(data.isel(chain=...)) or rerun the sampler.")
    S = int(post.sizes["chain"]) * int(post.sizes["draw"])
    if S < MIN_DRAWS:
        raise ValueError(
            f"the posterior has {S} draws ({post.sizes['chain']} chain(s) x {post.sizes['draw']} draw(s)): PSIS "
            f"fits a Pareto tail to the largest importance ratios and needs at least {MIN_DRAWS} draws (use "
            "hundreds or thousands). Sample more draws.")


def check_random_seed(random_seed, caller="pl.loo"):
    """Refuse a ``random_seed`` that is none of None, an int, a ``numpy.random.Generator`` or a JAX key."""
    ok = (random_seed is None or isinstance(random_seed, (np.random.Generator, jax.Array))
          or (isinstance(random_seed, (int, np.integer)) and not isinstance(random_seed, bool)))
    if not ok:
        raise TypeError(f"{caller}(random_seed={random_seed!r}): give an int, a numpy.random.Generator, a JAX key, or "
                        "None (a seed derived from the posterior draws: a rerun on the same draws gives the same "
                        "result).")


def posterior_seed(random_seed, data):
    """``random_seed``, or for None a seed derived from the posterior draws of ``data``
    (:func:`~ppl_loo.numerics.random.seed_from` of its numeric variables in name order): the one meaning of
    ``random_seed=None`` in :func:`ppl_loo.loo`, :func:`ppl_loo.loo_subsample`, :func:`ppl_loo.loo_mixture` and
    :func:`ppl_loo.loo_kfold`, so that a rerun on the same draws gives the same result."""
    if random_seed is not None:
        return random_seed
    post = data["posterior"].to_dataset()
    return seed_from(None, *(np.asarray(post[v].values) for v in sorted(post.data_vars, key=str)
                             if np.issubdtype(post[v].dtype, np.number)))


def identical_chains(data):
    """Pairs ``(a, b)`` of posterior chains that hold exactly the same draws of every variable."""
    post = data["posterior"].to_dataset()
    n_chains = int(post.sizes["chain"])
    if n_chains < 2:
        return []
    keys = [b"".join(np.ascontiguousarray(np.asarray(post[v].isel(chain=c).values)).tobytes()
                     for v in sorted(post.data_vars, key=str)) for c in range(n_chains)]
    first, pairs = {}, []
    for c, key in enumerate(keys):
        if key in first:
            pairs.append((first[key], c))
        else:
            first[key] = c
    return pairs


def _auto_named(dims):
    return all(re.fullmatch(r".*_dim_\d+", str(d)) for d in dims)


def align_obs_dims(da, obs_dims, what):
    """``da`` ``(chain, draw, *obs)`` with its observation dims in the order ``obs_dims`` (matched by name, as
    xarray does); refuses names that differ (where matching by position would be a guess)."""
    found = tuple(d for d in da.dims if d not in SAMPLE_DIMS)
    expected = tuple(obs_dims or ())
    if found == expected or len(found) < 2 or len(found) != len(expected):
        return da
    if set(found) == set(expected):
        return da.transpose(*SAMPLE_DIMS, *expected)
    if _auto_named(found) or _auto_named(expected):
        return da
    raise ValueError(
        f"{what} has observation dims {found} but the model's are {expected}: ppl_loo matches observations by "
        f"dimension name, not position. Rename the dims of {what} to {expected} (DataArray.rename) or pass the "
        "model whose log-likelihood it holds.")


#: ``inference_library`` values (the converters' attrs) of draws whose user indexes observations from 1, as Stan does
STAN_LIBRARIES = ("cmdstan", "cmdstanpy", "pystan", "stan", "bridgestan")


def stan_labelled(data, model=None):
    """Whether the user of ``data`` names observations as Stan does (``log_lik[8]``, 1-based, the CSV column
    ``log_lik.8``): a Stan model, or draws whose ``log_likelihood`` or ``posterior`` group came from Stan."""
    if model is not None and getattr(model, "kind", None) == "Stan":
        return True
    children = getattr(data, "children", {})
    return any(str(data[g].attrs.get("inference_library", "")).lower() in STAN_LIBRARIES
               for g in ("log_likelihood", "posterior") if g in children)


def with_stan_labels(ref0, stan):
    """``ref0`` marked (``attrs["stan_labels"]``) for :func:`obs_labels` to label it as Stan does."""
    if not stan:
        return ref0
    ref0 = ref0.copy()
    ref0.attrs["stan_labels"] = 1
    return ref0


def _default_dims(ref0):
    """The observation dims are the converters' defaults (``log_lik_dim_0`` ..., coordinates 0, 1, ...)."""
    for j, (d, k) in enumerate(zip(ref0.dims, ref0.shape)):
        if not str(d).endswith(f"_dim_{j}"):
            return False
        if d in ref0.coords and not np.array_equal(np.asarray(ref0.coords[d].values), np.arange(k)):
            return False
    return True


def obs_label_list(ref0, idx=None):
    """One label per flat observation index in ``idx`` (every observation when None), as :func:`obs_labels`
    writes them; the coordinate values are read once, so that labelling every observation stays fast."""
    idx = np.arange(int(np.prod(ref0.shape, dtype=int))) if idx is None else np.asarray(idx, dtype=int).ravel()
    stan = bool(ref0.attrs.get("stan_labels")) and ref0.ndim > 0 and _default_dims(ref0)
    name = ref0.name or ""
    if not ref0.ndim:
        return [f"{name}[]" for _ in idx]
    pos = np.unravel_index(idx, ref0.shape)
    if stan:
        return [f"{name}[{','.join(str(int(p[j]) + 1) for p in pos)}]" for j in range(idx.size)]
    values = [np.asarray(ref0.coords[d].values) if d in ref0.coords else None for d in ref0.dims]
    out = []
    for j in range(idx.size):
        parts = []
        for d, vals, p in zip(ref0.dims, values, pos):
            val = vals[p[j]] if vals is not None else int(p[j])
            parts.append(f"{d}={val.item() if hasattr(val, 'item') else val!r}")
        out.append(f"{name}[{', '.join(parts)}]")
    return out


def obs_labels(ref0, idx, limit=10):
    """Labels of the flat observation indices ``idx`` of ``ref0`` (the obs dims only), in the user's terms:
    ``"y[a=1, b='u']"`` (the coordinate values), or ``"log_lik[8]"`` (1-based, as the CmdStan CSV column
    ``log_lik.8``) for Stan draws with the converters' default dims (``ref0.attrs["stan_labels"]``)."""
    idx = [int(i) for i in np.atleast_1d(idx)]
    out = obs_label_list(ref0, idx[:limit])
    return ", ".join(out) + (f" and {len(idx) - limit} more" if len(idx) > limit else "")
