"""Array-level checks of model data (used by the closed-form models and the Stan programs' data)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_binary_data"]


def check_binary_data(X, y, name: str = "LogisticRegression"):
    """Validate a design matrix ``(n, p)`` and binary labels ``(n,)``; return float64 copies."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"{name}: X must be a 2-D array (n, p), got shape {X.shape}.")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"{name}: y must be 1-D with one label per row of X ({X.shape[0]}), got shape "
            f"{y.shape}."
        )
    if not np.isfinite(X).all():
        raise ValueError(
            f"{name}: X has {int((~np.isfinite(X)).sum())} non-finite entries; impute or drop them "
            "(ppl_loo.datasets.load_ovarian sets NaN to 0 after standardizing)."
        )
    yf = np.asarray(y, dtype=np.float64)
    if not np.isin(yf, (0.0, 1.0)).all():
        raise ValueError(f"{name}: y must contain only 0 and 1, got values {np.unique(yf)[:10]}.")
    return X, yf
