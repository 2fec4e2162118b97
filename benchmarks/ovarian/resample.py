"""Resamplings of the retained MCMC draws and the DataTrees the LOO methods read.

As the authors' code: ``s`` draws *without replacement* from the pooled retained draws, one
independent subset per resampling (seeded). A resampling is stored as one chain of ``s`` draws, so
every method sees i.i.d.-like draws with relative efficiency 1 (``arviz_stats`` uses ``r_eff = 1``
for a single chain, as does ``ppl_loo``).
"""

from __future__ import annotations

import numpy as np
import xarray as xr
from fits import KEEP, load_fit, pooled_posterior

RESAMPLE_SEED = 20240


def resample_index(n_total, s, r, seed=RESAMPLE_SEED):
    """Indices of resampling ``r``: ``s`` of ``n_total`` pooled draws without replacement."""
    if s > n_total:
        raise ValueError(f"cannot take s = {s} draws without replacement from {n_total} retained draws.")
    rng = np.random.default_rng([seed, r])
    return np.sort(rng.choice(n_total, size=s, replace=False))


class Draws:
    """The pooled draws of one fit, with :meth:`tree` building a resampling's DataTree."""

    def __init__(self, path, name):
        arrays, self.summary = load_fit(path)
        self.name = name
        self.post = pooled_posterior(arrays, name)
        ll = arrays["log_lik"]
        self.log_lik = ll.reshape(-1, ll.shape[-1])
        self.n_total = self.log_lik.shape[0]

    def subset(self, idx):
        return {k: v[idx] for k, v in self.post.items()}, self.log_lik[idx]

    def tree(self, idx, model):
        """DataTree with ``posterior`` (one chain), ``log_likelihood`` (Stan's ``log_lik`` as ``y``)
        and ``observed_data`` for the draws ``idx``."""
        post, ll = self.subset(idx)
        dims = model.param_dims
        pv = {}
        for k in KEEP[self.name]:
            v = post[k][None]
            pv[k] = (("chain", "draw") + tuple(dims.get(k, ())), v)
        obs = np.arange(ll.shape[1])
        return xr.DataTree.from_dict({
            "posterior": xr.Dataset(pv),
            "log_likelihood": xr.Dataset({"y": (("chain", "draw", "obs_id"), ll[None])}, coords={"obs_id": obs}),
            "observed_data": xr.Dataset({"y": (("obs_id",), np.asarray(model.y, dtype=np.int64))},
                                        coords={"obs_id": obs}),
        })
