"""Traced programs kept on disk (``ppl_loo.program_cache``) and the model fingerprint that keys the search's.

A program read back gives the numbers the traced one gives; a program whose key differs is never read; a program
that cannot be exported (a host callback) runs jit-compiled; a damaged file is replaced. The fingerprint is the same
for the same model built twice and differs when its data or its likelihood differ.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pymc as pm
import pytest

import ppl_loo.program_cache as pc
from ppl_loo.adapters.as_model import as_model
from ppl_loo.jax_settings import x64
from ppl_loo.model.fingerprint import model_fingerprint


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PPL_LOO_CACHE_DIR", str(tmp_path / "xla"))
    return tmp_path / "xla" / "exported"


def _f(x, pair):
    a, b = pair
    return {"sum_sq": jnp.sum(x ** 2), "dot": a @ b}


def _args():
    x = np.arange(4.0)
    return x, (np.array([1.0, 2.0]), np.array([3.0, -1.0]))


def test_a_program_read_back_gives_the_traced_numbers(folder, monkeypatch):
    with x64():
        out = pc.exported_jit(_f, "f", "key")(*_args())
        assert float(out["sum_sq"]) == 14.0 and float(out["dot"]) == 1.0
        files = sorted(os.listdir(folder))
        assert len(files) == 1 and files[0].endswith(".prog")

        traced = []
        export = pc._export

        def counted(*a):
            traced.append(1)
            return export(*a)

        monkeypatch.setattr(pc, "_export", counted)  # a new process: the program comes from the file
        again = pc.exported_jit(_f, "f", "key")(*_args())
        assert float(again["sum_sq"]) == 14.0 and float(again["dot"]) == 1.0 and not traced
        pc.exported_jit(_f, "f", "another key")(*_args())  # another key is another program
        assert traced == [1] and len(os.listdir(folder)) == 2


def test_other_shapes_are_other_programs(folder):
    with x64():
        f = pc.exported_jit(_f, "f", "key")
        x, pair = _args()
        assert float(f(x, pair)["sum_sq"]) == 14.0
        assert float(f(np.ones(7), pair)["sum_sq"]) == 7.0
        assert len(os.listdir(folder)) == 2


def test_a_damaged_file_is_replaced(folder):
    with x64():
        pc.exported_jit(_f, "f", "key")(*_args())
        (path,) = folder.iterdir()
        path.write_bytes(b"not a program")
        assert float(pc.exported_jit(_f, "f", "key")(*_args())["sum_sq"]) == 14.0
        assert path.stat().st_size > 100


def test_a_host_callback_runs_jit_compiled(folder):
    def g(x):
        y = jax.pure_callback(lambda v: np.asarray(v) * 2.0, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return jnp.sum(y)

    with x64():
        assert float(pc.exported_jit(g, "g", "key")(np.arange(3.0))) == 6.0
    assert not folder.exists() or not list(folder.glob("*.prog"))


def test_off_is_plain_jit(monkeypatch, tmp_path):
    monkeypatch.setenv("PPL_LOO_CACHE_DIR", "off")
    with x64():
        assert float(pc.exported_jit(_f, "f", "key")(*_args())["dot"]) == 1.0
    assert pc.programs_folder() is None


def test_the_oldest_programs_are_removed_beyond_the_limit(folder, monkeypatch):
    monkeypatch.setattr(pc, "MAX_PROGRAMS", 2)
    with x64():
        for k in range(4):
            pc.exported_jit(_f, "f", f"key {k}")(*_args())
    assert len(list(folder.glob("*.prog"))) == 2


def _normal(y, sd=1.0):
    with pm.Model() as m:
        data = pm.Data("y_obs", y)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, sd, observed=data)
    return m


def test_the_fingerprint_follows_the_model_not_the_object():
    y = np.array([0.5, -1.0, 2.0])
    with x64():
        a = model_fingerprint(as_model(_normal(y)))
        assert a is not None and a == model_fingerprint(as_model(_normal(y.copy())))
        assert a != model_fingerprint(as_model(_normal(y + 1e-9)))  # other data
        assert a != model_fingerprint(as_model(_normal(y, sd=2.0)))  # another likelihood
        m = _normal(y)
        with m:
            pm.set_data({"y_obs": y[::-1].copy()})
        assert a != model_fingerprint(as_model(m))


def test_data_inside_a_jitted_likelihood_are_part_of_the_fingerprint():
    """A JAX model whose log-likelihood is a jitted function closing over its data: the data are constants of the
    inner jaxpr, which printing does not show; other data give another fingerprint."""
    import jax.scipy.stats as st

    import ppl_loo as pl

    def model(y):
        ll = jax.jit(lambda v: st.norm.logpdf(jnp.asarray(y), v["mu"], 1.0))
        return pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0), ll, obs_dims=("obs",),
                           observed=y)

    y = np.array([0.1, -0.4, 0.3])
    with x64():
        a = model_fingerprint(as_model(model(y)))
        assert a is not None and a == model_fingerprint(as_model(model(y.copy())))
        assert a != model_fingerprint(as_model(model(np.array([0.1, -0.4, 0.31]))))


def test_a_structured_model_has_no_fingerprint():
    import ppl_loo as pl

    X = np.random.default_rng(0).normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(float)
    with x64():
        assert model_fingerprint(as_model(pl.models.LogisticRegression(X, y))) is None


SCRIPT = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np, jax.scipy.stats as st
    import ppl_loo as pl
    warnings.simplefilter("ignore")
    y = np.array([0.1, -0.4, 0.3, 0.8, -0.2, 0.0, 0.5, -0.6, 0.2, 9.0])
    model = pl.JaxModel({"mu": ((), None)}, lambda v: st.norm.logpdf(v["mu"], 0.0, 10.0),
                        lambda v: st.norm.logpdf(y, v["mu"], 1.0), obs_dims=("obs",), observed=y)
    rng = np.random.default_rng(1)
    post_sd = 1.0 / np.sqrt(len(y) + 0.01)
    mu = y.sum() / (len(y) + 0.01) + post_sd * rng.normal(size=(2, 1000))
    ll = st.norm.logpdf(y[None, None, :], mu[..., None], 1.0)
    import arviz_base as azb
    tree = azb.from_dict({"posterior": {"mu": np.asarray(mu)}, "log_likelihood": {"obs": np.asarray(ll)}})
    res = pl.loo(tree, model, var_name="obs", random_seed=3, progressbar=False,
                 second_opinions={"smc": True})
    print(json.dumps([float(v) for v in np.asarray(res.elpd_i)]))
""")


def test_a_second_process_reads_the_programs_and_gives_the_same_numbers(tmp_path):
    """Exact posterior draws of a normal mean with known sigma and one outlier: the second process reads the
    search's and SMC's programs from disk (written by the first) and gives the same ``elpd_i``, which match the
    closed form within 0.05 nats."""
    env = {**os.environ, "PPL_LOO_CACHE_DIR": str(tmp_path / "xla")}
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first, second = (np.array(eval(r.stdout.strip().splitlines()[-1])) for r in runs)
    assert len(list((tmp_path / "xla" / "exported").glob("*.prog"))) >= 2  # the search's and SMC's
    np.testing.assert_array_equal(first, second)
    y = np.array([0.1, -0.4, 0.3, 0.8, -0.2, 0.0, 0.5, -0.6, 0.2, 9.0])
    exact = []
    for i in range(len(y)):
        rest = np.delete(y, i)
        prec = len(rest) + 0.01
        m, v = rest.sum() / prec, 1.0 / prec
        exact.append(-0.5 * np.log(2 * np.pi * (1 + v)) - 0.5 * (y[i] - m) ** 2 / (1 + v))
    np.testing.assert_allclose(first, exact, atol=0.05)
