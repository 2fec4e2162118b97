"""Hyperparameters of the regularized-horseshoe logistic regression (notes, section 6).

One definition of the names, Paananen et al.'s default values, their checks and the global scale
``p0 / ((D - p0) sqrt(N))`` (Piironen & Vehtari 2017), shared by the JAX model
(:class:`ppl_loo.models.LogisticRegression`) and the data of the Stan program
(:func:`ppl_loo.stan_bridge.programs.horseshoe_data`), so that the two describe the same prior.
"""

from __future__ import annotations

from math import sqrt
from typing import NamedTuple

__all__ = ["HorseshoeHyperparameters"]


class HorseshoeHyperparameters(NamedTuple):
    """The hyperparameters of the regularized horseshoe, with Paananen et al.'s ovarian values.

    Attributes
    ----------
    p0 : float, default 20
        Prior guess of the number of relevant predictors; sets ``scale_global`` when that is not
        given. Must lie in ``(0, D)`` then.
    scale_icept : float, default 5.0
        Prior sd of the intercept.
    slab_scale, slab_df : float, default 2.5, 1.0
        Scale and degrees of freedom of the slab (``caux ~ InvGamma(slab_df / 2, slab_df / 2)``).
    nu_global, nu_local : float, default 1.0, 1.0
        Degrees of freedom of the half-t priors of ``tau`` and of each ``lam_j``.
    scale_global : float, optional
        Scale of the half-t prior of ``tau``; overrides the value from ``p0``.
    """

    p0: float = 20
    scale_icept: float = 5.0
    slab_scale: float = 2.5
    slab_df: float = 1.0
    nu_global: float = 1.0
    nu_local: float = 1.0
    scale_global: float | None = None

    @classmethod
    def from_keywords(cls, who: str, keywords: dict) -> HorseshoeHyperparameters:
        """The hyperparameters from the keyword arguments a caller ``who`` received.

        Raises
        ------
        TypeError
            A keyword is not a field (as for an unexpected keyword argument of ``who``).
        """
        unknown = sorted(set(keywords) - set(cls._fields))
        if unknown:
            raise TypeError(
                f"{who}() got unexpected keyword argument(s) {unknown}; the hyperparameters are "
                f"{list(cls._fields)}."
            )
        return cls(**keywords)

    def check_positive(self, who: str) -> None:
        """Raise ``ValueError`` (prefixed ``who``) unless every scale and degrees of freedom is > 0.

        ``scale_global`` is not checked here (see :meth:`global_scale`).
        """
        for name in ("scale_icept", "slab_scale", "slab_df", "nu_global", "nu_local"):
            value = getattr(self, name)
            if not float(value) > 0:
                raise ValueError(f"{who}: {name} must be > 0, got {value}.")

    def global_scale(self, n: int, d: int, who: str) -> float:
        """``scale_global``, or ``p0 / ((d - p0) sqrt(n))`` when it is not given, checked > 0.

        Parameters
        ----------
        n, d : int
            Number of observations and of predictors.
        who : str
            Prefix of the error messages.

        Raises
        ------
        ValueError
            ``p0`` outside ``(0, d)`` with no ``scale_global``, or ``scale_global <= 0``.
        """
        scale_global = self.scale_global
        if scale_global is None:
            if not 0 < self.p0 < d:
                raise ValueError(
                    f"{who}: p0 = {self.p0} must lie in (0, D = {d}) for the horseshoe; or pass "
                    "scale_global directly."
                )
            scale_global = self.p0 / ((d - self.p0) * sqrt(n))
        if not float(scale_global) > 0:
            raise ValueError(f"{who}: scale_global must be > 0, got {scale_global}.")
        return float(scale_global)
