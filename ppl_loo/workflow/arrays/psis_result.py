"""``PsisResult``: the importance weights of ``pl.psis``, ``pl.sis`` and ``pl.tis`` (R ``loo``'s ``psis`` object)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PsisResult"]


@dataclass(frozen=True, repr=False)
class PsisResult:
    """Importance weights of ``S`` draws for ``n`` columns of log ratios, as R ``loo``'s ``psis`` / ``sis`` / ``tis``
    objects.

    Attributes
    ----------
    log_weights : numpy.ndarray, shape (S, n)
        Normalized log weights (each column's weights sum to 1): R's ``weights(x)``.
    pareto_k : numpy.ndarray, shape (n,)
        The Pareto k-hat of each column's ratios (PSIS); R reports 0 for ``sis`` and ``tis``, and so does this.
    tail_len : numpy.ndarray or None, shape (n,)
        The Pareto tail length of each column (PSIS; None for ``sis`` and ``tis``).
    r_eff : numpy.ndarray, shape (n,)
        The relative efficiency of each column's draws.
    n_eff : numpy.ndarray, shape (n,)
        The effective sample size of the weights, ``r_eff / sum_s w_s^2`` (R's ``psis_n_eff_values``).
    norm_const_log : numpy.ndarray, shape (n,)
        ``log sum_s`` of the unnormalized weights (on the scale of the raw ratios).
    method : str
        ``"psis"``, ``"sis"`` or ``"tis"``.
    """

    log_weights: np.ndarray
    pareto_k: np.ndarray
    tail_len: np.ndarray | None
    r_eff: np.ndarray
    n_eff: np.ndarray
    norm_const_log: np.ndarray
    method: str

    def weights(self, log=True, normalize=True):
        """The weights ``(S, n)``, as R's ``weights.importance_sampling``.

        Parameters
        ----------
        log : bool, default True
            Log weights (else the weights).
        normalize : bool, default True
            Each column summing to 1; else R's unnormalized weights (the smoothed raw ratios: unchanged below the
            Pareto tail).

        Returns
        -------
        numpy.ndarray
        """
        out = self.log_weights if normalize else self.log_weights + self.norm_const_log[None, :]
        return out if log else np.exp(out)

    @property
    def shape(self):
        """``(S, n)``: draws by columns (R's ``dim``)."""
        return self.log_weights.shape

    def __repr__(self):
        """A summary: the method, the dimensions and the k-hats."""
        S, n = self.shape
        head = f"PsisResult({self.method}: {S} draws x {n} columns"
        if self.method != "psis":
            return head + ")"
        k = self.pareto_k
        return head + f", k-hat max {np.max(k):.3f}, {int(np.sum(k > 0.7))} above 0.7)"
