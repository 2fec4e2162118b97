// Bernoulli-logit regression with the regularized horseshoe prior (Piironen & Vehtari 2017),
// non-centered, as in Paananen et al. (2021) for the ovarian microarray data (54 x 1536) and in
// the gradient-flow LOO papers ("reproducing Paananen et al."); notes/gradient-flow-loo.md,
// section 6.
//
//   beta0 ~ normal(0, scale_icept)
//   z_j ~ normal(0, 1),  lam_j ~ half-t(nu_local, 0, 1),  tau ~ half-t(nu_global, 0, scale_global)
//   caux ~ inv_gamma(slab_df / 2, slab_df / 2),  c = slab_scale * sqrt(caux)
//   lam_tilde_j = sqrt(c^2 lam_j^2 / (c^2 + tau^2 lam_j^2)),  beta_j = z_j * lam_tilde_j * tau
//   y_i ~ bernoulli_logit(beta0 + X[i] * beta)
//
// Every hyperparameter is a data entry. Paananen et al.'s values (ovarian.R), the defaults of
// ppl_loo.stan.horseshoe_data(X, y) and of ppl_loo.models.LogisticRegression(prior="horseshoe"):
//   scale_icept = 5, slab_scale = 2.5, slab_df = 1, nu_global = 1, nu_local = 1,
//   scale_global = p0 / ((D - p0) * sqrt(N)) with p0 = 20 (prior guess of the number of relevant
//   predictors); about 0.0018 for D = 1536, N = 54.
// scale_global is data (not computed from N in transformed data) on purpose: exact LOO by data
// deletion instantiates this program on N - 1 observations, and the prior must stay the same.
//
// Variable names follow ppl_loo.models.LogisticRegression(prior="horseshoe"): its constrained
// variables beta0, beta, lam, tau, caux are the parameters / transformed parameters here, so the
// same draws feed both (the JAX model is centered in beta, this program non-centered in z).
data {
  int<lower=1> N;                         // observations
  int<lower=1> D;                         // predictors (without the intercept)
  matrix[N, D] X;                         // standardized predictors
  array[N] int<lower=0, upper=1> y;
  real<lower=0> scale_icept;              // prior sd of the intercept (5)
  real<lower=0> scale_global;             // p0 / ((D - p0) * sqrt(N)), p0 = 20
  real<lower=0> nu_global;                // degrees of freedom of tau's half-t (1: half-Cauchy)
  real<lower=0> nu_local;                 // degrees of freedom of the lam_j's half-t (1)
  real<lower=0> slab_scale;               // slab scale (2.5)
  real<lower=0> slab_df;                  // slab degrees of freedom (1)
}
parameters {
  real beta0;
  vector[D] z;
  vector<lower=0>[D] lam;
  real<lower=0> tau;
  real<lower=0> caux;
}
transformed parameters {
  real<lower=0> c = slab_scale * sqrt(caux);
  vector<lower=0>[D] lam_tilde = sqrt(square(c) * square(lam) ./ (square(c) + square(tau) * square(lam)));
  vector[D] beta = z .* lam_tilde * tau;
}
model {
  z ~ std_normal();
  lam ~ student_t(nu_local, 0, 1);
  tau ~ student_t(nu_global, 0, scale_global);
  caux ~ inv_gamma(0.5 * slab_df, 0.5 * slab_df);
  beta0 ~ normal(0, scale_icept);
  y ~ bernoulli_logit_glm(X, beta0, beta);
}
generated quantities {
  vector[N] log_lik;
  array[N] int y_rep;
  {
    vector[N] f = beta0 + X * beta;
    for (i in 1:N) {
      log_lik[i] = bernoulli_logit_lpmf(y[i] | f[i]);
    }
    y_rep = bernoulli_logit_rng(f);
  }
}
