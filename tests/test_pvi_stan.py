"""``pl.pvi`` on a compiled Stan program (real stanc + C++ through the in-process bridge).

One program, compiled once (about a minute, then cached), with a data switch ``lik``:
0 = normal toy ``y ~ N(theta, 1)`` (known answers of the notes' T2: s = sqrt(3) for the log score,
1.88386 for the CRPS through the ``y_rep`` generated quantity), 1 = Bernoulli without covariates
(T5: the quadratic-score predictive is the frequency of ones), 2 = a transformed datum that uses
all observations (so the log density is not one term per observation: refused).
"""

import math
import shutil
import warnings

import numpy as np
import pytest
from scipy import stats

pytest.importorskip("httpstan")
if shutil.which("g++") is None:  # pragma: no cover
    pytest.skip("no C++ compiler", allow_module_level=True)

import ppl_loo as pl

PROGRAM = """
data {
  int<lower=0> N;
  vector[N] y;
  array[N] int<lower=0, upper=1> z;
  int<lower=0, upper=2> lik;
  real<lower=0> tau;
}
transformed data {
  real shift = (lik == 2 && N > 0) ? mean(y) : 0;
}
parameters {
  real theta;
}
model {
  theta ~ normal(0, tau);
  if (lik == 1) z ~ bernoulli_logit(theta);
  else y ~ normal(theta + shift, 1);
}
generated quantities {
  array[N] real y_rep = normal_rng(rep_vector(theta + shift, N), 1);
}
"""

Y5 = np.array([-3.0, -1.0, 0.0, 1.0, 3.0])


def _data(lik, y=Y5, z=None):
    z = np.zeros(len(y), int) if z is None else z
    return {"N": len(y), "y": y, "z": z, "lik": lik, "tau": 10.0}


@pytest.fixture(scope="module")
def normal_stan():
    return pl.StanModel(PROGRAM, _data(0), n_obs="N")


def test_stan_log_score_and_vi(normal_stan):
    tree = pl.pvi(None, normal_stan, score="log", random_seed=1, draws=2000,
                  optimizer={"steps": 1000, "draws_per_step": 400, "init_scale": 1.0})
    g = tree["pvi"]
    assert float(g["sd"][0]) == pytest.approx(math.sqrt(3.0), abs=0.01)
    assert abs(float(g["loc"][0])) < 0.02
    # VI in the same family is the exact conjugate posterior N(0, 0.446767^2)
    assert float(g["vi_sd"][0]) == pytest.approx(0.446767, rel=0.03)
    assert list(g["param"].values) == ["theta"]
    assert tree.posterior["theta"].dims == ("chain", "draw")
    # the log-likelihood group holds log N(y_i | theta, 1) at the draws
    th = tree.posterior["theta"].values.reshape(-1)
    np.testing.assert_allclose(tree.log_likelihood["log_lik"].values.reshape(th.size, -1),
                               stats.norm.logpdf(Y5[None, :], th[:, None], 1.0), rtol=1e-9)
    # pl.loo on the PVI draws with the Stan model (data deletion) and Eq. 13: the exact conjugate LOO
    exact = []
    for i in range(5):
        rest = np.delete(Y5, i)
        v = 1 / (4 + 1 / 100)
        exact.append(stats.norm.logpdf(Y5[i], v * rest.sum(), math.sqrt(1 + v)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pl.loo(tree, normal_stan, progressbar=False)
    assert res.approx_posterior
    assert np.all(np.abs(res.elpd_i.values - np.array(exact)) < 4 * res.mcse_elpd_i.values + 0.02)


def test_stan_crps_through_y_rep(normal_stan):
    tree = pl.pvi(None, normal_stan, score="crps", random_seed=2, draws=200,
                  optimizer={"steps": 800, "draws_per_step": 200, "init_scale": 1.0},
                  score_options={"simulator": "y_rep", "observed": "y"}, output={"compare_vi": False})
    assert float(tree["pvi"]["sd"][0]) == pytest.approx(1.88386, abs=0.04)
    with pytest.raises(ValueError, match="generated quantity"):
        pl.pvi(None, normal_stan, score="crps", random_seed=0, optimizer={"steps": 5},
               score_options={"simulator": "nope", "observed": "y"})
    with pytest.raises(ValueError, match="observed="):
        pl.pvi(None, normal_stan, score="crps", random_seed=0, optimizer={"steps": 5},
               score_options={"simulator": "y_rep"})


def test_stan_quadratic_bernoulli_and_refusals():
    z = (np.arange(40) % 10 < 3).astype(int)  # 12 ones out of 40
    sm = pl.StanModel(PROGRAM, _data(1, y=np.zeros(40), z=z), n_obs="N")
    tree = pl.pvi(None, sm, score="quadratic", reg="prior", lam=0.1, random_seed=3, draws=2000,
                  optimizer={"steps": 800, "draws_per_step": 100}, score_options={"observed": "z"},
                  output={"compare_vi": False})
    p = 1 / (1 + np.exp(-tree.posterior["theta"].values.ravel()))
    assert p.mean() == pytest.approx(0.3, abs=0.015)
    # the CRPS simulator is refused for... a continuous y_rep is fine, but a continuous outcome has no
    # categories for the quadratic score
    with pytest.raises(ValueError, match="continuous"):
        pl.pvi(None, pl.StanModel(PROGRAM, _data(0), n_obs="N"), score="quadratic", random_seed=0,
               optimizer={"steps": 5}, score_options={"observed": "y"})
    # a transformed datum computed from all observations breaks the per-observation decomposition
    with pytest.raises(ValueError, match="not the sum of one term per observation"):
        pl.pvi(None, pl.StanModel(PROGRAM, _data(2), n_obs="N"), score="log", random_seed=0, optimizer={"steps": 5})
