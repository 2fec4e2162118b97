"""``SubsampleResult``: an ``arviz_stats`` ``ELPDDataLOOSubsample`` with the pointwise extras of
``pl.loo_subsample``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from arviz_stats.utils import ELPDDataLOOSubsample
from xarray import DataArray

__all__ = ["SubsampleResult"]


@dataclass(kw_only=True, repr=False)
class SubsampleResult(ELPDDataLOOSubsample):
    """Subsampled (adaptive) PSIS-LOO-CV result of :func:`ppl_loo.loo_subsample`.

    Every field of ``arviz_stats``' ``ELPDDataLOOSubsample`` (so it prints like
    ``arviz_stats.loo_subsample`` and ``arviz_stats.compare`` treats it as a subsampled result):
    ``elpd``, ``se`` (estimate of the full-data SE of elpd_loo), ``subsampling_se`` (the error of the
    estimate due to subsampling alone), ``p``, ``subsample_size``, ``loo_subsample_observations`` (flat
    indices of the sampled observations), ``elpd_loo_approx`` (the approximation at every observation),
    and ``elpd_i``, ``pareto_k``, ``p_loo_i`` over the observation dims, NaN where not sampled.

    Extras (over the observation dims; NaN, ``""`` or False where not sampled):

    - ``pareto_k_psis``: plain-PSIS k-hat (``pareto_k`` is the k-hat after adaptation);
    - ``transform``: the proposal used (``"psis"``, a transformation's name, ``"failed"``);
    - ``mcse_elpd_i``: Monte Carlo SE of ``elpd_i``;
    - ``doubtful``, ``reason``: observations the engine cannot vouch for, and why;
    - ``searched``: observations the adaptive search examined (model given);
    - ``estimator`` (``"diff_srs"``, ``"srs"``, ``"hh_pps"``), ``approximation`` (``"lpd"``, ``"plpd"``),
      ``subsample_counts`` (times each sampled observation was drawn: 1 except for ``"hh_pps"``),
      ``var_name``, ``adapted`` (True when the model's adaptive engine ran on the subsample),
      ``candidates`` (the search's table, rows in the order of ``loo_subsample_observations``).
    """

    estimator: str = "diff_srs"
    approximation: str = "lpd"
    var_name: str | None = None
    adapted: bool = False
    subsample_counts: np.ndarray | None = None
    pareto_k_psis: DataArray = None
    transform: DataArray = None
    mcse_elpd_i: DataArray = None
    doubtful: DataArray = None
    reason: DataArray = None
    searched: DataArray = None
    candidates: dict | None = None

    def _header(self):
        header = super()._header()
        extra = f"Estimator {self.estimator}, approximation {self.approximation}"
        if self.adapted:
            extra += "; adaptive importance sampling on the flagged observations of the subsample"
        return header + "\n" + extra + "."
