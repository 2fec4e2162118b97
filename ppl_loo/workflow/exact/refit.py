"""Exact LOO by refitting the observations the engine cannot vouch for (``pl.loo(..., refit=...)``).

This is ``reloo`` of R ``loo`` and ArviZ, done only where needed. For PyMC and JAX models (and Stan programs with
a parameter per observation) all target observations are refit at once, one batched NUTS run over targets x
chains (:func:`ppl_loo.numerics.nuts.batched_nuts`, :func:`batched_refit_density`), warm-started from the
full-data fit (:func:`refit_settings`, :func:`start_draws`, :func:`warm_start`); otherwise (other Stan programs,
``second_opinions={"refit_options": {"batched": False}}``) for each target observation ``i`` the model's own
sampler runs on the posterior without ``i`` (:meth:`PosteriorModel.refit_draws`: ``pm.sample`` for PyMC, Stan's
NUTS on the data without ``i`` for Stan, NumPyro's NUTS for JAX models). Both use the original fit's settings, and

    elpd_i = log p(y_i | y_-i) = log E_{p(theta | y_-i)}[p(y_i | theta)]

is estimated by bridge sampling between the refit's draws and the full-data draws
(:func:`ppl_loo.numerics.bridge.bridge_log_ratio`, Meng & Wong 1996): more accurate than the mean of
``p(y_i | theta)`` over the refit draws alone, which is biased low when ``p(y_i | theta)`` spans
orders of magnitude over them. The Monte Carlo SE comes with it.

Resuming: with ``second_opinions={"refit_options": {"checkpoint": path}}`` each finished refit is written to ``path`` (a
JSON file, written to a temporary name and renamed, so it is never half-written) as soon as it is
done. A rerun of the same ``pl.loo`` call (same draws, log-likelihood, model, settings and
``random_seed``) after an interruption (Ctrl-C, a crash, a time limit) reads it and refits only the
observations not finished yet; each observation's refit has its own seed (from ``random_seed`` and
its place in the list of targets), so the results equal those of an uninterrupted run. A checkpoint
written for other draws or settings is not used (a warning says so) and is replaced.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from ppl_loo.numerics.bridge import bridge_log_ratio, mean_log_ratio
from ppl_loo.numerics.nuts import BatchedTarget, batched_nuts, lanes_per_batch
from ppl_loo.workflow.loo.inputs import RHAT_NOT_MIXED, RHAT_VOUCH, rank_rhat
from ppl_loo.workflow.loo.interrupt import run_interruptible
from ppl_loo.workflow.loo.messages import warn_refit_budget, warn_refits_not_converged

#: ``posterior.attrs["method"]`` of draws from an approximation (no sampler settings to reuse)
APPROXIMATE_METHODS = ("laplace", "qnvb", "pvi", "vi")

__all__ = ["refit_targets", "refit_settings", "run_refits", "check_refit_args", "refit_stage", "refit_converged",
           "warm_start", "batched_run", "start_draws", "fit_step_size", "batched_warmup", "WARM_WARMUP"]


def refit_targets(refit, *, doubtful, flagged, k_final, n):
    """The observations to refit, most doubtful first, and the time budget in seconds (or None).

    ``refit``: ``"doubtful"``, ``"flagged"`` (every observation the engine adapted), a sequence of
    flat observation indices, or a number of seconds (the doubtful observations, worst first, until
    the budget is spent).
    """
    order = np.argsort(-np.where(np.isfinite(k_final), k_final, np.inf), kind="stable")
    if isinstance(refit, str):
        if refit not in ("doubtful", "flagged"):
            raise ValueError(f"refit={refit!r}: use 'doubtful', 'flagged', a list of observation indices, or a "
                             "time budget in seconds (a number).")
        mask = doubtful if refit == "doubtful" else flagged
        return [int(i) for i in order if mask[i]], None
    if isinstance(refit, bool):
        raise ValueError("refit=True is ambiguous: use refit='doubtful' (or 'flagged', indices, or seconds).")
    if isinstance(refit, (int, float, np.integer, np.floating)) and np.ndim(refit) == 0:
        budget = float(refit)
        if not math.isfinite(budget) or budget <= 0:
            raise ValueError(f"refit={refit!r}: a time budget must be a positive number of seconds.")
        return [int(i) for i in order if doubtful[i]], budget
    try:
        idx = np.asarray(refit)
    except Exception:  # noqa: BLE001
        idx = None
    if idx is None or idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise ValueError(f"refit={refit!r}: pass 'doubtful', 'flagged', a 1-D sequence of integer observation "
                         "indices (flat, as in res.elpd_i.values.ravel()), or a time budget in seconds.")
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise ValueError(f"refit: observation indices {bad.tolist()} are out of range (0 to {n - 1}).")
    return [int(i) for i in dict.fromkeys(idx.tolist())], None


#: warmup iterations of a warm-started refit (``adapt="warm"``): dual averaging of the step size alone, from the
#: full-data fit's step size, with the full-data posterior's variances as the mass matrix (docs/method.md)
WARM_WARMUP = 150


def refit_settings(data, overrides=None, warm=True):
    """The original fit's sampler settings (chains, draws, warmup, target acceptance, tree depth, step size).

    Read from the posterior group (and its attrs, as NumPyro through ``ppl_loo.sampling``, CmdStan
    CSV files and ``pm.sample`` record them) and the sample stats (the adapted step size); ``overrides``
    (``refit_options``) wins; ``batched`` (default True): all refits in one batched NUTS run where the model
    allows it (:func:`batched_refit_density`). ``adapt`` (batched refits): ``"warm"`` (default for MCMC draws;
    ``warm=False`` turns it off): each chain starts at a full-data draw resampled towards
    the LOO posterior, and its warmup (``warmup_warm``) is :data:`WARM_WARMUP` iterations (at most the fit's,
    unless ``refit_options`` gives ``warmup``) of step-size adaptation alone, with the full-data posterior's
    variances as the mass matrix (the model's own samplers keep ``warmup``); ``"window"``: the fit's warmup of
    BlackJAX's window adaptation (step size and mass matrix). Draws of an approximation (``pl.laplace``,
    ``pl.qnvb``, ``pl.pvi``) carry no sampler settings: the refits then run NUTS with 4 chains of 1,000
    window-adapted warmup and 1,000 draws.
    """
    post = data["posterior"]
    attrs = dict(post.attrs)
    chains, draws = int(post.sizes["chain"]), int(post.sizes["draw"])
    approx = attrs.get("method") in APPROXIMATE_METHODS
    if approx:
        chains, draws = 4, 1000
        attrs = {"num_warmup": 1000}
    warmup = attrs.get("num_warmup", attrs.get("tuning_steps", draws))
    target = attrs.get("target_accept", attrs.get("adapt_delta", 0.8))
    depth = attrs.get("max_tree_depth", attrs.get("max_depth", 10))
    out = {"chains": chains, "draws": draws, "warmup": int(np.asarray(warmup).ravel()[0]),
           "target_accept": float(np.asarray(target).ravel()[0]), "max_tree_depth": int(np.asarray(depth).ravel()[0]),
           "batched": True, "adapt": "window" if approx or not warm else "warm",
           "step_size": None if approx else fit_step_size(data)}
    overrides = dict(overrides or {})
    _apply_overrides(out, overrides)
    # the batched refits' warmup when warm-started; the model's own samplers (batched=False, Stan) start from their
    # own initial values and keep the fit's warmup
    out["warmup_warm"] = out["warmup"] if "warmup" in overrides else min(out["warmup"], WARM_WARMUP)
    checkpoint = overrides.get("checkpoint")
    if checkpoint is not None and not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"refit_options: checkpoint={checkpoint!r} must be a file path (str or pathlib.Path).")
    if out["chains"] < 2 or out["draws"] < 10:
        raise ValueError(f"refit needs at least 2 chains of 10 draws; the settings are {out} (refit_options "
                         "overrides them).")
    return out


def _apply_overrides(out, overrides):
    """``refit_options`` into the settings ``out``, each checked."""
    allowed = (set(out) - {"step_size"}) | {"checkpoint"}
    for key, value in overrides.items():
        if key == "checkpoint":
            continue
        if key == "batched" and not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"refit_options: batched={value!r} must be True (every refit in one batched NUTS run "
                             "where the model allows it) or False (one refit after the other, by the model's own "
                             "sampler).")
        if key == "adapt" and value not in ("warm", "window"):
            raise ValueError(f"refit_options: adapt={value!r} must be 'warm' (the batched refits start at the "
                             "full-data posterior and adapt only their step size) or 'window' (Stan's windowed "
                             "adaptation of step size and mass matrix over the full warmup).")
        if key not in allowed:
            raise ValueError(f"refit_options: unknown setting {key!r}; allowed: {sorted(allowed)}.")
        out[key] = type(out[key])(value)


def fit_step_size(data):
    """The full-data fit's adapted NUTS step size (the median over chains of the last draw's ``step_size`` in
    ``sample_stats``), or None where it is not recorded or not a positive number."""
    stats = data.get("sample_stats") if hasattr(data, "get") else None
    name = next((k for k in ("step_size", "stepsize") if stats is not None and k in stats), None)
    if name is None:
        return None
    values = np.asarray(stats[name].values, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] == 0:
        return None
    eps = float(np.median(values[:, -1]))
    return eps if math.isfinite(eps) and eps > 0 else None


def run_refits(model, theta, ll, targets, settings, *, random_seed, budget_s=None, progressbar=True,
               posterior_draws=True, checkpoint=None, kept=None):
    """Refit each target observation; return ``{i: record}`` and the targets skipped for the budget.

    ``theta`` ``(S, d)`` and ``ll`` ``(S, n)`` are the full-data draws (chain-major) and their
    log-likelihood; the bridge pairs the refit's ``log p(y_i | theta)`` with ``ll[:, i]``. For draws
    of an approximation (``posterior_draws=False``) there are no full-data posterior draws to bridge
    with: ``elpd_i`` is the mean of ``p(y_i | theta)`` over the refit's draws. ``checkpoint``: a file
    that keeps the finished refits (see the module docstring); those found there are not redone. ``kept``: a
    :class:`~ppl_loo.workflow.loo.kept.KeptDraws` that gets each new refit's draws (a checkpoint keeps none).
    """
    if random_seed is None:
        raise ValueError("run_refits: pass the seed of the refits (pl.loo derives one from the draws for "
                         "random_seed=None).")
    ss = np.random.SeedSequence(int(random_seed) if np.ndim(random_seed) == 0 else random_seed)
    seeds = ss.generate_state(len(targets) + 1, dtype=np.uint32)
    S = theta.shape[0]
    C = settings["chains"]
    full_chains = C if S % C == 0 else 1
    records, skipped = {}, []
    fingerprint = _fingerprint(model, theta, ll, settings, random_seed, posterior_draws) if checkpoint else None
    done = _read_checkpoint(checkpoint, fingerprint) if checkpoint else {}
    t0 = time.perf_counter()
    n_new = 0
    bar = tqdm(total=len(targets), desc="refit", disable=not progressbar, unit="obs")
    density = batched_refit_density(model) if settings.get("batched", True) else None
    if density is not None:
        try:
            skipped = _run_batched(model, density, theta, ll, targets, seeds, settings, records, done, budget_s,
                                   posterior_draws, full_chains, checkpoint, fingerprint, bar, kept)
        finally:
            bar.close()
        return records, skipped
    for j, i in enumerate(targets):
        if i in done:  # finished before an interruption: not redone
            records[i] = done[i]
            bar.update(1)
            continue
        if budget_s is not None and n_new > 0 and time.perf_counter() - t0 >= budget_s:
            skipped = [t for t in targets[j:] if t not in done]
            break
        n_new += 1
        rng = np.random.default_rng(int(seeds[j]))
        init = theta[rng.choice(S, size=C, replace=False)]
        t1 = time.perf_counter()
        call = functools.partial(model.refit_draws, i, chains=C, warmup=settings["warmup"], draws=settings["draws"],
                                 random_seed=int(seeds[j]), init=init, target_accept=settings["target_accept"],
                                 max_tree_depth=settings["max_tree_depth"])
        # NumPyro's refits (JAX models) in a worker thread: Ctrl-C stops the run at once although the sampler
        # is in XLA (that refit is abandoned; the finished ones are in the checkpoint). Stan's sampler crashes
        # outside the main thread and pm.sample installs signal handlers: those run here, and Ctrl-C is
        # seen when the current refit returns.
        draws, info = run_interruptible(call) if getattr(model, "kind", None) == "JAX" else call()
        records[i] = {**_refit_record(model, i, draws, ll, posterior_draws, full_chains),
                      "seconds": time.perf_counter() - t1, **info, **_as_run(settings, adapt="model's own")}
        if kept is not None:
            kept.add_refit(i, draws)
        if checkpoint:
            done[i] = records[i]
            _write_checkpoint(checkpoint, fingerprint, done)
        bar.update(1)
    bar.close()
    return records, skipped


def _as_run(settings, adapt=None):
    """The settings a refit ran with, for its record: chains, warmup, draws and the adaptation (``adapt``: the
    model's own sampler's)."""
    adapt = adapt or settings.get("adapt", "window")
    return {"chains": int(settings["chains"]), "warmup": int(batched_warmup(settings) if adapt in ("warm", "window")
                                                             else settings["warmup"]),
            "draws": int(settings["draws"]), "adapt": adapt}


def batched_warmup(settings):
    """The warmup iterations of a batched run with ``settings``: ``warmup_warm`` when warm-started."""
    return settings.get("warmup_warm", settings["warmup"]) if settings.get("adapt") == "warm" else settings["warmup"]


def _refit_record(model, i, draws, ll, posterior_draws, full_chains):
    """``elpd_i`` by bridge sampling between one refit's draws ``(chains, draws, d)`` and the full-data draws
    (the mean over the refit's draws for draws of an approximation), its MCSE, and the refit's R-hats."""
    d = draws.shape[-1]
    ll_i = np.asarray(model.log_lik(draws.reshape(-1, d), obs=[i]))[:, 0].reshape(draws.shape[0], -1)
    if not np.all(np.isfinite(ll_i) | np.isneginf(ll_i)):
        raise ValueError(f"refit of observation {i}: log p(y_{i} | theta) is NaN at some refit draws.")
    est = bridge_log_ratio(ll_i, ll[:, i].reshape(full_chains, -1)) if posterior_draws else mean_log_ratio(ll_i)
    rhat = float(rank_rhat(ll_i[:, :, None])[0])
    rhat_d = rank_rhat(np.asarray(draws, dtype=float))
    rhat_max = float(np.nanmax(rhat_d)) if np.any(np.isfinite(rhat_d)) else float("nan")
    return {"elpd_i": est.log_ratio, "mcse": est.mcse, "rhat_loglik": rhat, "rhat_max": rhat_max}


def batched_refit_density(model):
    """``log_density(theta, i)`` of the posterior without observation ``i`` for the batched refits, or None where
    they run one after the other with the model's own sampler.

    Returns a :class:`~ppl_loo.numerics.nuts.BatchedTarget`. Batched: models whose log density is a JAX
    function (PyMC through PyTensor's JAX backend, JAX models) with a ``loo_logp``; the model may give its own
    through ``Model.batched_refit_density()`` (the horseshoe logistic regression: its non-centered
    parameterization; a Stan program whose parameters are indexed by observation: its LOO density through the
    bridge's batched evaluations; None: not batched). Not batched: the other Stan programs (Stan's own NUTS on
    the data without the observation is faster than NUTS on the bridge's callbacks, ``docs/method.md``).
    """
    own = getattr(model, "batched_refit_density", None)
    if own is not None:
        return own()
    if getattr(model, "kind", None) not in ("JAX", "PyMC") or not getattr(model, "is_jax", False):
        return None
    return None if getattr(model, "loo_logp", None) is None else BatchedTarget(model.loo_logp)


#: targets per batched refit run on a CPU (its lanes run in threads, one per core: the batch sets how often the
#: checkpoint is written), and under ``vmap`` (an accelerator, or a density evaluated on the host)
CPU_BATCH, ACCELERATOR_BATCH = 8, 128


def _run_batched(model, density, theta, ll, targets, seeds, settings, records, done, budget_s, posterior_draws,
                 full_chains, checkpoint, fingerprint, bar, kept=None):
    """The refits of ``targets`` in batched NUTS runs (:func:`ppl_loo.numerics.nuts.batched_nuts`) of
    equal-sized batches (one compilation; the last batch is padded with its last target, whose copy is dropped;
    with a time budget the first batch is the worst target alone, and the budget is checked between batches).
    Each chain starts at a full-data draw (:func:`start_draws`: resampled with the LOO weights when warm-started),
    with the full-data posterior's variances as the inverse mass matrix; the compiled program serves every batch.
    Fills ``records`` (and ``done`` / the checkpoint); returns the targets skipped for the budget."""
    C = settings["chains"]
    position = {i: j for j, i in enumerate(targets)}
    todo = [i for i in targets if i not in done]
    for i in targets:
        if i in done:
            records[i] = done[i]
            bar.update(1)
    vectorized = density.vectorize if density.vectorize is not None else jax.default_backend() != "cpu"
    cap = ACCELERATOR_BATCH if vectorized else CPU_BATCH
    size = max(1, min(len(todo), cap, lanes_per_batch(C, settings["draws"], theta.shape[1])))
    u_draws, imm, to_theta = warm_start(density, theta)
    resample = posterior_draws and settings.get("adapt") == "warm"
    how = ("warm-started, step size adapted" if settings.get("adapt") == "warm" else "window adaptation")
    programs = {}  # the compiled lane, shared by the batches
    # with a time budget the first batch is the worst target alone (the budget is checked between batches)
    first = 1 if budget_s is not None else size
    batches = [todo[:first]] + [todo[k:k + size] for k in range(first, len(todo), size)] if todo else []
    t0 = time.perf_counter()
    for b_no, batch in enumerate(batches):
        if budget_s is not None and b_no > 0 and time.perf_counter() - t0 >= budget_s:
            return [i for rest in batches[b_no:] for i in rest]
        width = first if b_no == 0 else size
        padded = batch + [batch[-1]] * (width - len(batch))
        t1 = time.perf_counter()
        draws, div, eps = batched_run(model, density, u_draws, padded, [int(seeds[position[i]]) for i in padded],
                                      settings, imm, ll_cols=ll[:, padded] if resample else None, programs=programs)
        seconds = (time.perf_counter() - t1) / len(batch)
        for b, i in enumerate(batch):
            drawn = np.asarray(to_theta(draws[b].reshape(-1, draws.shape[-1])), dtype=np.float64)
            drawn = drawn.reshape(draws[b].shape)
            records[i] = {**_refit_record(model, i, drawn, ll, posterior_draws, full_chains), "seconds": seconds,
                          "sampler": f"BlackJAX NUTS, {how}, one batched run of {len(batch)} refit"
                                     f"{'s' if len(batch) != 1 else ''}",
                          "divergences": int(div[b].sum()), "step_size": float(np.mean(eps[b])), **_as_run(settings)}
            if kept is not None:
                kept.add_refit(i, drawn)
            if checkpoint:
                done[i] = records[i]
            bar.update(1)
        if checkpoint:
            _write_checkpoint(checkpoint, fingerprint, done)
    return []


def start_draws(rng, S, C, ll_i=None):
    """Which ``C`` of the ``S`` full-data draws start a refit's chains: distinct draws, uniformly, or (``ll_i``, the
    draws' ``log p(y_i | theta)``) with probabilities proportional to the importance weights ``1 / p(y_i | theta)``
    of the LOO posterior (where fewer than ``C`` draws carry weight, the others uniformly), so that the chains start
    where it has its mass."""
    if ll_i is None:
        return rng.choice(S, size=C, replace=False)
    logw = -np.asarray(ll_i, dtype=np.float64)
    w = np.exp(logw - np.max(logw))
    # a floor, so that C distinct draws can be had where fewer carry weight (the rest then uniformly)
    w = np.maximum(np.where(np.isfinite(w), w, 0.0), 1e-290)
    return rng.choice(S, size=C, replace=False, p=w / w.sum())


def warm_start(density, theta):
    """``(u_draws, inverse_mass_matrix, to_theta)``: the full-data draws ``theta`` ``(S, d)`` in the sampler's
    coordinates of ``density`` (a :class:`~ppl_loo.numerics.nuts.BatchedTarget`), their variances as the
    starting inverse mass matrix (1 where a variance is 0 or not finite), and the batched map of ``(M, d)`` draws
    back to the model's ``theta``; shared by the batched refits and ``pl.loo_kfold``'s fold fits."""
    to_u = jax.jit(jax.vmap(density.from_model)) if density.from_model is not None else np.asarray
    to_theta = jax.jit(jax.vmap(density.to_model)) if density.to_model is not None else np.asarray
    u_draws = np.asarray(to_u(np.asarray(theta, dtype=np.float64)), dtype=np.float64)  # the sampler's coordinates
    imm = np.var(u_draws, axis=0)
    imm = np.where(np.isfinite(imm) & (imm > 0), imm, 1.0)
    return u_draws, imm, to_theta


def batched_run(model, density, u_draws, obs, seeds, settings, imm, ll_cols=None, programs=None):
    """One :func:`~ppl_loo.numerics.nuts.batched_nuts` run of ``density`` on the targets ``obs`` (one seed
    per target) with the refit ``settings``, interruptible by Ctrl-C
    (:func:`~ppl_loo.workflow.loo.interrupt.run_interruptible`): ``(draws, diverging, step_sizes)``. Each target's
    chains start at :func:`start_draws` of the full-data draws ``u_draws`` (in the sampler's coordinates) from its
    seed's generator, weighted by its column of ``ll_cols`` ``(S, B)`` where given. ``programs``: the compiled
    program, kept across the batches of one call (``batched_nuts``' ``programs``)."""
    S, C = u_draws.shape[0], settings["chains"]
    inits = np.stack([u_draws[start_draws(np.random.default_rng(int(seed)), S, C,
                                          None if ll_cols is None else ll_cols[:, b])] for b, seed in enumerate(seeds)])
    warm = settings.get("adapt") == "warm"
    stop = _StopFlag(getattr(model, "cancel", None))
    call = functools.partial(batched_nuts, density.log_density, inits, np.asarray(obs),
                             num_warmup=batched_warmup(settings),
                             num_samples=settings["draws"], random_seeds=[int(s) for s in seeds],
                             target_accept=settings["target_accept"], max_tree_depth=settings["max_tree_depth"],
                             inverse_mass_matrix=imm, step_size=settings.get("step_size"),
                             adaptation="step_size" if warm else "window", should_stop=stop.requested,
                             vectorize=density.vectorize, programs=programs)
    return run_interruptible(call, stop)


class _StopFlag:
    """Ctrl-C during a batched run (:func:`~ppl_loo.workflow.loo.interrupt.run_interruptible` calls it with
    ``True``): the lanes not started yet are skipped, and a model whose host callbacks stop at Ctrl-C (a Stan
    program: its ``Model.cancel``) is told to."""

    def __init__(self, cancel=None):
        self._cancel = cancel
        self._requested = False

    def __call__(self, flag):
        self._requested = bool(flag)
        if self._cancel is not None:
            self._cancel(bool(flag))

    def requested(self):
        return self._requested


def _fingerprint(model, theta, ll, settings, random_seed, posterior_draws) -> str:
    """What a checkpoint's refits depend on: the draws, their log-likelihood, the model, the settings and
    the seed."""
    h = hashlib.sha256()
    for arr in (theta, ll):
        a = np.ascontiguousarray(np.asarray(arr, dtype=np.float64))
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    code = getattr(model, "code", None)
    parts = [type(model).__module__, type(model).__qualname__, code if isinstance(code, str) else "",
             json.dumps(settings, sort_keys=True), repr(np.asarray(random_seed).tolist()), str(bool(posterior_draws))]
    h.update("\0".join(parts).encode())
    return h.hexdigest()


def _jsonable(value):
    if isinstance(value, (np.generic, np.ndarray)):
        return np.asarray(value).tolist()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def _read_checkpoint(path, fingerprint) -> dict:
    path = Path(path)
    if not path.exists():
        return {}
    try:
        content = json.loads(path.read_text())
        if content.get("fingerprint") != fingerprint:
            warnings.warn(f"refit checkpoint {path}: it holds refits of other draws, model or settings, so it is not "
                          "used; it is replaced as this run's refits finish (give another checkpoint path to keep "
                          "it).", UserWarning, stacklevel=4)
            return {}
        return {int(i): rec for i, rec in content["records"].items()}
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        raise ValueError(f"refit checkpoint {path} is not a checkpoint written by pl.loo ({exc}): delete it or "
                         "give another path in refit_options={'checkpoint': ...}.") from exc


def _write_checkpoint(path, fingerprint, done) -> None:
    """Write to a temporary file next to ``path`` and rename it: the checkpoint is never half-written."""
    path = Path(path)
    text = json.dumps({"fingerprint": fingerprint, "records": {str(i): _jsonable(r) for i, r in done.items()}})
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_refit_args(refit, refit_kwargs, data, n):
    """Bad refit arguments fail before the search, not after it."""
    if refit is None:
        return
    refit_targets(refit, doubtful=np.zeros(n, bool), flagged=np.zeros(n, bool), k_final=np.zeros(n), n=n)
    refit_settings(data, refit_kwargs)


def refit_converged(rec):
    """A refit is vouched for when the draws of its estimate converged, as the main fit's are judged: the R-hat of
    ``log p(y_i | theta)`` at most :data:`~ppl_loo.workflow.loo.inputs.RHAT_VOUCH`, and its parameters mixed (largest
    R-hat at most :data:`~ppl_loo.workflow.loo.inputs.RHAT_NOT_MIXED`)."""
    return bool(rec["rhat_loglik"] <= RHAT_VOUCH and rec.get("rhat_max", 1.0) <= RHAT_NOT_MIXED)


def refit_stage(model, data, draws, refit, refit_kwargs, random_seed, progressbar, *, doubtful, flagged, k_final,
                kept=None, warn=True):
    """Run the requested refits (``refit=``: ``doubtful``, ``flagged`` or indices, :func:`refit_targets`) and return
    their records ``{i: record}`` (``res.refit_info``; the verdict puts their exact ``elpd_i`` in place,
    :func:`ppl_loo.workflow.loo.verdict.verdict`); their draws go to ``kept`` (a
    :class:`~ppl_loo.workflow.loo.kept.KeptDraws`). ``warn``: warn of refits that did not converge (they stay
    doubtful)."""
    if refit is None:
        return {}
    targets, budget = refit_targets(refit, doubtful=doubtful, flagged=flagged, k_final=k_final, n=draws.ll.shape[1])
    if not targets:
        return {}
    records, skipped = run_refits(model, draws.theta, draws.ll, targets, refit_settings(data, refit_kwargs),
                                  random_seed=random_seed, budget_s=budget, progressbar=progressbar,
                                  posterior_draws=not draws.approx,
                                  checkpoint=dict(refit_kwargs or {}).get("checkpoint"), kept=kept)
    bad = [i for i, r in records.items() if not refit_converged(r)]
    if bad and warn:
        worst = max(float(np.nan_to_num(records[i][key], nan=np.inf)) for i in bad
                    for key in ("rhat_loglik", "rhat_max"))
        warn_refits_not_converged(bad, worst)
    if skipped:
        warn_refit_budget(skipped)
    return records
