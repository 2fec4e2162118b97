"""The draws behind the ``elpd_i`` that no proposal of the search gave, kept in the result for the after-LOO functions.

A refit's draws are draws of ``p(theta | y_-i)`` itself (equal weights); the mixture importance-sampling run's draws
``theta_s ~ q_mix`` (one set for every observation, ``q_mix(theta) ∝ p(theta | y) sum_j 1 / p(y_j | theta)``) weigh
observation ``i``'s LOO posterior with ``log w_si = -log p(y_i | theta_s) - logsumexp_j(-log p(y_j | theta_s))``
(:func:`ppl_loo.numerics.mixture.mixture_log_weights`). Where ``elpd_i`` came from one of them (``transform`` is
``"refit"`` or ``"mixture"``), :func:`ppl_loo.loo_expectations`, ``loo_pit``, ``loo_score``, ``loo_r2``,
``loo_metrics`` and ``loo_roc`` weight those draws, not the plain PSIS weights of the posterior draws (which are
wrong exactly there). Tempered SMC's particles are not kept: its estimate is only ever pooled with another one, whose
draws are (:mod:`ppl_loo.workflow.loo.vouch.rule`).

The result holds them as ``kept_draws`` ``(kept_set, kept_point, kept_param)``, unconstrained, one set per refit and
one for the mixture run (padded with NaN), and ``kept_log_weights`` ``(kept, kept_point)`` (``-inf`` padding), with
coordinates ``kept`` (the observation's flat index), ``kept_source`` and ``kept_set`` (its row of ``kept_draws``).
At most :data:`KEEP_MAX_VALUES` numbers are kept; sets beyond that are dropped, and their observations fall back to the
plain PSIS weights with the warning of the after-LOO functions.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.numerics.mixture import mixture_log_weights

__all__ = ["KeptDraws", "KEEP_MAX_VALUES", "KEPT_SOURCES"]

#: the most numbers the kept draws may hold (2**25 float64: 256 MiB); the posterior draws of the ovarian horseshoe
#: regression (4,000 x 3,075) are 12.3 million, the mixture run's as many
KEEP_MAX_VALUES = 2**25
#: ``transform`` values whose draws are kept
KEPT_SOURCES = ("refit", "mixture")


class KeptDraws:
    """Collects the refits' and the mixture run's draws during ``pl.loo``; :meth:`arrays` gives the result's
    ``kept_draws`` and ``kept_log_weights`` for the observations whose final ``transform`` is their source."""

    def __init__(self):
        self.refits = {}  # observation -> its refit's draws (M, d)
        self.mixture = None  # (draws (M, d), log-likelihood there (M, n))

    def add_refit(self, i, draws):
        """The draws ``(chains, draws, d)`` of the refit without observation ``i``."""
        draws = np.asarray(draws, dtype=np.float64)
        self.refits[int(i)] = draws.reshape(-1, draws.shape[-1])

    def add_mixture(self, draws, ll):
        """The mixture run's draws ``(chains, draws, d)`` and the log-likelihood ``(chains * draws, n)`` there."""
        draws = np.asarray(draws, dtype=np.float64)
        self.mixture = (draws.reshape(-1, draws.shape[-1]), np.asarray(ll, dtype=np.float64))

    def arrays(self, transform):
        """``{"kept_draws": ..., "kept_log_weights": ...}`` for the observations whose ``transform`` (flat, final) is
        ``"refit"`` with a kept refit or ``"mixture"``; ``{}`` when there are none."""
        tr = np.asarray(transform).astype(str).ravel()
        sets, rows, total = [], [], 0  # sets: (source, draws); rows: (i, set index, log weights)
        mixture_set = None
        for i in np.flatnonzero(tr == "mixture") if self.mixture is not None else []:
            if mixture_set is None:
                if total + self.mixture[0].size > KEEP_MAX_VALUES:
                    break
                mixture_set, total = len(sets), total + self.mixture[0].size
                sets.append(("mixture", self.mixture[0]))
                l_s = mixture_log_weights(self.mixture[1])  # (M,), shared by every mixture row
            rows.append((int(i), mixture_set, -self.mixture[1][:, i] - l_s))
        for i in np.flatnonzero(tr == "refit"):
            draws = self.refits.get(int(i))
            if draws is None or total + draws.size > KEEP_MAX_VALUES:
                continue
            total += draws.size
            rows.append((int(i), len(sets), np.zeros(draws.shape[0])))
            sets.append(("refit", draws))
        if not rows:
            return {}
        return _as_arrays(sets, rows)


def _as_arrays(sets, rows):
    """The DataArrays of :meth:`KeptDraws.arrays` (padded to the largest set)."""
    m = max(draws.shape[0] for _, draws in sets)
    d = sets[0][1].shape[1]
    points = np.full((len(sets), m, d), np.nan)
    for j, (_, draws) in enumerate(sets):
        points[j, :draws.shape[0]] = draws
    lw = np.full((len(rows), m), -np.inf)
    for r, (_, _, w) in enumerate(rows):
        lw[r, :w.size] = w
    kept_draws = xr.DataArray(points, dims=("kept_set", "kept_point", "kept_param"), name="kept_draws",
                              coords={"kept_set_source": ("kept_set", np.asarray([s for s, _ in sets], dtype=str))})
    kept_lw = xr.DataArray(lw, dims=("kept", "kept_point"), name="kept_log_weights",
                           coords={"kept": np.asarray([i for i, _, _ in rows], dtype=np.int64),
                                   "kept_source": ("kept", np.asarray([sets[s][0] for _, s, _ in rows], dtype=str)),
                                   "kept_set": ("kept", np.asarray([s for _, s, _ in rows], dtype=np.int64))})
    return {"kept_draws": kept_draws, "kept_log_weights": kept_lw}
