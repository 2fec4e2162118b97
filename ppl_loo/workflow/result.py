"""``LooResult``: an ``arviz_stats`` ``ELPDDataLOO`` with the pointwise extras of adaptive LOO."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from arviz_stats.utils import ELPDDataLOO
from xarray import DataArray

from ppl_loo.workflow.inputs import RHAT_VOUCH

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
    - ``doubtful``: True where the engine cannot vouch for the estimate (``docs/method.md``,
      section 5: the rule and its effect on the ground-truth suite); such an observation's
      ``elpd_i`` is the plain PSIS value unless a refit replaced it. Every observation not refit is
      doubtful when the MCMC draws have not converged (``max_rhat`` above 1.01); its ``elpd_i`` is
      then what the search gave (a confirmed candidate's, else plain PSIS);
    - ``max_rhat``: the largest rank-normalized split R-hat over the posterior variables (NaN for
      draws of an approximation) and ``max_rhat_var``, where it is;
    - ``refit``: True where ``elpd_i`` comes from refitting the model without the observation
      (``pl.loo(..., refit=...)``); ``refit_info`` has each refit's sampler, divergences, R-hat
      of ``log p(y_i | theta)`` and wall time.
    """

    pareto_k_psis: DataArray = None
    transform: DataArray = None
    hbar_used: DataArray = None
    mcse_elpd_i: DataArray = None
    influence: DataArray = None
    doubtful: DataArray = None
    refit: DataArray = None
    refit_info: Any = None
    candidates: Any = None  # per-observation table of every (transform, hbar) k-hat and elpd_i
    max_rhat: float = float("nan")
    max_rhat_var: str | None = None
    var_name: str | None = None
    _engine: Any = field(default=None, compare=False)

    _display_kind = "loo"

    def _header(self):
        header = super()._header()
        if self.transform is not None:
            header += "\n" + "\n".join(self.trust_lines())
        return header

    def trust_lines(self):
        """What was adapted, refit and doubtful, and how much of ``elpd_loo`` those observations carry."""
        tr = np.asarray(self.transform.values).ravel()
        elpd_i = np.asarray(self.elpd_i.values, dtype=float).ravel()
        n_adapt = int(np.sum((tr != "psis") & (tr != "failed") & (tr != "refit")))
        lines = [f"Adaptive importance sampling (ppl_loo): {n_adapt} observations adapted"]
        for label, mask in (("refit (exact LOO)", tr == "refit"), ("doubtful", self._flag("doubtful"))):
            k = int(mask.sum())
            if k:
                part = float(elpd_i[mask].sum())
                lines.append(f"{k} {label}: they carry {part:.2f} of elpd_loo {self.elpd:.2f} "
                             f"({100 * part / self.elpd if self.elpd else float('nan'):.0f}%)")
        if self.max_rhat > RHAT_VOUCH:
            lines.append(f"The draws have not converged (R-hat {self.max_rhat:.3f} for {self.max_rhat_var}): "
                         "no estimate from them is vouched for.")
        if self._flag("doubtful").any():
            lines.append("Doubtful observations keep their importance-sampling elpd_i; pl.loo(..., refit='doubtful', "
                         "random_seed=...) replaces them by exact refits.")
        return lines

    def _flag(self, name):
        v = getattr(self, name, None)
        n = int(np.asarray(self.elpd_i.values).size)
        return np.zeros(n, bool) if v is None else np.asarray(v.values, bool).ravel()

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
            "refit": self.refit,
        }
        df = pd.DataFrame({k: np.asarray(v.values).ravel() for k, v in cols.items() if v is not None})
        if only_adapted:
            df = df[(df["transform"] != "psis") | df["doubtful"]]
        df.attrs["summary"] = self.trust_lines()
        return df
