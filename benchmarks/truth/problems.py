"""The models of the ground-truth suite, each with its data, its main fit and its refits.

Every problem gives:

- ``fit(settings, seed) -> DataTree``: the main fit with real MCMC (NumPyro's NUTS for the JAX
  models, ``pm.sample`` for PyMC, Stan's own NUTS in-process for Stan), with ``posterior``,
  ``log_likelihood`` and ``sample_stats`` groups, as a user would have it;
- ``refit(i, settings, seed, beta=0.0) -> (log_l, diagnostics)``: MCMC on the posterior with
  observation ``i`` deleted (``beta = 0``) or tempered in (``p_-i * l_i^beta``, the rungs of the
  stepping stones), and ``log l_i`` at its draws, shape ``(chains, draws)``;
- ``truth_loglik(data) -> (chains, draws, n)``: ``log l_i`` at the main fit's draws, in the *same*
  definition as the refits (for models with a latent variable per observation, the likelihood with
  that latent integrated out: the refits without ``i`` have no such latent);
- ``model(data)``: what ``pl.loo`` gets (a JAX model, the ``pymc.Model`` or a ``pl.StanModel``);
- ``exact()``: the exact LOO densities where a closed form or quadrature exists (else ``None``);
- optionally ``refit_obs(data)``: the observations that get a refit (default: all); the truth, and
  so the scores, cover only those (``horseshoe_wide``: plain PSIS k-hat above 0.5).

Problems with an exact answer need no MCMC refits: their ``refit`` may draw from the closed-form
posterior without the observation (``leverage_wide_*``), which keeps the suite's stages uniform.

The refit estimate of ``p(y_i | y_-i)`` bridges the refit draws and the main fit's draws
(:func:`ppl_loo.numerics.bridge.bridge_log_ratio`), see ``estimate.py``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
from truth_common import STAN_DIR

from ppl_loo.adapters.as_model import as_model
from ppl_loo.model.build import Compiled

# ----------------------------------------------------------------------------- MCMC helpers


def _diag_from_tree(data, wall):
    """Divergences, max R-hat and min bulk ESS of a DataTree's posterior."""
    import arviz_stats as azs

    post = data["posterior"].to_dataset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rhat = azs.rhat(post)
        ess = azs.ess(post, method="bulk")
    out = {"wall_s": float(wall),
           "max_rhat": float(max(np.nanmax(np.asarray(v.values)) for v in rhat.data_vars.values())),
           "min_ess_bulk": float(min(np.nanmin(np.asarray(v.values)) for v in ess.data_vars.values()))}
    if "sample_stats" in data.children and "diverging" in data["sample_stats"]:
        out["divergences"] = int(np.asarray(data["sample_stats"]["diverging"].values).sum())
    return out


def _weighted(model, i, beta):
    """The model (ppl_loo's protocol, :func:`ppl_loo.adapters.as_model.as_model`) with observation ``i`` deleted
    (``beta = 0``) or tempered (``0 < beta < 1``): only its log density changes."""
    m = as_model(model)
    i, beta = int(i), float(beta)

    def logp(theta):
        return m.loo_logp(theta, i) + beta * m.loglik_i(theta, i)

    return m._replace(logp=logp, compiled=Compiled())  # programs of its own: its logp is not the model's


class JaxProblem:
    """Models written for JAX (``pl.JaxModel`` or a closed-form model), sampled with NumPyro's NUTS."""

    backend = "jax"

    def model(self, data=None):
        return self.jax_model

    def numpyro_fn(self, weights):  # pragma: no cover - optional: a better parameterization for NUTS
        return None

    def _sample(self, model, settings, seed, weights):
        from ppl_loo.sampling import sample_nuts

        kw = {}
        fn = self.numpyro_fn(weights)
        if fn is not None:
            kw["numpyro_model"] = fn
        t0 = time.perf_counter()
        data = sample_nuts(model, num_chains=settings["chains"], num_warmup=settings["warmup"],
                           num_samples=settings["draws"], random_seed=seed,
                           target_accept=settings.get("target_accept", 0.8),
                           max_tree_depth=settings.get("max_depth", 10), **kw)
        return data, time.perf_counter() - t0

    def fit(self, settings, seed):
        data, wall = self._sample(self.jax_model, settings, seed, np.ones(self.n))
        data["posterior"].attrs["diagnostics"] = str(_diag_from_tree(data, wall))
        return data

    def refit(self, i, settings, seed, beta=0.0):
        import jax

        w = np.ones(self.n)
        w[i] = beta
        data, wall = self._sample(_weighted(self.jax_model, i, beta), settings, seed, w)
        theta = np.asarray(self.jax_model.unconstrain(data["posterior"].to_dataset()))
        ll = np.asarray(jax.vmap(self.jax_model.loglik_i, in_axes=(0, None))(theta, i))
        return ll.reshape(settings["chains"], -1), _diag_from_tree(data, wall)

    def truth_loglik(self, data):
        return np.asarray(data["log_likelihood"][self.jax_model.var_name].values)

    def exact(self):
        return None


