// Eight schools, non-centered parameterization (Rubin 1981; Gelman et al. BDA3 5.5).
// Column names match the CmdStan output in shared/data/cmdstan-eight-schools:
// mu, tau, theta_tilde.1-8, theta.1-8, log_lik.1-8, y_hat.1-8.
data {
  int<lower=0> J;
  vector[J] y;
  vector<lower=0>[J] sigma;
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] theta_tilde;
}
transformed parameters {
  vector[J] theta = mu + tau * theta_tilde;
}
model {
  mu ~ normal(0, 5);
  tau ~ cauchy(0, 5);
  theta_tilde ~ normal(0, 1);
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
