"""The adaptive search stage of ``pl.loo``: the compiled search over the observations the earlier stages left
unsettled, in batches, and the table of every candidate's diagnostics (``res.candidates``); what the search's
results mean for each observation is the verdict's (:func:`ppl_loo.workflow.loo.verdict.search_decision`;
``docs/method.md``, sections 4 and 5)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ppl_loo.numerics.glm_lines import line_bytes
from ppl_loo.numerics.loo import TRANSFORMS, EngineConfig, EngineData
from ppl_loo.numerics.loo.config import transform_group
from ppl_loo.numerics.loo.memory import device_free_bytes, machine_bytes
from ppl_loo.numerics.loo.plan import left_out_message, search_plan
from ppl_loo.workflow.loo.distributed import resolve_client, run_search_distributed
from ppl_loo.workflow.loo.engine import compiled_engine
from ppl_loo.workflow.loo.interrupt import run_interruptible

__all__ = ["Candidates", "check_transforms", "auto_batch_size", "run_search", "quick_config", "widen", "search_on_host",
           "QUICK_TRANSFORMS", "CPU_MAX_BATCH", "ACCELERATOR_MAX_BATCH"]

#: the transformations a model without a declared structure tries first: moment matching and the Newton step, two
#: groups built independently (so that they can corroborate each other), at about a sixth of the cost of every
#: transformation (the gradient flows and the defensive mixtures evaluate the model's gradient at each step)
QUICK_TRANSFORMS = ("pmm1", "pmm2", "mm1", "mm2", "mm_iter", "newton")
#: what a candidate the search did not build shows in the per-candidate results (:func:`widen`)
_NOT_BUILT = {"k": np.inf, "k_w": np.inf, "elpd": np.nan, "usable": False, "n_noninvertible": 0, "mcse": np.nan,
              "ess": 0.0, "max_log_ratio": 0.0, "identity_ok": True, "log_mean_ratio": np.nan,
              "se_log_mean_ratio": np.nan, "elpd_chains": np.nan, "se": np.nan, "dev": np.nan, "checks_ok": False,
              "tv": np.nan}

#: per-candidate diagnostics kept in ``res.candidates`` besides k, k of the weights, elpd and the ratio check
CANDIDATE_FIELDS = ("log_mean_ratio", "se_log_mean_ratio", "mcse", "se", "ess", "usable", "checks_ok", "dev", "tv")


@dataclass
class Candidates:
    """Every candidate's k-hats, elpd and checks per observation (``res.candidates``), and the chosen
    candidate's smoothed log weights per searched observation (for :func:`ppl_loo.loo_expectations`)."""

    labels: list
    table: dict
    best: np.ndarray
    lw: np.ndarray

    @classmethod
    def empty(cls, labels, n, n_chains, n_searched, S):
        shape = (n, len(labels))
        table = {key: np.full(shape, np.nan) for key in ("k", "k_weights", "elpd", "max_log_ratio", *CANDIDATE_FIELDS)}
        table["elpd_chains"] = np.full(shape + (max(n_chains, 1),), np.nan)
        return cls(labels, table, np.zeros(n_searched, int), np.zeros((n_searched, 2 * S)))

    def record(self, i, j, r, approx):
        t = self.table
        t["k"][i], t["elpd"][i], t["k_weights"][i] = r["k"], r["elpd"], r["k_w"]
        for key in (*CANDIDATE_FIELDS, "elpd_chains"):
            t[key][i] = r[key]
        if not approx:
            t["max_log_ratio"][i] = r["max_log_ratio"]
        self.best[j], self.lw[j] = int(r["best"]), r["lw"]

    def as_dict(self):
        return {"labels": self.labels, **self.table}


def search_on_host(model) -> bool:
    """Whether the search evaluates ``model`` through host callbacks (a Stan program: the bridge, at the cost per
    gradient of Stan's own NUTS), so that it pays per evaluation rather than for its compilation; a JAX model's
    search evaluates its candidates vectorized in the compiled program."""
    return getattr(model, "kind", None) == "Stan"


def quick_config(cfg: EngineConfig):
    """``cfg`` with only its :data:`QUICK_TRANSFORMS`, or None where those are all of its transformations or do not
    span two independently built groups (nothing could corroborate)."""
    quick = tuple(t for t in cfg.transforms if t in QUICK_TRANSFORMS)
    if len(quick) == len(cfg.transforms) or len({transform_group(t) for t in quick}) < 2:
        return None
    return cfg._replace(transforms=quick)


def widen(result, sub_labels, labels):
    """One observation's search result over the candidates ``sub_labels`` as a result over ``labels`` (a superset):
    the candidates not built are not usable and pass no check."""
    pos = np.asarray([labels.index(label) for label in sub_labels], dtype=int)
    out = dict(result)
    for key, value in _NOT_BUILT.items():
        a = np.asarray(result[key])
        full = np.full((len(labels),) + a.shape[1:], value, dtype=a.dtype)
        full[pos] = a
        out[key] = full
    out["best"] = np.asarray(pos[int(result["best"])])
    return out


def check_transforms(transforms, default):
    """The transformation names of ``transforms`` (``"all"`` gives ``default``), validated."""
    if isinstance(transforms, str):
        if transforms == "all":
            return list(default)
        transforms = (transforms,)
    names = list(transforms)
    unknown = [t for t in names if t not in TRANSFORMS]
    if unknown or not names:
        raise ValueError(
            f"unknown transformation(s) {unknown or names}: choose from {sorted(TRANSFORMS)} or 'all'."
        )
    return names