# ----------------------------------------------------------------------------- ovarian models


class OvarianLR(JaxProblem):
    """The demo's model: ovarian microarray (54 x 1536), regularized-horseshoe logistic regression."""

    name = "ovarian_lr"
    title = "Ovarian horseshoe logistic regression (n = 54, d = 3075; the demo's model)"

    def __init__(self):
        from ppl_loo.datasets import load_ovarian
        from ppl_loo.models import LogisticRegression

        self.X, self.y = load_ovarian()
        self.n = len(self.y)
        self.jax_model = LogisticRegression(self.X, self.y, prior="horseshoe")

    def numpyro_fn(self, weights):
        """The non-centered NumPyro model of ``LogisticRegression.numpyro_model`` with observation
        weights (0 deletes an observation; the prior, ``scale_global`` included, stays the full-data one)."""
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist

        m = self.jax_model
        X, y, w = jnp.asarray(m.X), jnp.asarray(m.y), jnp.asarray(weights)
        p, a = m.p, 0.5 * m.slab_df

        def model():
            beta0 = numpyro.sample("beta0", dist.Normal(0.0, m.scale_icept))
            z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([p]).to_event(1))
            lam = numpyro.sample("lam", dist.HalfCauchy(1.0).expand([p]).to_event(1))
            tau = numpyro.deterministic("tau", m.scale_global * numpyro.sample("tau_raw", dist.HalfCauchy(1.0)))
            caux = numpyro.sample("caux", dist.InverseGamma(a, a))
            c2 = m.slab_scale**2 * caux
            beta = numpyro.deterministic("beta", z * jnp.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2)) * tau)
            ll = dist.Bernoulli(logits=beta0 + X @ beta).log_prob(y)
            numpyro.factor("loglik", jnp.sum(w * ll))

        return model


class OvarianRelu(JaxProblem):
    """One-hidden-layer ReLU net (3 units) on the ovarian data, N(0, 1) weights (the authors' model)."""

    name = "ovarian_relu"
    title = "Ovarian ReLU net, 3 hidden units (n = 54, d = 4615)"

    def __init__(self):
        from ppl_loo.datasets import load_ovarian
        from ppl_loo.models import ReluNet

        self.X, self.y = load_ovarian()
        self.n = len(self.y)
        self.jax_model = ReluNet(self.X, self.y, hidden=3)


class LogisticPNearN(JaxProblem):
    """Logistic regression with p close to n and a Gaussian prior (log-concave: NUTS mixes well)."""

    name = "lr_p_near_n"
    title = "Logistic regression, p = 40 close to n = 50, N(0, 1) prior"

    def __init__(self, n=50, p=40, seed=11):
        from ppl_loo.models import LogisticRegression

        rng = np.random.default_rng(seed)
        self.X = rng.normal(size=(n, p))
        beta = rng.normal(size=p) * 0.7
        self.y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(self.X @ beta)))).astype(float)
        self.n = n
        self.jax_model = LogisticRegression(self.X, self.y, prior="normal", prior_scale=1.0)


class HorseshoeWide(OvarianLR):
    """Regularized-horseshoe logistic regression on synthetic wide data (n = 120, p = 300), in the
    style of the voice data of the R ``loo`` package's mixture-IS vignette.

    X is standard normal, 5 coefficients are nonzero (2 to 3 in size, random signs), y Bernoulli.
    The fit and the refits use the non-centered NumPyro model of :class:`OvarianLR`. Only the
    observations whose plain PSIS k-hat is above 0.5 are refit (:meth:`refit_obs`): the truth, and
    the scores, cover those.
    """

    name = "horseshoe_wide"
    title = "Horseshoe logistic regression, synthetic wide data (n = 120, p = 300, d = 603)"
    refit_k = 0.5
    refit_obs_note = "those with plain PSIS k-hat above 0.5"

    def __init__(self, n=120, p=300, seed=13):
        from ppl_loo.models import LogisticRegression

        rng = np.random.default_rng(seed)
        self.X = rng.normal(size=(n, p))
        beta = np.zeros(p)
        beta[:5] = rng.uniform(2.0, 3.0, size=5) * rng.choice([-1.0, 1.0], size=5)
        self.y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-(self.X @ beta)))).astype(float)
        self.n = n
        self.jax_model = LogisticRegression(self.X, self.y, prior="horseshoe")

    def refit_obs(self, data):
        """The observations that get a refit: plain PSIS k-hat above :attr:`refit_k` on the main fit."""
        from methods import plain

        return [int(i) for i in np.flatnonzero(plain(self, data)["k"] > self.refit_k)]


