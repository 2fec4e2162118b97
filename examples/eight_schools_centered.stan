// Eight schools, centred parameterization (Rubin 1981; Gelman et al. BDA3 5.5): theta drawn directly
// from normal(mu, tau). Same data and the same generated quantities (log_lik, y_hat) as
// stan_models/eight_schools_noncentered.stan, so the two can be compared with ppl-loo compare.
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
  vector[J] y_hat;
  for (j in 1:J) {
    log_lik[j] = normal_lpdf(y[j] | theta[j], sigma[j]);
    y_hat[j] = normal_rng(theta[j], sigma[j]);
  }
}
