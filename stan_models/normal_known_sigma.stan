// Normal mean with known sigma and a normal prior: y_i ~ normal(mu, sigma), mu ~ normal(mu0, tau0).
data {
  int<lower=0> N;
  vector[N] y;
  real<lower=0> sigma;
  real mu0;
  real<lower=0> tau0;
}
parameters {
  real mu;
}
model {
  mu ~ normal(mu0, tau0);
  y ~ normal(mu, sigma);
}
generated quantities {
  vector[N] log_lik;
  for (i in 1:N) {
    log_lik[i] = normal_lpdf(y[i] | mu, sigma);
  }
}
