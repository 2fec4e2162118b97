"""ppl_loo leaves the user's JAX configuration alone and still computes in float64.

Run in a fresh interpreter, so that neither this process's JAX state nor the other tests matter.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import jax
    before = bool(jax.config.jax_enable_x64)
    cache_before = jax.config.jax_compilation_cache_dir
    import ppl_loo as pl
    out = {"before": before, "after_import": bool(jax.config.jax_enable_x64)}
    import numpy as np
    import arviz_stats as azs
    sys.path.insert(0, sys.argv[1])
    from gaussian_models import leverage_regression

    model = leverage_regression(seed=1, n=40)
    data = model.exact_draws(n_chains=4, n_draws=500, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = azs.loo(data, pointwise=True)
        plain = pl.loo(data)
        res = pl.loo(data, model, progressbar=False)
    psis = np.asarray(res.transform.values) == "psis"
    k_ref = np.asarray(ref.pareto_k.values)
    out.update(
        after_loo=bool(jax.config.jax_enable_x64),
        user_dtype=str(jax.numpy.ones(2).dtype),
        cache_untouched=jax.config.jax_compilation_cache_dir == cache_before,
        dtypes=sorted({str(res.elpd_i.dtype), str(res.pareto_k.dtype), str(plain.elpd_i.dtype)}),
        n_psis=int(psis.sum()),
        plain_elpd_i=float(np.max(np.abs(plain.elpd_i.values - ref.elpd_i.values))),
        plain_k=float(np.max(np.abs(plain.pareto_k.values - k_ref))),
        adaptive_psis_elpd_i=float(np.max(np.abs(res.elpd_i.values[psis] - ref.elpd_i.values[psis]))),
        adaptive_k_psis=float(np.max(np.abs(res.pareto_k_psis.values - k_ref))),
        elpd=float(res.elpd),
    )
    print("RESULT " + json.dumps(out))
""")


def test_import_leaves_x64_alone_and_loo_is_float64():
    """``import ppl_loo`` and ``pl.loo`` leave ``jax_enable_x64`` (and the compilation cache) as the
    user set them (off here), and ``pl.loo`` still returns float64 results whose plain-PSIS part
    matches arviz_stats to 1e-8."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PPL_LOO_CACHE"))}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(Path(__file__).parent)], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT "):])
    assert out["before"] is False and out["after_import"] is False and out["after_loo"] is False, out
    assert out["user_dtype"] == "float32" and out["cache_untouched"], out
    assert out["dtypes"] == ["float64"], out
    assert out["n_psis"] > 10, out
    assert out["plain_elpd_i"] < 1e-8 and out["plain_k"] < 1e-8, out
    assert out["adaptive_psis_elpd_i"] < 1e-8 and out["adaptive_k_psis"] < 1e-8, out