class OverdispersedPoisson(JaxProblem):
    """Poisson regression (4 coefficients) of overdispersed counts in the hundreds: many high-k points.

    The data are negative binomial (shape 4) with a log-linear mean; the Poisson model is wrong for
    them, so the posterior is narrow while single counts sit far from it: ``p(y_i | theta)`` spans
    many orders of magnitude over the refit draws, the case where ``log mean p(y_i | theta)`` over
    the refit alone is biased low.
    """

    name = "overdispersed_poisson"
    title = "Poisson regression of overdispersed counts (n = 60, d = 4)"

    def __init__(self, n=60, seed=3):
        import jax.numpy as jnp
        import jax.scipy.stats as st

        import ppl_loo as pl

        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, 3))
        eta = 5.0 + X @ np.array([0.4, -0.3, 0.2])
        mean = np.exp(eta)
        self.y = rng.negative_binomial(4.0, 4.0 / (4.0 + mean)).astype(float)
        self.X, self.n = X, n
        Xj, yj = jnp.asarray(X), jnp.asarray(self.y)

        def log_prior(v):
            return st.norm.logpdf(v["a"], 0.0, 10.0) + jnp.sum(st.norm.logpdf(v["b"], 0.0, 1.0))

        def log_lik(v):
            return st.poisson.logpmf(yj, jnp.exp(v["a"] + Xj @ v["b"]))

        self.jax_model = pl.JaxModel({"a": ((), None), "b": ((3,), None)}, log_prior, log_lik,
                                     obs_dims=("obs",), observed=self.y)


class PoissonOutliers(JaxProblem):
    """Two-parameter Poisson regression with gross outliers; exact LOO by 2-D quadrature."""

    name = "poisson_outliers"
    title = "Poisson regression with 3 gross outliers (n = 30, d = 2; quadrature)"

    def __init__(self, n=30, seed=5):
        import jax.numpy as jnp
        import jax.scipy.stats as st

        import ppl_loo as pl

        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=n)
        self.y = rng.poisson(np.exp(1.0 + 0.5 * self.x)).astype(float)
        self.y[[3, 11, 20]] = [25.0, 0.0, 30.0]
        self.n = n
        xj, yj = jnp.asarray(self.x), jnp.asarray(self.y)
        self.prior_sd = (2.0, 1.0)

        def log_prior(v):
            return st.norm.logpdf(v["a"], 0.0, 2.0) + st.norm.logpdf(v["b"], 0.0, 1.0)

        def log_lik(v):
            return st.poisson.logpmf(yj, jnp.exp(v["a"] + v["b"] * xj))

        self.jax_model = pl.JaxModel({"a": ((), None), "b": ((), None)}, log_prior, log_lik, obs_dims=("obs",),
                                     observed=self.y)

    def exact(self):
        """``log p(y_i | y_-i)`` by quadrature on a fine 2-D grid around the posterior."""
        from scipy.special import gammaln, logsumexp
        from scipy.stats import norm

        a = np.linspace(-1.0, 3.5, 601)
        b = np.linspace(-1.5, 2.5, 601)
        A, B = np.meshgrid(a, b, indexing="ij")
        lam = np.exp(A[..., None] + B[..., None] * self.x)
        ll = self.y * np.log(lam) - lam - gammaln(self.y + 1.0)  # (601, 601, n)
        lprior = norm.logpdf(A, 0, self.prior_sd[0]) + norm.logpdf(B, 0, self.prior_sd[1])
        total = lprior + ll.sum(-1)
        out = np.empty(self.n)
        for i in range(self.n):
            lo = total - ll[..., i]
            out[i] = logsumexp(lo + ll[..., i]) - logsumexp(lo)
        return out


class LeverageRegression(JaxProblem):
    """Gaussian linear regression with known noise and high-leverage outliers; exact LOO in closed form."""

    name = "leverage_gaussian"
    title = "Linear regression, known noise, 4 high-leverage outliers (n = 40, d = 3; closed form)"

    def __init__(self, n=40, seed=4, sigma=1.0, tau=10.0):
        import jax.numpy as jnp
        import jax.scipy.stats as st

        import ppl_loo as pl

        rng = np.random.default_rng(seed)
        X = np.column_stack([np.ones(n), rng.normal(size=n), rng.normal(size=n)])
        X[:4, 1] = [6.0, -5.0, 7.0, 5.5]  # high leverage
        y = X @ np.array([1.0, 0.5, -0.5]) + sigma * rng.normal(size=n)
        y[:4] += [6.0, -5.0, -7.0, 4.0]  # and far from the line
        self.X, self.y, self.n, self.sigma, self.tau = X, y, n, sigma, tau
        Xj, yj = jnp.asarray(X), jnp.asarray(y)

        def log_prior(v):
            return jnp.sum(st.norm.logpdf(v["beta"], 0.0, tau))

        def log_lik(v):
            return st.norm.logpdf(yj, Xj @ v["beta"], sigma)

        self.jax_model = pl.JaxModel({"beta": ((3,), None)}, log_prior, log_lik, obs_dims=("obs",), observed=y)

    def exact(self):
        from scipy.stats import norm

        out = np.empty(self.n)
        for i in range(self.n):
            keep = np.arange(self.n) != i
            X, y = self.X[keep], self.y[keep]
            P = X.T @ X / self.sigma**2 + np.eye(3) / self.tau**2
            C = np.linalg.inv(P)
            m = C @ X.T @ y / self.sigma**2
            x = self.X[i]
            out[i] = norm.logpdf(self.y[i], x @ m, np.sqrt(self.sigma**2 + x @ C @ x))
        return out


