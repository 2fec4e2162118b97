// Poisson-lognormal counts: one random effect per observation (overdispersion), non-centred.
// y_i ~ poisson_log(eta_i), eta_i = mu + s z_i, z_i ~ normal(0, 1), mu ~ normal(0, 2), s ~ half-normal(0, 1).
data {
  int<lower=0> N;
  array[N] int<lower=0> y;
}
parameters {
  real mu;
  real<lower=0> s;
  vector[N] z;
}
transformed parameters {
  vector[N] eta = mu + s * z;
}
model {
  mu ~ normal(0, 2);
  s ~ normal(0, 1);
  z ~ std_normal();
  y ~ poisson_log(eta);
}
generated quantities {
  vector[N] log_lik;
  array[N] int y_rep;
  for (n in 1:N) {
    log_lik[n] = poisson_log_lpmf(y[n] | eta[n]);
    y_rep[n] = poisson_log_rng(eta[n]);
  }
}
