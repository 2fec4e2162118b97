"""Tempered SMC from the posterior draws to each LOO posterior as a second opinion of ``pl.loo``
(``second_opinions={"smc": ...}``).

The numerics are :func:`ppl_loo.numerics.smc.smc_loo` (BlackJAX's adaptive tempered SMC, vectorized over
observations); here the model's functions, the particles (the posterior draws, thinned evenly to at most
:data:`MAX_PARTICLES` so that each chain keeps its share, in :data:`POPULATIONS` independent populations) and what
may vouch: an observation whose tempering reached
``lambda = 1`` with a finite estimate and SE and move acceptance of at least :data:`MIN_ACCEPTANCE`.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from ppl_loo.model.fingerprint import model_fingerprint
from ppl_loo.numerics.random import prng_key, seed_from
from ppl_loo.numerics.smc import smc_loo
from ppl_loo.workflow.loo.interrupt import run_interruptible
from ppl_loo.workflow.loo.vouch.rule import Opinion

__all__ = ["run_smc", "smc_gradients", "MOVES", "LEAPFROG", "MAX_PARTICLES", "POPULATIONS", "MIN_PER_POPULATION",
           "MIN_ACCEPTANCE"]

#: particles per observation (the posterior draws thinned evenly): the cost is particles x tempering steps x moves;
#: 8 populations of 500 (with fewer per population the populations' estimates are skewed and the SE from their
#: spread too small)
MAX_PARTICLES = 4000
POPULATIONS = 8
#: below this many particles per population SMC does not run (its SE from the populations' spread is meaningless)
MIN_PER_POPULATION = 100
#: moves that accept less than this did not move the particles: such a run is no independent evidence
MIN_ACCEPTANCE = 0.1
#: MCMC moves per tempering step and leapfrog steps per move (:func:`ppl_loo.numerics.smc.smc_loo`'s HMC kernel)
MOVES, LEAPFROG = 10, 5


def smc_gradients(n_draws):
    """The gradient evaluations of the cheapest SMC run on one observation (one tempering step) from ``n_draws``
    posterior draws: its particles (thinned to at most :data:`MAX_PARTICLES`) x :data:`MOVES` x :data:`LEAPFROG`."""
    step = max(1, int(np.ceil(n_draws / MAX_PARTICLES)))
    return len(range(0, n_draws, step)) * MOVES * LEAPFROG


def run_smc(model, draws, targets, random_seed=None):
    """SMC estimates of the observations ``targets`` (flat indices) as an :class:`Opinion` over all ``n``
    (NaN and ``ok = False`` elsewhere), and its info (particles, populations, per observation: tempering steps, move
    acceptance, whether ``lambda = 1`` was reached); ``draws``: :class:`~ppl_loo.workflow.loo.draws.LooDraws`."""
    n = draws.ll.shape[1]
    theta = np.asarray(draws.theta, dtype=np.float64)
    step = max(1, int(np.ceil(theta.shape[0] / MAX_PARTICLES)))
    theta = theta[::step]
    pops = POPULATIONS
    if theta.shape[0] // pops < MIN_PER_POPULATION:
        info = {"skipped": f"{theta.shape[0]} posterior draws: SMC needs at least {pops * MIN_PER_POPULATION} "
                           f"({pops} populations of {MIN_PER_POPULATION})", "observations": [], "particles": 0,
                "n_ok": 0, "seconds": 0.0}
        return Opinion("smc", np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool)), info
    seed = int(np.random.default_rng(seed_from(random_seed, np.asarray(draws.theta, dtype=np.float64))).integers(2**31))
    program_key = model_fingerprint(model) if model.factorizes else None  # the program kept on disk
    call = functools.partial(smc_loo, model.logp, model.loglik_i, theta, np.asarray(targets, dtype=np.int64),
                             prng_key(seed + 1), populations=pops, num_mcmc_steps=MOVES,
                             num_integration_steps=LEAPFROG, program_key=program_key, store=model.compiled)
    t0 = time.perf_counter()
    res = run_interruptible(call, model.cancel)
    seconds = time.perf_counter() - t0
    elpd, mcse = np.full(n, np.nan), np.full(n, np.nan)
    ok = np.zeros(n, bool)
    e, s = np.asarray(res.elpd, dtype=float), np.asarray(res.mcse, dtype=float)
    elpd[targets], mcse[targets] = e, s
    ok[targets] = (np.asarray(res.reached, bool) & np.isfinite(e) & np.isfinite(s)
                   & (np.asarray(res.acceptance, dtype=float) >= MIN_ACCEPTANCE))
    info = {"particles": int(theta.shape[0]), "populations": pops, "seed": seed, "seconds": seconds,
            "observations": np.asarray(targets).tolist(), "elpd_i": e.tolist(), "mcse_i": s.tolist(),
            "n_steps": np.asarray(res.n_steps).tolist(), "acceptance": np.asarray(res.acceptance).tolist(),
            "reached": np.asarray(res.reached).tolist(), "n_ok": int(ok.sum())}
    return Opinion("smc", elpd, mcse, ok), info