def _leverage_wide_data(n=40, p=15, seed=21, sigma=1.0):
    """Standard-normal design (n x p), coefficients N(0, 0.5^2); rows 0-2 scaled by 5, 6, 7 (high
    leverage) and their y moved 7, -6.5, 8 noise SDs off the line."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = rng.normal(size=p) * 0.5
    X[:3] *= np.array([5.0, 6.0, 7.0])[:, None]
    y = X @ beta + sigma * rng.normal(size=n)
    y[:3] += sigma * np.array([7.0, -6.5, 8.0])
    return X, y


class _GaussianLinearClosedForm:
    """Gaussian linear regression with known noise ``sigma`` and ``beta ~ N(0, tau^2 I)``: the
    posterior with each observation weighted by ``w_j`` (0 deletes, ``beta`` tempers) is Gaussian, so
    the exact LOO density is closed form and a "refit" is iid draws from that posterior."""

    sigma = 1.0
    tau = 2.0
    refit_note = "iid draws from the closed-form Gaussian posterior without the observation"

    def _setup(self):
        self.X, self.y = _leverage_wide_data(sigma=self.sigma)
        self.n, self.p = self.X.shape

    def _posterior(self, w):
        X, y, s2 = self.X, self.y, self.sigma**2
        P = (X.T * w) @ X / s2 + np.eye(self.p) / self.tau**2
        C = np.linalg.inv(P)
        return C @ ((X.T * w) @ y) / s2, C

    def exact(self):
        from scipy.stats import norm

        out = np.empty(self.n)
        for i in range(self.n):
            w = np.ones(self.n)
            w[i] = 0.0
            m, C = self._posterior(w)
            x = self.X[i]
            out[i] = norm.logpdf(self.y[i], x @ m, np.sqrt(self.sigma**2 + x @ C @ x))
        return out

    def refit(self, i, settings, seed, beta=0.0):
        """iid draws (chains x draws) from the posterior without ``i`` (or with it tempered by
        ``beta``), in closed form: no MCMC, the truth is :meth:`exact` anyway."""
        from scipy.stats import norm

        t0 = time.perf_counter()
        w = np.ones(self.n)
        w[i] = beta
        m, C = self._posterior(w)
        rng = np.random.default_rng(seed)
        S = settings["chains"] * settings["draws"]
        draws = m + rng.normal(size=(S, self.p)) @ np.linalg.cholesky(C).T
        ll = norm.logpdf(self.y[i], draws @ self.X[i], self.sigma)
        return ll.reshape(settings["chains"], -1), {"wall_s": time.perf_counter() - t0, "sampler": "closed form"}

    def _loglik_beta(self, post, i):
        from scipy.stats import norm

        b = np.asarray(post["beta"].transpose("chain", "draw", ...).values).reshape(-1, self.p)
        return norm.logpdf(self.y[i], b @ self.X[i], self.sigma)


class LeverageWidePyMC(_GaussianLinearClosedForm):
    """Gaussian linear regression, known noise, p = 15, three high-leverage outliers, in PyMC."""

    name = "leverage_wide_pymc"
    title = ("Linear regression, known noise, p = 15, 3 high-leverage outliers (n = 40, d = 15; closed form), "
             "PyMC")
    backend = "pymc"

    def __init__(self):
        self._setup()

    def build(self):
        import pymc as pm

        with pm.Model(coords={"obs": np.arange(self.n), "coef": np.arange(self.p)}) as m:
            beta = pm.Normal("beta", 0.0, self.tau, dims="coef")
            pm.Normal("y", pm.math.dot(self.X, beta), self.sigma, observed=self.y, dims="obs")
        return m

    def model(self, data=None):
        return self.build()

    def fit(self, settings, seed):
        return _pymc_fit(self.build(), settings, seed)

    def truth_loglik(self, data):
        return np.asarray(data["log_likelihood"]["y"].transpose("chain", "draw", ...).values)


LEVERAGE_WIDE_STAN = """
data {
  int<lower=1> N;
  int<lower=1> P;
  matrix[N, P] X;
  vector[N] y;
  real<lower=0> sigma;
  real<lower=0> tau;
}
parameters {
  vector[P] beta;
}
model {
  beta ~ normal(0, tau);
  y ~ normal(X * beta, sigma);
}
generated quantities {
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = normal_lpdf(y[n] | X[n] * beta, sigma);
}
"""


# ----------------------------------------------------------------------------- Poisson with random effects

POISSON_RE_STAN = """
data {
  int<lower=1> N;
  vector[N] x;
  array[N] int<lower=0> y;
}
parameters {
  real a;
  real b;
  real<lower=0> sigma;
  vector[N] eps;
}
model {
  a ~ normal(0, 2);
  b ~ normal(0, 1);
  sigma ~ normal(0, 1);
  eps ~ normal(0, sigma);
  y ~ poisson_log(a + b * x + eps);
}
generated quantities {
  vector[N] log_lik;
  for (n in 1:N) log_lik[n] = poisson_log_lpmf(y[n] | a + b * x[n] + eps[n]);
}
"""


def _poisson_re_data(n=40, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = rng.poisson(np.exp(1.5 + 0.5 * x + 0.4 * rng.normal(size=n)))
    y[[2, 17]] = [45, 0]  # two outliers
    return x, y.astype(np.int64)


def marginal_poisson_lognormal_loglik(y, eta, sigma, n_grid=801):
    """``log int Poisson(y | exp(eta + e)) N(e | 0, sigma) de`` per draw (trapezoid on a fine grid).

    ``eta``, ``sigma`` have shape ``(S,)``; the grid spans ``+-9 sigma`` around 0 and also covers
    the likelihood's peak ``log(y) - eta``.
    """
    from scipy.special import gammaln, logsumexp

    eta, sigma = np.asarray(eta, float), np.asarray(sigma, float)
    u = np.linspace(-9.0, 9.0, n_grid)  # standard normal scale
    e = sigma[:, None] * u[None, :]
    lin = eta[:, None] + e
    log_f = y * lin - np.exp(lin) - gammaln(y + 1.0) - 0.5 * u**2 - 0.5 * np.log(2 * np.pi)
    du = u[1] - u[0]
    wts = np.full(n_grid, np.log(du))
    wts[[0, -1]] += np.log(0.5)
    return logsumexp(log_f + wts, axis=1)


def _pymc_sample(m, settings, seed):
    """``pm.sample`` of the PyMC model ``m`` with the suite's settings (one core, chains in sequence)."""
    import pymc as pm

    t0 = time.perf_counter()
    with m, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=settings["draws"], tune=settings["warmup"], chains=settings["chains"],
                          cores=1, random_seed=seed, target_accept=settings.get("target_accept", 0.8),
                          progressbar=False, compute_convergence_checks=False)
    return idata, time.perf_counter() - t0


