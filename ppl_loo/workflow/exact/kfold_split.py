"""``pl.kfold_split_random``, ``pl.kfold_split_stratified``, ``pl.kfold_split_grouped``: R ``loo``'s fold
assignments for K-fold cross-validation (``kfold-helpers.R``), with the number of folds first as in R.

They are :func:`ppl_loo.workflow.exact.loo_kfold.kfold_split`, which :func:`ppl_loo.loo_kfold` uses to build its
folds, and give what R's give: fold ids 1 to K, every fold non-empty; random folds of sizes ``N // K`` or one more;
stratified folds with each stratum's count per fold differing by at most 1 (and the fold sizes too); grouped folds
keeping every group whole, the number of groups per fold differing by at most 1 (exactly K groups: group ``j`` in
sorted order is fold ``j``, as R). The random draws are numpy's (``random_seed``): R's own, from R's random number
generator, cannot be reproduced.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ppl_loo.workflow.exact.loo_kfold import kfold_split

__all__ = ["kfold_split_random", "kfold_split_stratified", "kfold_split_grouped"]


def _checked_K(K, N, caller):
    if isinstance(K, (bool, np.bool_)) or not isinstance(K, (int, np.integer)):
        raise ValueError(f"{caller}: K={K!r}; give the number of folds as a whole number (at least 2).")
    if not 2 <= int(K) <= N:
        raise ValueError(f"{caller}: K={K}; the number of folds must be at least 2 and at most the number of "
                         f"observations ({N}).")
    return int(K)


def _labels(x, caller):
    if x is None:
        raise ValueError(f"{caller} needs x=, one label per observation.")
    arr = np.asarray(x.values if isinstance(x, xr.DataArray) else x).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"{caller}: x is empty; give one label per observation.")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise ValueError(f"{caller}: x has NaN labels; give every observation a label.")
    return arr


def kfold_split_random(K=10, N=None, *, random_seed=None):
    """Random fold ids for ``N`` observations (R ``loo``'s ``kfold_split_random``): ``K`` folds of sizes ``N // K``
    or ``N // K + 1``, in a random order.

    Parameters
    ----------
    K : int
        The number of folds, 2 to ``N`` (default 10).
    N : int
        The number of observations.
    random_seed : int or numpy.random.Generator, optional
        Seeds the order (numpy's generator: R's draws cannot be reproduced).

    Returns
    -------
    ndarray of int (N,)
        The fold (1 to K) of each observation.
    """
    if N is None or isinstance(N, (bool, np.bool_)) or not isinstance(N, (int, np.integer)) or N < 2:
        raise ValueError(f"kfold_split_random: N={N!r}; give the number of observations, a whole number >= 2.")
    K = _checked_K(K, int(N), "kfold_split_random")
    return kfold_split(int(N), K, random_seed=random_seed)


def kfold_split_stratified(K=10, x=None, *, random_seed=None):
    """Stratified fold ids (R ``loo``'s ``kfold_split_stratified``): the observations of each label of ``x``,
    shuffled, dealt to folds 1, 2, ..., K in turn, so each label's count per fold differs by at most 1 (for
    example a binary outcome, balanced across the folds).

    Parameters
    ----------
    K : int
        The number of folds, 2 to ``len(x)`` (default 10).
    x : array
        One label (stratum) per observation.
    random_seed : int or numpy.random.Generator, optional
        Seeds the shuffles.

    Returns
    -------
    ndarray of int (len(x),)
        The fold (1 to K) of each observation.
    """
    labels = _labels(x, "kfold_split_stratified")
    K = _checked_K(K, labels.size, "kfold_split_stratified")
    return kfold_split(labels.size, K, stratify_by=labels, random_seed=random_seed)


def kfold_split_grouped(K=10, x=None, *, random_seed=None):
    """Grouped fold ids (R ``loo``'s ``kfold_split_grouped``): every group of ``x`` whole in one fold, the number of
    groups per fold differing by at most 1 (exactly ``K`` groups: group ``j`` in sorted order is fold ``j``).

    Parameters
    ----------
    K : int
        The number of folds, 2 to the number of groups (default 10).
    x : array
        One group label per observation.
    random_seed : int or numpy.random.Generator, optional
        Seeds the assignment of groups to folds.

    Returns
    -------
    ndarray of int (len(x),)
        The fold (1 to K) of each observation.
    """
    labels = _labels(x, "kfold_split_grouped")
    K = _checked_K(K, labels.size, "kfold_split_grouped")
    n_groups = np.unique(labels).size
    if n_groups < K:
        raise ValueError(f"kfold_split_grouped: K={K} is more than the {n_groups} groups of x (each group stays whole "
                         "in one fold); give K at most the number of groups.")
    return kfold_split(labels.size, K, group_by=labels, random_seed=random_seed)
