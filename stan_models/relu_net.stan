// One-hidden-layer ReLU network classifier of the gradient-flow LOO papers' ovarian experiment
// (000 S.4.2; notes/gradient-flow-loo.md, section 6): H = 3 hidden units, every weight and bias
// iid normal(0, prior_scale) with prior_scale = 1 (the authors' Stan model).
//
//   hidden = relu(W1 * [x; 1]),  logit = W2' * hidden + b2,  y ~ bernoulli_logit(logit)
//
// Layout and names follow ppl_loo.models.ReluNet, so the same draws feed both: W1 is H x (D + 1)
// with the first-layer bias as its LAST column (the authors' W_0 (D x H) is W1[:, 1:D]' and their
// b_0 is W1[:, D + 1]), W2 (H) the output weights, b2 the output bias. Number of parameters
// H (D + 1) + H + 1 (4,615 for D = 1536, H = 3).
data {
  int<lower=1> N;                         // observations
  int<lower=1> D;                         // inputs
  int<lower=1> H;                         // hidden units (3)
  matrix[N, D] X;                         // standardized inputs
  array[N] int<lower=0, upper=1> y;
  real<lower=0> prior_scale;              // sd of every weight (1)
}
transformed data {
  matrix[N, D + 1] Xa = append_col(X, rep_vector(1, N));
}
parameters {
  matrix[H, D + 1] W1;
  vector[H] W2;
  real b2;
}
model {
  matrix[N, H] a = Xa * W1';
  vector[N] f = fmax(a, 0) * W2 + b2;
  to_vector(W1) ~ normal(0, prior_scale);
  W2 ~ normal(0, prior_scale);
  b2 ~ normal(0, prior_scale);
  y ~ bernoulli_logit(f);
}
generated quantities {
  vector[N] log_lik;
  array[N] int y_rep;
  {
    vector[N] f = fmax(Xa * W1', 0) * W2 + b2;
    for (i in 1:N) {
      log_lik[i] = bernoulli_logit_lpmf(y[i] | f[i]);
    }
    y_rep = bernoulli_logit_rng(f);
  }
}