def _pymc_fit(m, settings, seed, sample=_pymc_sample):
    """The main fit of the PyMC model ``m``: its draws (``sample``, default :func:`_pymc_sample`), the pointwise
    log-likelihood and the fit's diagnostics in ``posterior.attrs``."""
    import pymc as pm

    idata, wall = sample(m, settings, seed)
    with m:
        pm.compute_log_likelihood(idata, progressbar=False)
    idata["posterior"].attrs["diagnostics"] = str(_diag_from_tree(idata, wall))
    return idata


class PoissonREPyMC:
    """Poisson regression with one normal random effect per observation (the classic high-k case), in PyMC."""

    name = "poisson_re_pymc"
    title = "Poisson-lognormal regression, one latent per observation (n = 40, d = 43), PyMC"
    backend = "pymc"

    def __init__(self):
        self.x, self.y = _poisson_re_data()
        self.n = len(self.y)

    def build(self, keep=None, temper=None):
        """The PyMC model on the observations ``keep`` (default all); ``temper=(i, beta)`` adds
        ``beta * log p(y_i | ...)`` of an observation not in ``keep`` with its own latent."""
        import pymc as pm

        keep = np.arange(self.n) if keep is None else np.asarray(keep)
        with pm.Model(coords={"obs": np.arange(len(keep))}) as m:
            a = pm.Normal("a", 0.0, 2.0)
            b = pm.Normal("b", 0.0, 1.0)
            sigma = pm.HalfNormal("sigma", 1.0)
            eps = pm.Normal("eps", 0.0, sigma, dims="obs")
            pm.Poisson("y", mu=pm.math.exp(a + b * self.x[keep] + eps), observed=self.y[keep], dims="obs")
            if temper is not None:
                # temper the *marginal* likelihood of y_i (its latent integrated out on the grid of
                # marginal_poisson_lognormal_loglik): the stones bridge rung to rung with that marginal,
                # so the rungs must be p_-i m_i^beta; a latent eps_i with beta * log p(y_i | eps_i) would
                # target p_-i int p(y_i | eps)^beta N(eps) d eps instead (1 nat off on an outlier)
                i, beta = temper
                from scipy.special import gammaln

                u = np.linspace(-9.0, 9.0, 801)
                logw = np.full(u.size, np.log(u[1] - u[0]))
                logw[[0, -1]] += np.log(0.5)
                lin = a + b * self.x[i] + sigma * u
                log_f = self.y[i] * lin - pm.math.exp(lin) - gammaln(self.y[i] + 1.0) - 0.5 * u**2 \
                    - 0.5 * np.log(2 * np.pi) + logw
                pm.Potential("tempered", beta * pm.math.logsumexp(log_f))
        return m

    def model(self, data=None):
        return self.build()

    def _sample(self, m, settings, seed):
        return _pymc_sample(m, settings, seed)

    def fit(self, settings, seed):
        return _pymc_fit(self.build(), settings, seed, self._sample)

    def _loglik_marginal(self, post, i):
        a = np.asarray(post["a"]).ravel()
        b = np.asarray(post["b"]).ravel()
        s = np.asarray(post["sigma"]).ravel()
        return marginal_poisson_lognormal_loglik(self.y[i], a + b * self.x[i], s)

    def refit(self, i, settings, seed, beta=0.0):
        keep = np.flatnonzero(np.arange(self.n) != i)
        m = self.build(keep, temper=None if beta == 0.0 else (i, beta))
        idata, wall = self._sample(m, settings, seed)
        post = idata["posterior"].to_dataset()
        return self._loglik_marginal(post, i).reshape(settings["chains"], -1), _diag_from_tree(idata, wall)

    def truth_loglik(self, data):
        post = data["posterior"].to_dataset()
        C, D = post.sizes["chain"], post.sizes["draw"]
        return np.stack([self._loglik_marginal(post, i).reshape(C, D) for i in range(self.n)], axis=-1)

    def exact(self):
        return None


