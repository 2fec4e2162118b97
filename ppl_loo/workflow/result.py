"""``LooResult``: an ``arviz_stats`` ``ELPDDataLOO`` with the pointwise extras of adaptive LOO."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from arviz_stats.utils import ELPDDataLOO
from xarray import DataArray

__all__ = ["LooResult"]


@dataclass(kw_only=True, repr=False)
class LooResult(ELPDDataLOO):
    """Adaptive PSIS-LOO-CV result.

    Works everywhere an ``arviz_stats`` LOO result does (``arviz_stats.compare``, printing), and
    carries pointwise extras as DataArrays over the observation dims of the log-likelihood
    variable:

    - ``elpd_i``, ``p_loo_i``: pointwise elpd and effective number of parameters;
    - ``pareto_k``: k-hat after adaptation; ``pareto_k_psis``: k-hat of plain PSIS;
    - ``transform``: the transformation used (``"psis"`` where none was needed, ``"failed"``
      where none reached the threshold; then the lowest-k candidate is still used);
    - ``hbar_used``: its step (NaN for ``"psis"``; the damping for ``newton*``, the number of
      iterations for ``mm_iter``);
    - ``mcse_elpd_i``: Monte Carlo standard error of ``elpd_i``; ``n_eff_i``: effective sample
      size of its weights (times ``r_eff``);
    - ``influence``: posterior variance of the observation's log-likelihood, the
      non-k criterion that also triggers adaptation (see :func:`ppl_loo.loo`);
    - ``doubtful``: True where the estimate stays unreliable: k above the threshold after
      adaptation, or successful proposals that disagree beyond their Monte Carlo error.
    """

    pareto_k_psis: DataArray = None
    transform: DataArray = None
    hbar_used: DataArray = None
    mcse_elpd_i: DataArray = None
    influence: DataArray = None
    doubtful: DataArray = None
    candidates: Any = None  # per-observation table of every (transform, hbar) k-hat and elpd_i
    var_name: str | None = None
    _engine: Any = field(default=None, compare=False)

    _display_kind = "loo"

    def _header(self):
        header = super()._header()
        if self.transform is not None:
            tr = np.asarray(self.transform.values).ravel()
            n_adapt = int(np.sum((tr != "psis") & (tr != "failed")))
            n_fail = int(np.sum(tr == "failed"))
            header += f"\nAdaptive importance sampling (ppl_loo): {n_adapt} observations adapted"
            if n_fail:
                header += f", {n_fail} still above the Pareto k threshold"
            if self.doubtful is not None and bool(np.any(self.doubtful.values)):
                header += f", {int(np.sum(self.doubtful.values))} doubtful"
        return header

    def summary_table(self, only_adapted=True):
        """A pandas DataFrame of the pointwise results (adapted observations by default)."""
        import pandas as pd

        cols = {
            "pareto_k_psis": self.pareto_k_psis,
            "pareto_k": self.pareto_k,
            "transform": self.transform,
            "hbar": self.hbar_used,
            "elpd_i": self.elpd_i,
            "mcse_elpd_i": self.mcse_elpd_i,
            "influence": self.influence,
            "doubtful": self.doubtful,
        }
        df = pd.DataFrame({k: np.asarray(v.values).ravel() for k, v in cols.items() if v is not None})
        if only_adapted:
            df = df[(df["transform"] != "psis") | df["doubtful"]]
        return df
