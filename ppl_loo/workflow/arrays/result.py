"""Results of R ``loo``'s ``waic`` and ``elpd``: ``arviz_stats`` ``ELPDData`` with R's pointwise columns and
estimates table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
from arviz_stats.utils import ELPDData
from xarray import DataArray

__all__ = ["WaicResult", "ElpdResult", "estimates_table"]


def estimates_table(columns):
    """R's ``table_of_estimates``: per pointwise column its sum (``Estimate``) and ``sqrt(n var)`` (``SE``, with the
    sample variance), as a DataFrame with one row per column name."""
    rows = {}
    for name, values in columns.items():
        x = np.asarray(values, dtype=np.float64).ravel()
        rows[name] = (float(np.sum(x)), float(np.sqrt(x.size) * np.std(x, ddof=1)) if x.size > 1 else 0.0)
    return pd.DataFrame.from_dict(rows, orient="index", columns=["Estimate", "SE"])


@dataclass(kw_only=True, repr=False)
class WaicResult(ELPDData):
    """R ``loo``'s ``waic`` result: ``elpd`` (``elpd_waic``), ``se``, ``p`` (``p_waic``), and pointwise ``elpd_i``
    (``elpd_waic``), ``p_waic_i``, ``waic_i`` (``-2 elpd_i``) over the observation dims; :attr:`estimates` is R's table.
    Prints like ``arviz_stats``' results; ``good_k`` is NaN (no Pareto k)."""

    p_waic_i: DataArray = None
    waic_i: DataArray = None

    _kind: ClassVar[str] = "waic"

    @property
    def estimates(self):
        """R's ``estimates``: rows ``elpd_waic``, ``p_waic``, ``waic``; columns ``Estimate``, ``SE``."""
        return estimates_table({"elpd_waic": self.elpd_i, "p_waic": self.p_waic_i, "waic": self.waic_i})

    def _footer(self):
        if not self.warning:
            return ""
        n = int(np.sum(self.p_waic_i.values > 0.4))
        return (f"\n\n{n} of {self.n_data_points} p_waic estimates are greater than 0.4: WAIC is unreliable there; "
                "use pl.loo instead.")


@dataclass(kw_only=True, repr=False)
class ElpdResult(ELPDData):
    """R ``loo``'s ``elpd`` result (the log predictive density of data the draws did not see, no LOO): ``elpd`` and
    ``se``, pointwise ``elpd_i`` (``log mean_s p(y_i | theta_s)``) and ``ic_i`` (``-2 elpd_i``); ``p`` and
    ``good_k`` are NaN. :attr:`estimates` is R's table (rows ``elpd``, ``ic``)."""

    ic_i: DataArray = None

    @property
    def estimates(self):
        """R's ``estimates``: rows ``elpd``, ``ic``; columns ``Estimate``, ``SE``."""
        return estimates_table({"elpd": self.elpd_i, "ic": self.ic_i})

    def _header(self):
        return (f"Computed from {self.n_samples} by {self.n_data_points} log-likelihood matrix "
                "(elpd without leave-one-out, R loo's elpd).")

    def _table(self):
        return self.estimates.to_string(float_format=lambda v: f"{v:.2f}")