class BreastCancerPyMC:
    """Logistic regression on the Wisconsin breast-cancer data (569 tumours, 30 standardized features) in PyMC,
    with a Normal(0, 1) or a regularized-horseshoe prior on the coefficients: an ordinary data set on which plain
    PSIS flags dozens of observations, most of them tumours classified with near certainty (``log p(y_i | theta)``
    within 1e-6 of 0 at every draw, where a k-hat above 0.7 costs nothing). The refits (``pm.sample`` without the
    observation, the main fit's settings) cover the :attr:`n_refit` observations of plain k-hat above 0.7 whose
    log-likelihood varies most over the draws (:meth:`refit_obs`): every one whose LOO density is far from 1."""

    backend = "pymc"
    refit_k = 0.7
    n_refit = 24
    refit_obs_note = f"the {n_refit} of plain PSIS k-hat above 0.7 whose log-likelihood varies most over the draws"

    def __init__(self, prior):
        from ppl_loo.datasets import load_breast_cancer

        if prior not in ("normal", "horseshoe"):
            raise ValueError(f"prior={prior!r}: 'normal' or 'horseshoe'")
        self.prior = prior
        self.name = f"breast_cancer_{prior}"
        self.title = (f"Breast-cancer logistic regression (n = 569, p = 30), "
                      f"{'Normal(0, 1)' if prior == 'normal' else 'regularized-horseshoe'} prior, PyMC")
        self.X, self.y = load_breast_cancer()
        self.n = len(self.y)

    def build(self, keep=None, temper=None):
        """The PyMC model on the observations ``keep`` (default all); ``temper=(i, beta)`` adds ``beta * log p(y_i |
        theta)`` of an observation not in ``keep``."""
        return breast_cancer_model(self.X, self.y, self.prior, keep, temper)

    def model(self, data=None):
        return self.build()

    def fit(self, settings, seed):
        return _pymc_fit(self.build(), settings, seed)

    def _loglik(self, post, i=slice(None)):
        """``log p(y_i | theta)`` at every draw of ``post``, ``(draws,)``, or ``(draws, n)`` for every observation."""
        eta = (np.asarray(post["alpha"]).reshape(-1, 1)
               + np.asarray(post["beta"]).reshape(-1, self.X.shape[1]) @ self.X[i].reshape(-1, self.X.shape[1]).T)
        ll = -np.logaddexp(0.0, -np.where(self.y[i] == 1, 1.0, -1.0) * eta)
        return ll[:, 0] if np.ndim(i) == 0 and not isinstance(i, slice) else ll

    def refit(self, i, settings, seed, beta=0.0):
        keep = np.flatnonzero(np.arange(self.n) != i)
        idata, wall = _pymc_sample(self.build(keep, temper=None if beta == 0.0 else (i, beta)), settings, seed)
        post = idata["posterior"].to_dataset()
        return self._loglik(post, i).reshape(settings["chains"], -1), _diag_from_tree(idata, wall)

    def truth_loglik(self, data):
        post = data["posterior"].to_dataset()
        C, D = post.sizes["chain"], post.sizes["draw"]
        return self._loglik(post).reshape(C, D, self.n)

    def exact(self):
        return None

    def refit_obs(self, data):
        """The :attr:`n_refit` observations of plain PSIS k-hat above :attr:`refit_k` on the main fit whose
        log-likelihood has the largest variance over the draws."""
        from methods import plain

        k = np.asarray(plain(self, data)["k"])
        var = self.truth_loglik(data).reshape(-1, self.n).var(axis=0)
        order = [int(i) for i in np.argsort(-var, kind="stable") if k[i] > self.refit_k]
        return sorted(order[: self.n_refit])