#: ``batch_size="auto"``: at most this many observations per call on a CPU (within ~1 GB, an eighth of the machine's
#: memory at most), and on an accelerator (within a quarter of its free memory)
CPU_MAX_BATCH, ACCELERATOR_MAX_BATCH = 8, 64


def auto_batch_size(batch_size, S, d, n, n_flagged, structured=True, n_steps=11, per_obs_bytes=None):
    """``batch_size="auto"``: on a CPU up to :data:`CPU_MAX_BATCH` observations per vectorized call within ~1 GB of
    temporaries (at most an eighth of the machine's memory); on an accelerator up to :data:`ACCELERATOR_MAX_BATCH`
    within a quarter of the device's free memory (:func:`~ppl_loo.numerics.loo.memory.device_free_bytes`).

    One observation's search holds a few ``(S, d)`` float64 arrays and the temporaries of one line
    evaluation when the model evaluates lines through its structure (closed-form models, PyMC GLMs):
    ``(T, S, n)`` for small problems, blocks of rows above
    :data:`~ppl_loo.numerics.glm_lines.LINE_BLOCK_BYTES` (:func:`~ppl_loo.numerics.glm_lines.line_bytes`). A model
    evaluated through its full log density works through its per-draw Jacobians, gradients and lines in
    blocks of draws; ``per_obs_bytes`` is then the planned memory of one observation's search
    (:func:`ppl_loo.numerics.loo.plan.search_plan`; without it, a bound from the shapes alone).
    """
    if batch_size != "auto":
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer or 'auto'; got {batch_size!r}.")
        return int(batch_size)
    if structured:
        per_obs = 8.0 * S * (8 * d + 4) + 1.5 * line_bytes(S, n)  # bytes, generous
    elif per_obs_bytes is not None:
        per_obs = float(per_obs_bytes)
    else:
        per_obs = 8.0 * S * (60 * n_steps * n + 4 * d * d + 8 * d)
    free = device_free_bytes()
    if free is None:
        budget, cap = min(2**30, machine_bytes() // 8), CPU_MAX_BATCH
    else:
        budget, cap = free // 4, ACCELERATOR_MAX_BATCH
    return int(max(1, min(cap, n_flagged, budget // per_obs)))


def run_search(model, draws, cfg: EngineConfig, obs_idx, batch_size, progressbar, client=False):
    """The compiled search (:func:`ppl_loo.numerics.loo.build_engine`) on observations ``obs_idx``:
    one dict of :class:`~ppl_loo.numerics.loo.ObsResult` arrays per observation.

    ``client``: a ``dask.distributed`` client, None (the active one, if any) or False (this process);
    on a client the batches run on its workers (:mod:`ppl_loo.workflow.loo.distributed`), with the
    same results.

    An exception raised in host code called from JAX (the Stan bridge) is re-raised as itself. The
    search runs in a worker thread (:func:`~ppl_loo.workflow.loo.interrupt.run_interruptible`): Ctrl-C
    stops it within a second, also for a Stan model whose batch is in native code.
    """
    S, d = draws.theta.shape
    theta = jnp.asarray(draws.theta)
    plan = search_plan(model, cfg, S, not draws.approx) if len(obs_idx) and model.is_jax else None
    if plan is not None and plan.left_out:  # said before the search starts
        warnings.warn(left_out_message(plan, d, S), UserWarning, stacklevel=3)
    batch_size = auto_batch_size(batch_size, S, d, draws.ll.shape[1], len(obs_idx),
                                 structured=model.structure is not None, n_steps=len(cfg.hbar),
                                 per_obs_bytes=None if plan is None else plan.per_obs_bytes)
    client = resolve_client(client)
    if client is not None and len(obs_idx):
        return run_search_distributed(model, draws, cfg, obs_idx, batch_size, progressbar, client)
    _, _, mapped, prepare = compiled_engine(model, cfg, not draws.approx, batch_size, draws.log_q_fn)
    if not len(obs_idx):
        return []
    host_error = model.take_callback_error or _no_error
    host_error()  # an error of an earlier run is not this run's

    def prepared():
        return prepare(EngineData(theta, draws.logp0, draws.log_q0, draws.grad_logp0, model.line_cache(theta),
                                  gauss=draws.gauss))

    try:  # each compiled call in a worker thread, so that Ctrl-C stops it within a second
        edata = run_interruptible(prepared, model.cancel)
        return _run(mapped, edata, obs_idx, draws.ll, batch_size, progressbar, model.cancel)
    except Exception as exc:
        stored = host_error()
        if stored is not None:
            raise stored from exc
        raise


def _no_error():
    return None


def _run(f, edata, obs_idx, ll, batch_size, progressbar, cancel=None):
    """Run the jit-compiled search over observations in chunks, with a progress bar; each chunk in a
    worker thread (:func:`~ppl_loo.workflow.loo.interrupt.run_interruptible`), the loop in the caller's."""
    out = []
    chunk = max(int(batch_size), 1)
    bar = tqdm(total=len(obs_idx), desc="adaptive LOO", disable=not progressbar, unit="obs")
    for start in range(0, len(obs_idx), chunk):
        idx = np.asarray(obs_idx[start:start + chunk])
        if len(idx) < chunk:  # pad to keep one compiled shape
            idx = np.concatenate([idx, np.repeat(idx[-1:], chunk - len(idx))])
        args = (edata, jnp.asarray(idx), jnp.asarray(ll[:, idx].T))
        res = run_interruptible(lambda a=args: jax.tree_util.tree_map(np.asarray, f(*a)), cancel)
        for j in range(min(chunk, len(obs_idx) - start)):
            out.append({k: getattr(res, k)[j] for k in res._fields})
        bar.update(min(chunk, len(obs_idx) - start))
    bar.close()
    return out
