# R loo's numbers on the input of make_reference.py (see there); prints one JSON object.
suppressPackageStartupMessages(library(loo))
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
probs <- as.numeric(strsplit(args[2], ",")[[1]])
ll <- as.matrix(read.table(file.path(dir, "log_lik.tmp")))
h <- as.matrix(read.table(file.path(dir, "quantity.tmp")))
pred <- as.matrix(read.table(file.path(dir, "pred.tmp")))
y <- c(0.3, -0.8, 1.1, 0.2, -0.4, 0.9, -1.3, 0.5, 0.1, -0.2, 0.7, -0.5, 4.5)
colnames(ll) <- NULL; colnames(h) <- NULL; colnames(pred) <- NULL
fit <- loo(ll, r_eff = rep(1, ncol(ll)))
ps <- psis(-ll, r_eff = rep(1, ncol(ll)))
e <- function(type, p = NULL) {
  r <- if (is.null(p)) E_loo(h, ps, type = type, log_ratios = -ll) else E_loo(h, ps, type = type, probs = p, log_ratios = -ll)
  list(value = as.vector(r$value), pareto_k = as.vector(r$pareto_k))
}
# loo 2.5.1 (Debian's) has no loo_predictive_metric (loo >= 2.6): its formulas (loo 2.6's .mae, .mse, .rmse) on
# E_loo's LOO predictive means
pred_loo <- E_loo(pred, ps, type = "mean", log_ratios = -ll)$value
metric <- function(m) {
  n <- length(y); e <- y - pred_loo
  if (m == "mae") return(list(estimate = mean(abs(e)), se = sd(abs(e)) / sqrt(n)))
  if (m == "mse") return(list(estimate = mean(e^2), se = sd(e^2) / sqrt(n)))
  mse <- mean(e^2); var_mse <- var(e^2) / n; var_rmse <- var_mse / mse / 4
  list(estimate = sqrt(mse), se = sqrt(var_rmse))
}
tab <- pareto_k_table(fit)
write.table(weights(ps, log = TRUE, normalize = TRUE), file.path(dir, "log_weights.tmp"), row.names = FALSE, col.names = FALSE)
out <- list(
  r_version = paste(R.version$major, R.version$minor, sep = "."),
  loo_version = as.character(packageVersion("loo")),
  elpd_loo = fit$estimates["elpd_loo", "Estimate"], se_elpd_loo = fit$estimates["elpd_loo", "SE"],
  p_loo = fit$estimates["p_loo", "Estimate"],
  elpd_i = as.vector(fit$pointwise[, "elpd_loo"]), pareto_k = as.vector(fit$diagnostics$pareto_k),
  pareto_k_ids = as.vector(pareto_k_ids(fit, threshold = 0.7)), pareto_k_table = as.vector(tab[, "Count"]),
  mean = e("mean"), variance = e("variance"), quantile = e("quantile", probs),
  mae = metric("mae"), mse = metric("mse"), rmse = metric("rmse")
)
cat(jsonlite::toJSON(out, digits = NA, auto_unbox = TRUE))