def breast_cancer_model(X, y, prior, keep=None, temper=None):
    """The breast-cancer logistic regression in PyMC on rows ``keep`` of ``X``, ``y``: intercept Normal(0, 2.5);
    coefficients Normal(0, 1) (``prior="normal"``) or the regularized horseshoe of Piironen & Vehtari (2017), non-
    centred, with a prior guess of 5 relevant features, slab scale 2 and slab degrees of freedom 4; ``temper=(i, beta)``
    adds ``beta * log p(y_i | theta)`` (the rungs of the stepping stones)."""
    import pymc as pm

    keep = np.arange(len(y)) if keep is None else np.asarray(keep)
    n, p = len(keep), X.shape[1]
    with pm.Model(coords={"obs": np.arange(n), "feature": np.arange(p)}) as m:
        alpha = pm.Normal("alpha", 0.0, 2.5)
        if prior == "normal":
            beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        else:
            tau0 = 5.0 / (p - 5.0) * 2.0 / np.sqrt(n)
            tau = pm.HalfStudentT("tau", nu=3, sigma=tau0)
            lam = pm.HalfStudentT("lam", nu=3, sigma=1.0, dims="feature")
            c2 = pm.InverseGamma("c2", alpha=2.0, beta=2.0 * 2.0**2)
            lam_t = pm.math.sqrt(c2 * lam**2 / (c2 + tau**2 * lam**2))
            z = pm.Normal("z", 0.0, 1.0, dims="feature")
            beta = pm.Deterministic("beta", z * tau * lam_t, dims="feature")
        pm.Bernoulli("y", logit_p=alpha + pm.math.dot(X[keep], beta), observed=y[keep], dims="obs")
        if temper is not None:
            i, b = temper
            eta = alpha + pm.math.dot(X[i], beta)
            pm.Potential("tempered", b * (-pm.math.log1pexp(-eta) if y[i] == 1 else -pm.math.log1pexp(eta)))
    return m


class StanProblem:
    """Stan programs compiled in-process (the httpstan toolchain) and sampled with Stan's own NUTS."""

    backend = "stan"
    loo_extra = None

    def stan_model(self, data, sampler=False):
        import ppl_loo as pl

        return pl.StanModel(self.code, data, sampler=sampler)

    def model(self, data=None):
        import ppl_loo as pl

        return pl.StanModel(self.code, self.data, loo_extra=self.loo_extra)

    def _sample(self, data, settings, seed, tmpdir):
        import ppl_loo as pl
        from ppl_loo.stan_bridge.sampler import sample_cmdstan_csv

        sm = self.stan_model(data, sampler=True)
        t0 = time.perf_counter()
        paths, _ = sample_cmdstan_csv(sm, tmpdir, chains=settings["chains"], random_seed=seed,
                                      num_warmup=settings["warmup"], num_samples=settings["draws"],
                                      adapt_delta=settings.get("target_accept", 0.8),
                                      max_depth=settings.get("max_depth", 10))
        wall = time.perf_counter() - t0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = pl.from_cmdstan([str(p) for p in paths])
        return tree, wall

    def fit(self, settings, seed):
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            tree, wall = self._sample(self.data, settings, seed, tmp)
        tree["posterior"].attrs["diagnostics"] = str(_diag_from_tree(tree, wall))
        return tree

    def refit(self, i, settings, seed, beta=0.0):
        import tempfile

        if beta != 0.0:
            raise NotImplementedError("stepping stones are run on the JAX and PyMC problems")
        with tempfile.TemporaryDirectory() as tmp:
            tree, wall = self._sample(self.deleted_data(i), settings, seed, tmp)
        post = tree["posterior"].to_dataset()
        return self.marginal_loglik(post, i).reshape(settings["chains"], -1), _diag_from_tree(tree, wall)

    def truth_loglik(self, data):
        post = data["posterior"].to_dataset()
        C, D = post.sizes["chain"], post.sizes["draw"]
        return np.stack([self.marginal_loglik(post, i).reshape(C, D) for i in range(self.n)], axis=-1)


class PoissonREStan(StanProblem):
    """The same Poisson-lognormal model and data as :class:`PoissonREPyMC`, as a Stan program."""

    name = "poisson_re_stan"
    title = "Poisson-lognormal regression, one latent per observation (n = 40, d = 43), Stan"
    code = POISSON_RE_STAN

    def __init__(self):
        self.x, self.y = _poisson_re_data()
        self.n = len(self.y)
        self.data = {"N": self.n, "x": self.x, "y": self.y}

    @staticmethod
    def loo_extra(theta, i):
        """Log density of the coordinate deletion removes: the latent ``eps[i] ~ N(0, sigma)``
        (unconstrained layout ``a, b, log sigma, eps[N]``)."""
        import jax.numpy as jnp
        import jax.scipy.stats as st

        return st.norm.logpdf(theta[3 + i], 0.0, jnp.exp(theta[2]))

    def deleted_data(self, i):
        keep = np.arange(self.n) != i
        return {"N": self.n - 1, "x": self.x[keep], "y": self.y[keep]}

    def marginal_loglik(self, post, i):
        a = np.asarray(post["a"]).ravel()
        b = np.asarray(post["b"]).ravel()
        s = np.asarray(post["sigma"]).ravel()
        return marginal_poisson_lognormal_loglik(self.y[i], a + b * self.x[i], s)

    def exact(self):
        return None


