"""Memory of the adaptive search on PyMC models without closed-form structure (the generic path).

- Identity: the search with its per-draw work (Jacobians of the gradient flows, gradients, the Newton
  Hessian, line evaluations) in blocks of draws under a tiny forced budget gives every candidate's
  numbers of the unblocked search to 1e-10.
- Known answer from shapes: on the regularized-horseshoe logistic regression of the user report
  (n = 126, p = 312, d = 627 free parameters, 4 x 1000 draws; ``RESOURCE_EXHAUSTED`` allocating 118 GB),
  the planned memory of one observation's search, and XLA's own plan of the compiled search, stay
  within 1 GB (nothing is run: the search is only compiled).

Real PyMC models; random draws (no sampling needed for identities and plans).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pm = pytest.importorskip("pymc")
pt = pytest.importorskip("pytensor.tensor")

from ppl_loo.adapters.pymc.adapter import PyMCModel  # noqa: E402
from ppl_loo.numerics.loo import EngineConfig, EngineData, build_engine, mapped_search  # noqa: E402
from ppl_loo.numerics.loo.plan import left_out_message, search_plan  # noqa: E402
from ppl_loo.workflow.loo.adapt import auto_batch_size  # noqa: E402
from ppl_loo.workflow.loo.loo import DEFAULT_TRANSFORMS  # noqa: E402

pytestmark = pytest.mark.x64  # calls the numerics directly on JAX arrays (conftest.py)

HBAR = tuple(4.0 ** -np.arange(6))


def _horseshoe(n, p, seed=0):
    """Regularized horseshoe (Piironen & Vehtari 2017); ``beta`` a deterministic and the logit a
    ``pm.Deterministic``, so that no GLM structure is detected (``d = 2 p + 3``)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.2 + 1.5 * X[:, 0])))).astype(int)
    with pm.Model() as m:
        z = pm.Normal("z", 0, 1, shape=p)
        lam = pm.HalfStudentT("lam", nu=1, sigma=1, shape=p)
        tau = pm.HalfStudentT("tau", nu=1, sigma=1.0 / (p * np.sqrt(n)))
        c2 = pm.InverseGamma("c2", 2, 2)
        beta = pm.Deterministic("beta", z * tau * pt.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2)))
        eta = pm.Deterministic("eta", pm.Normal("intercept", 0, 5) + pt.dot(X, beta))
        pm.Bernoulli("y", logit_p=eta, observed=y)
    model = PyMCModel(m)
    assert model.structure is None and model.dim == 2 * p + 3
    return model


def _search(model, theta, cfg, idx):
    logp0, g = model.log_density_and_grad(theta)
    ll = np.asarray(model.log_lik(theta))
    search, _ = build_engine(model, cfg)
    data = EngineData(theta, logp0, logp0, g, model.line_cache(theta))
    return mapped_search(search, 1)(data, jnp.asarray(idx), jnp.asarray(ll[:, idx].T))


@pytest.mark.parametrize("jacobian", ["exact", "first_order"])
def test_blocked_search_equals_unblocked(jacobian):
    model = _horseshoe(20, 4)  # d = 11
    S = 200
    theta = jnp.asarray(0.5 * np.random.default_rng(1).normal(size=(S, model.dim)))
    names = tuple(DEFAULT_TRANSFORMS) + ("mm3",)
    cfg = EngineConfig(names, HBAR, 1.0, jacobian, n_chains=2, min_ess=10.0)
    whole = search_plan(model, cfg, S)
    assert whole.blocks and all(k == 0 for _, k in whole.blocks.values())  # today's unblocked search
    # a budget of one draw's largest computation: every per-draw map runs in blocks of a few draws
    tiny = cfg._replace(block_bytes=max(one for one, _ in whole.blocks.values()))
    blocked = search_plan(model, tiny, S)
    assert not blocked.left_out and all(k >= 1 for _, k in blocked.blocks.values())
    idx = np.array([0, 3, 7])
    a, b = _search(model, theta, cfg, idx), _search(model, theta, tiny, idx)
    for field in a._fields:
        u, v = np.asarray(getattr(a, field)), np.asarray(getattr(b, field))
        if u.dtype.kind in "biu":
            np.testing.assert_array_equal(v, u, err_msg=field)
        else:  # the blocked values differ in rounding (1e-14); the Pareto fit of a k-hat far above 0.7
            # (k = 2.2) amplifies that to 1e-9
            tol = 1e-8 if field in ("k", "k_w") else 1e-10
            np.testing.assert_allclose(v, u, rtol=tol, atol=tol, equal_nan=True, err_msg=field)
    assert np.asarray(a.usable).any()


