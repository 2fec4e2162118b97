"""The grouped options of :func:`ppl_loo.loo` and :func:`ppl_loo.loo_subsample` (as BlackJAX groups a sampler's
parameters): the adaptive search's (:class:`SearchOptions`, ``search=``), the second opinions' (:class:`SecondOpinions`,
``second_opinions=``) and where and how the work runs (:class:`ComputeOptions`, ``compute=``).

Each keyword takes an instance, a plain dict of some of its fields (checked: a key of no group, or of another
group, is an error that names it and lists the valid ones), or None (the defaults). :func:`as_options` turns any
of them into the instance the workflow reads.

>>> import ppl_loo as pl
>>> res = pl.loo(data, model, search={"transforms": ["pmm1", "newton"]},  # doctest: +SKIP
...              second_opinions=pl.SecondOpinions(mixture=False), compute={"chunk_size": 1000})
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["SearchOptions", "SecondOpinions", "ComputeOptions", "as_options"]


@dataclass(frozen=True)
class SearchOptions:
    """Options of the adaptive importance-sampling search (``search=`` of :func:`ppl_loo.loo` and
    :func:`ppl_loo.loo_subsample`).

    Parameters
    ----------
    transforms : "all" or sequence of str
        Names from ``"pmm1", "pmm2", "kl", "var", "ll", "mm1", "mm2", "mm3"`` (the papers) and the project's
        extensions: ``"mm_iter"`` (iterated moment matching, 1-4 iterations), ``"newton"`` (Newton-step proposal)
        and the mixtures ``"newton_mix"``, ``"pmm1_mix"``, ``"pmm2_mix"``, ``"mm3_mix"`` (deterministic mixture with
        the draws' own distribution). ``"all"`` (default): :data:`ppl_loo.DEFAULT_TRANSFORMS`, plus the Laplace
        cavity and projective update for draws of a Gaussian approximation.
    hbar : sequence of float, optional
        Step grid; default ``4.0 ** -np.arange(11)`` (the papers' grid, :data:`ppl_loo.DEFAULT_HBAR`).
    adapt : {"auto", "all", "flagged"}
        Which observations the search examines. ``"flagged"``: plain-PSIS k above 0.5, or influence above
        ``influence_threshold``. ``"all"``: every observation (a k-hat below 0.5 is no guarantee either: in the
        ground-truth suite plain PSIS with k = 0.47 was 0.19 nats off on a Poisson model with one latent variable
        per observation). ``"auto"`` (default): with at most 100 observations, those with k above 0.3 or influence
        above ``influence_threshold`` (below 0.3 plain PSIS was within its Monte Carlo error on every observation
        of the ground-truth suite), else the flagged ones. :func:`ppl_loo.loo_subsample` also takes ``"none"``: no
        search (plain PSIS on the subsample).
    influence_threshold : float, optional
        Observations whose log-likelihood has posterior variance above this value are searched even when their
        plain-PSIS k is low: with such a spread the plain importance weights can miss the LOO posterior entirely
        while k-hat looks fine. Default ``log(S / 100)`` (the variance at which log-normal weights would keep an
        effective sample size of 100).
    jacobian : {"auto", "exact", "first_order"}
        Jacobian determinants of the gradient transforms: closed form where the model declares its structure,
        exact autodiff ``log|det|`` for small blocks, else the first-order Eq. 22.
    min_ess : float, optional
        A candidate proposal counts only if the effective sample size ``1 / sum w^2`` of its smoothed weights is
        at least this; default ``min(100, S / 10)``. k-hat alone misses maps that send most draws where the LOO
        posterior has no mass.
    batch_size : int or "auto"
        Observations evaluated together in one vectorized call: the draws are read once per batch, so larger
        batches are faster and use more memory. ``"auto"`` (default) picks up to 8 within a working-memory budget
        of about 1 GB per batch on a CPU, and up to 64 within a quarter of the device's free memory on an
        accelerator (GPU).
    """

    transforms: Any = "all"
    hbar: Any = None
    adapt: str = "auto"
    influence_threshold: float | None = None
    jacobian: str = "auto"
    min_ess: float | None = None
    batch_size: Any = "auto"


@dataclass(frozen=True)
class SecondOpinions:
    """Independent estimates beside the search's (``second_opinions=`` of :func:`ppl_loo.loo`): mixture importance
    sampling, tempered SMC, and the settings of the exact refits that ``refit=`` asks for.

    Parameters
    ----------
    mixture : "auto" or bool
        Mixture importance sampling (:func:`ppl_loo.loo_mixture`; Silva & Zanella 2023): one extra MCMC run of the
        model on the mixture of all LOO posteriors, with the original fit's settings (at least 1,000 warmup
        iterations and draws per chain), about the cost of one fit. ``"auto"`` (default): before the search
        whenever plain PSIS leaves an observation unsettled (the search then runs on what it leaves unsettled and
        corroborates what it settles alone; ``docs/method.md``, section 9); not out of core (``chunk_size``, a
        dask-backed log-likelihood). True: always, before the search (it then also checks every estimate the
        search vouches for); False: never. Its diagnostics are ``res.mixture_info``.
    mixture_options : dict, optional
        Overrides of the mixture run's settings read from the fit: ``chains``, ``draws``, ``warmup``,
        ``target_accept``, ``max_tree_depth``.
    smc : "auto" or bool
        Tempered SMC from the posterior draws to each LOO posterior (:mod:`ppl_loo.workflow.loo.vouch.smc`).
        ``"auto"`` (default): for the observations still doubtful after the mixture run, those the mixture
        estimate vouches for alone, and those that only the search vouches for (two transformations agreeing)
        where plain PSIS's k-hat is above 0.5 and the mixture did not check them (maps of the same draws can miss
        together), in models of at most 100 unconstrained parameters (its moves cost minutes per observation
        beyond; ``res.smc_info`` says when it was skipped); there, where a refit of an observation costs fewer
        gradient evaluations than SMC's cheapest run, those observations are refit instead (exact; SMC runs on what
        a refit leaves unsettled; ``res.smc_info["refits_instead"]``, ``docs/method.md`` section 9); True: SMC on
        every searched observation, whatever the dimension; False: neither. It counts only when the posterior
        draws converged.
    refit_options : dict, optional
        Overrides of the sampler settings of the refits (``refit=``) read from the fit: ``chains``, ``draws``,
        ``warmup``, ``target_accept``, ``max_tree_depth``; ``checkpoint``, a file path where each finished refit
        is kept, so that a rerun after an interruption does not redo it; ``batched`` (default True: PyMC and JAX
        models refit every target in one batched NUTS run; False: the model's own sampler, one refit after the
        other) (:mod:`ppl_loo.workflow.exact.refit`).
    """

    mixture: Any = "auto"
    mixture_options: dict | None = None
    smc: Any = "auto"
    refit_options: dict | None = None


@dataclass(frozen=True)
class ComputeOptions:
    """Where and how the work runs (``compute=`` of :func:`ppl_loo.loo` and :func:`ppl_loo.loo_subsample`); none
    of these changes the numbers, except ``conventions``, which picks whose PSIS plain PSIS-LOO reproduces.

    Parameters
    ----------
    chunk_size : int, optional
        Observations processed at once from a dask-backed ``log_likelihood`` (``xr.open_datatree(path,
        engine="zarr", chunks={})``). Such a log-likelihood is never loaded whole: it is read in whole stored
        chunks and plain PSIS runs chunk by chunk (peak memory that of a chunk, the numbers those of the in-memory
        path), the model is evaluated only on the observations plain PSIS flags, and ``res.log_weights`` stays a
        lazy dask array. None (default): about 512 MB of working memory per chunk; an integer also reads an
        in-memory log-likelihood this way. ``refit=`` needs the log-likelihood in memory (``docs/scale.md``).
        :func:`ppl_loo.loo` only.
    client : distributed.Client, None or False
        Where the adaptive search runs. A ``dask.distributed`` client: its workers, one task per batch of
        ``batch_size`` observations (the model and the draws reach each worker once; a ``pl.StanModel`` as its
        program and data, the worker loading the compiled library from the cache by its key). None (default): the
        session's active client when there is one (``distributed.default_client()``), else this process. False:
        this process. The results are the same wherever it runs (``docs/scale.md``).
    check_log_lik : bool
        With a model and a ``log_likelihood`` group: the stored values must be the model's at the same draws,
        within the precision they were stored with (a CmdStan CSV's ``sig_figs``, relative to each value's
        magnitude; float rounding for PyMC and JAX draws). A larger difference means the draws do not belong to
        the model, its data, or the stored variable is not the log-likelihood, and raises a ``ValueError``
        (:class:`~ppl_loo.workflow.loo.draws.LogLikMismatchError`) naming the observation that differs most. False:
        a warning instead, and the model's values are used (as they always are). Default True.
        :func:`ppl_loo.loo` only.
    conventions : {"arviz", "R"}
        Whose conventions plain PSIS-LOO without a model (``pl.loo(data)``) follows. ``"arviz"`` (default):
        ``arviz_stats.loo``'s (its numbers to 1e-10): the Pareto tail length ``3 sqrt(S / reff)`` rounded down, and
        one relative efficiency for every observation (``reff``, default the posterior's mean ESS over ``S``).
        ``"R"``: R ``loo`` 2.10's (its numbers to 1e-10): the tail length rounded up, and, without ``reff``, one
        relative efficiency per observation from its likelihood draws (:func:`ppl_loo.relative_eff`, as
        ``loo(log_lik, r_eff = relative_eff(exp(log_lik), chain_id))``). With a model only ``"arviz"``.
        :func:`ppl_loo.loo` only.
    """

    chunk_size: int | None = None
    client: Any = None
    check_log_lik: bool = True
    conventions: str = "arviz"


#: each group's keyword and class, in the order of the signature
GROUPS = {"search": SearchOptions, "second_opinions": SecondOpinions, "compute": ComputeOptions}
#: arguments of ``pl.loo`` itself, not of a group
TOP_LEVEL = ("var_name", "k_threshold", "reff", "log_q", "refit", "random_seed", "progressbar")
#: the names these fields had as keywords of ``pl.loo``
RENAMED = {"mixture_kwargs": "mixture_options", "refit_kwargs": "refit_options"}


def fields_of(cls):
    """The field names of an options class, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def as_options(value, cls, keyword, caller="pl.loo", takes=tuple(GROUPS), top_level=TOP_LEVEL):
    """``value`` of the keyword ``keyword`` as an instance of ``cls``: an instance as is, a dict's keys as fields
    (the others at their defaults), None the defaults.

    Raises
    ------
    TypeError
        ``value`` is another type (an instance of another group's class included: the message names its keyword).
    ValueError
        A dict key that is no field of ``cls``: the message names it, lists the valid keys, and names the keyword of
        the group it belongs to where it is another group's field (``takes``: the group keywords ``caller`` has;
        ``top_level``: its own arguments).
    """
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    for other_keyword, other in GROUPS.items():
        if other is not cls and isinstance(value, other):
            raise TypeError(f"{keyword}={value!r}: a {other.__name__} goes to {other_keyword}=, not {keyword}=; "
                            f"{keyword}= takes a pl.{cls.__name__} or a dict of its fields.")
    if not isinstance(value, dict):
        raise TypeError(f"{keyword}={value!r}: give a pl.{cls.__name__}, a dict of some of its fields "
                        f"({', '.join(fields_of(cls))}), or None (the defaults).")
    valid = fields_of(cls)
    for key in value:
        if key in valid:
            continue
        new = RENAMED.get(key, key)
        home = [k for k, other in GROUPS.items() if other is not cls and new in fields_of(other)]
        if new != key:
            where = f"{key!r} is now {new!r}{f' of {home[0]}=' if home else ''}; "
        elif home and home[0] in takes:
            where = f"{key!r} belongs to {home[0]}= (pl.{GROUPS[home[0]].__name__}), not {keyword}=; "
        elif home:
            where = f"{key!r} is an option of pl.loo's {home[0]}=, which {caller} does not take; "
        elif key in top_level:
            where = f"{key!r} is an argument of {caller} itself ({caller}(..., {key}=...)), not of {keyword}=; "
        else:
            where = f"{key!r} is not an option of {keyword}=; "
        raise ValueError(f"{caller}({keyword}={{{key!r}: ...}}): {where}the keys of {keyword}= are "
                         f"{', '.join(valid)}.")
    return cls(**value)