class LeverageWideStan(_GaussianLinearClosedForm, StanProblem):
    """The same data and model as :class:`LeverageWidePyMC`, as a Stan program (Stan's own NUTS)."""

    name = "leverage_wide_stan"
    title = ("Linear regression, known noise, p = 15, 3 high-leverage outliers (n = 40, d = 15; closed form), "
             "Stan")
    code = LEVERAGE_WIDE_STAN

    def __init__(self):
        self._setup()
        self.data = {"N": self.n, "P": self.p, "X": self.X, "y": self.y, "sigma": self.sigma, "tau": self.tau}

    def deleted_data(self, i):
        keep = np.arange(self.n) != i
        return dict(self.data, N=self.n - 1, X=self.X[keep], y=self.y[keep])

    def marginal_loglik(self, post, i):
        return self._loglik_beta(post, i)


EIGHT_SCHOOLS_CENTERED = """
data {
  int<lower=0> J;
  vector[J] y;
  vector<lower=0>[J] sigma;
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] theta;
}
model {
  mu ~ normal(0, 5);
  tau ~ cauchy(0, 5);
  theta ~ normal(mu, tau);
  y ~ normal(theta, sigma);
}
generated quantities {
  vector[J] log_lik;
  for (j in 1:J) log_lik[j] = normal_lpdf(y[j] | theta[j], sigma[j]);
}
"""


class EightSchools(StanProblem):
    """Eight schools (Rubin 1981), centred or non-centred; exact LOO by 2-D quadrature over (mu, tau)."""

    Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])

    def __init__(self, centered: bool):
        self.centered = centered
        self.name = "eight_schools_" + ("centered" if centered else "noncentered")
        self.title = f"Eight schools, {'centred' if centered else 'non-centred'} (n = 8, d = 10), Stan"
        self.code = EIGHT_SCHOOLS_CENTERED if centered else (STAN_DIR / "eight_schools_noncentered.stan").read_text()
        self.n = 8
        self.data = {"J": 8, "y": self.Y, "sigma": self.SIGMA}

    def loo_extra(self, theta, i):
        """Log density of the school's effect that deletion removes: its prior given ``mu, tau``
        (unconstrained layout ``mu, log tau, theta[8]`` or ``theta_tilde[8]``)."""
        import jax.numpy as jnp
        import jax.scipy.stats as st

        if self.centered:
            return st.norm.logpdf(theta[2 + i], theta[0], jnp.exp(theta[1]))
        return st.norm.logpdf(theta[2 + i], 0.0, 1.0)

    def deleted_data(self, i):
        keep = np.arange(8) != i
        return {"J": 7, "y": self.Y[keep], "sigma": self.SIGMA[keep]}

    def marginal_loglik(self, post, i):
        from scipy.stats import norm

        mu = np.asarray(post["mu"]).ravel()
        tau = np.asarray(post["tau"]).ravel()
        return norm.logpdf(self.Y[i], mu, np.sqrt(tau**2 + self.SIGMA[i] ** 2))

    def exact(self):
        """``log p(y_i | y_-i)`` by quadrature over ``(mu, tau)`` (the schools' effects integrate out)."""
        from scipy.special import logsumexp
        from scipy.stats import cauchy, norm

        mu = np.linspace(-60.0, 70.0, 1301)
        u = np.linspace(-12.0, 9.0, 1401)  # log tau
        M, U = np.meshgrid(mu, u, indexing="ij")
        T = np.exp(U)
        lprior = norm.logpdf(M, 0, 5) + np.log(2 * cauchy.pdf(T, 0, 5)) + U  # log-Jacobian of tau = exp(u)
        ll = norm.logpdf(self.Y, M[..., None], np.sqrt(T[..., None] ** 2 + self.SIGMA**2))
        total = lprior + ll.sum(-1)
        out = np.empty(8)
        for i in range(8):
            lo = total - ll[..., i]
            out[i] = logsumexp(lo + ll[..., i]) - logsumexp(lo)
        return out


def all_problems():
    """Name -> constructor, in the order of the report."""
    return {
        "ovarian_lr": OvarianLR,
        "ovarian_relu": OvarianRelu,
        "lr_p_near_n": LogisticPNearN,
        "horseshoe_wide": HorseshoeWide,
        "poisson_re_pymc": PoissonREPyMC,
        "poisson_re_stan": PoissonREStan,
        "eight_schools_centered": lambda: EightSchools(True),
        "eight_schools_noncentered": lambda: EightSchools(False),
        "leverage_gaussian": LeverageRegression,
        "leverage_wide_pymc": LeverageWidePyMC,
        "leverage_wide_stan": LeverageWideStan,
        "poisson_outliers": PoissonOutliers,
        "overdispersed_poisson": OverdispersedPoisson,
        "breast_cancer_normal": lambda: BreastCancerPyMC("normal"),
        "breast_cancer_horseshoe": lambda: BreastCancerPyMC("horseshoe"),
    }