def test_hessian_in_column_blocks_equals_jax_hessian():
    from ppl_loo.numerics.loo.plan import plan_context
    from ppl_loo.numerics.loo.proposals import hessian_at

    model = _horseshoe(20, 4)
    m = jnp.asarray(0.3 * np.random.default_rng(2).normal(size=model.dim))
    cfg = EngineConfig(("newton",), HBAR, 1.0, block_bytes=1)  # every column on its own
    f = model.loglik_i
    blocked = hessian_at(plan_context(model, cfg, 10), f, m, 3)
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(jax.hessian(f)(m, 3)), rtol=1e-10, atol=1e-12)


def test_search_of_the_627_parameter_horseshoe_fits_in_memory():
    """The report's model at 4 x 1000 draws: the gradient flows planned (S, d, d) Jacobians and XLA
    planned 67-120 GB of temporaries per observation for each of them. Now: the flows are left out by
    ``jacobian="auto"`` (d = 627 forward-mode passes per draw), with a reason; forced with
    ``jacobian="first_order"`` they run in blocks of draws; either way one observation's search stays
    within 1 GB, in the plan and in the compiled program."""
    model = _horseshoe(126, 312)
    S, d = 4000, model.dim
    cfg = EngineConfig(tuple(DEFAULT_TRANSFORMS), tuple(4.0 ** -np.arange(11)), 1.0, "auto", n_chains=4,
                       min_ess=100.0)
    plan = search_plan(model, cfg, S)
    assert set(plan.left_out) == {"kl", "var", "ll"}
    assert "leaves out kl, var, ll" in left_out_message(plan, d, S)
    assert plan.per_obs_bytes <= 2**30
    B = auto_batch_size("auto", S, d, 126, 51, structured=False, per_obs_bytes=plan.per_obs_bytes)
    assert 1 <= B and B * plan.per_obs_bytes <= 2**30
    assert auto_batch_size("auto", S, d, 126, 51, structured=False) == 1  # the bound from shapes alone

    forced = cfg._replace(transforms=("var",), jacobian="first_order")
    plan = search_plan(model, forced, S)
    one, k = plan.blocks["jacobian var"]
    assert not plan.left_out and 1 <= k < S and k * one <= 2**28
    assert plan.per_obs_bytes <= 2**30
    search, _ = build_engine(model, forced)
    sds, f64 = jax.ShapeDtypeStruct, jnp.float64
    data = EngineData(sds((S, d), f64), sds((S,), f64), sds((S,), f64), sds((S, d), f64), None)
    compiled = mapped_search(search, 1).lower(data, sds((1,), jnp.int64), sds((1, S), f64)).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp <= plan.per_obs_bytes <= 2**30  # was 120 GB (var) before blocking


def test_auto_batch_size_on_an_accelerator_uses_its_free_memory(monkeypatch):
    """On a CPU (this machine's JAX reports no device memory) up to 8 observations within ~1 GB; where the device
    reports its free memory (an accelerator), up to 64 within a quarter of it."""
    import ppl_loo.workflow.loo.adapt as adapt
    from ppl_loo.numerics.loo.memory import device_free_bytes, machine_bytes
    from ppl_loo.numerics.nuts import default_chain_method

    if jax.default_backend() == "cpu":
        assert device_free_bytes() is None and default_chain_method() == "sequential"
    else:
        assert device_free_bytes() > 0 and default_chain_method() == "vectorized"
    assert default_chain_method("parallel") == "parallel"
    per_obs = 100 * 2**20
    call = lambda n_flagged: auto_batch_size("auto", 1000, 10, 50, n_flagged, structured=False,  # noqa: E731
                                             per_obs_bytes=per_obs)
    monkeypatch.setattr(adapt, "device_free_bytes", lambda: None)
    assert call(100) == min(8, min(2**30, machine_bytes() // 8) // per_obs)
    monkeypatch.setattr(adapt, "device_free_bytes", lambda: 8 * 2**30)  # 2 GiB usable: 20 observations of 100 MiB
    assert call(100) == 20 and call(5) == 5
    monkeypatch.setattr(adapt, "device_free_bytes", lambda: 80 * 2**30)
    assert call(1000) == 64
    monkeypatch.setattr(adapt, "device_free_bytes", lambda: 0)
    assert call(100) == 1
    assert auto_batch_size(3, 1000, 10, 50, 100) == 3  # a number given is used as it is
