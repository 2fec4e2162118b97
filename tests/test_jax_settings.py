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
        cache_before=cache_before,
        cache_after=jax.config.jax_compilation_cache_dir,
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


def _run(script, tmp_path, *args, **extra_env):
    """``script`` in a fresh interpreter with no JAX or ppl_loo cache settings of this process, the cache's default
    folder under ``tmp_path``; the dict it printed after ``RESULT``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "PPL_LOO_CACHE"))}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    env["XDG_CACHE_HOME"] = str(tmp_path)
    env.update(extra_env)
    proc = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent), *args], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_import_leaves_x64_alone_and_loo_is_float64(tmp_path):
    """``import ppl_loo`` and ``pl.loo`` leave ``jax_enable_x64`` as the user set it (off here), and ``pl.loo`` still
    returns float64 results whose plain-PSIS part matches arviz_stats to 1e-8. The persistent compilation cache is
    on by default, in ``$XDG_CACHE_HOME/ppl_loo/xla``, and the compiled search is written there."""
    out = _run(SCRIPT, tmp_path)
    assert out["before"] is False and out["after_import"] is False and out["after_loo"] is False, out
    assert out["user_dtype"] == "float32", out
    folder = tmp_path / "ppl_loo" / "xla"
    assert out["cache_before"] is None and out["cache_after"] == str(folder), out
    assert len([f for f in folder.iterdir() if f.name.endswith("-cache")]) > 0
    assert out["dtypes"] == ["float64"], out
    assert out["n_psis"] > 10, out
    assert out["plain_elpd_i"] < 1e-8 and out["plain_k"] < 1e-8, out
    assert out["adaptive_psis_elpd_i"] < 1e-8 and out["adaptive_k_psis"] < 1e-8, out


CACHE_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    if sys.argv[2] != "-":
        jax.config.update("jax_compilation_cache_dir", sys.argv[2])
    import numpy as np
    import ppl_loo as pl
    from ppl_loo.jax_settings import x64
    with x64():
        pass
    print("RESULT " + json.dumps({"dir": jax.config.jax_compilation_cache_dir}))
""")


def test_the_cache_is_turned_off_or_moved_and_a_users_own_is_kept(tmp_path):
    """``PPL_LOO_CACHE_DIR=off`` leaves JAX without a persistent cache; ``PPL_LOO_CACHE_DIR=<folder>`` moves it
    there; a cache folder the user configured in JAX is kept whatever the variable says."""
    def run(user, **env):
        return _run(CACHE_SCRIPT, tmp_path, user, **env)["dir"]

    assert run("-", PPL_LOO_CACHE_DIR="off") is None
    assert run("-", PPL_LOO_CACHE_DIR=str(tmp_path / "mine")) == str(tmp_path / "mine")
    assert run(str(tmp_path / "users"), PPL_LOO_CACHE_DIR=str(tmp_path / "mine")) == str(tmp_path / "users")
    assert run("-") == str(tmp_path / "ppl_loo" / "xla")


def test_the_cache_folder_is_bounded_oldest_first(tmp_path):
    """Five 100-byte files written one after another (a subfolder too), bounded to 250 bytes: the three oldest go."""
    from ppl_loo.jax_settings import bound_folder

    (tmp_path / "exported").mkdir()
    paths = [tmp_path / f"a{k}" for k in range(3)] + [tmp_path / "exported" / f"b{k}" for k in range(2)]
    for t, p in enumerate(paths):
        p.write_bytes(b"x" * 100)
        os.utime(p, (1000 + t, 1000 + t))
    bound_folder(tmp_path, 250)
    assert [p.exists() for p in paths] == [False, False, False, True, True]
    bound_folder(tmp_path, 250)  # within the bound: nothing removed
    assert sum(p.exists() for p in paths) == 2
