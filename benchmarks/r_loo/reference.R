# R loo's numbers on the cases written by make_reference.py (see there). Usage: Rscript reference.R DIR CASE...
# Each DIR/CASE/ holds the case's inputs as raw little-endian float64 files (meta.json: their shapes). For every
# case this writes DIR/CASE/r_out.bin (the numbers, float64, in the order of DIR/CASE/r_out.json, which names
# them and gives their lengths) and prints nothing else. The loo workflow is R's recommended one:
# r_eff <- relative_eff(exp(log_lik), chain_id); loo(log_lik, r_eff = r_eff).
suppressPackageStartupMessages(library(loo))
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
read_mat <- function(path, S, n) matrix(readBin(path, "double", n = S * n, size = 8, endian = "little"), S, n, byrow = TRUE)

one_case <- function(case) {
  d <- file.path(dir, case)
  meta <- jsonlite::fromJSON(file.path(d, "meta.json"))
  S <- meta$S; n <- meta$n; chains <- meta$chains
  chain_id <- rep(seq_len(chains), each = S / chains)
  ll <- read_mat(file.path(d, "log_lik.bin"), S, n)
  out <- list()
  put <- function(name, value) out[[name]] <<- as.double(value)
  r_eff <- relative_eff(exp(ll), chain_id = chain_id)
  put("r_eff", r_eff)
  fit <- loo(ll, r_eff = r_eff, save_psis = TRUE)
  for (q in c("elpd_loo", "p_loo", "looic")) {
    put(q, fit$estimates[q, "Estimate"]); put(paste0("se_", q), fit$estimates[q, "SE"])
    put(paste0(q, "_i"), fit$pointwise[, q])
  }
  put("mcse_elpd_loo_i", fit$pointwise[, "mcse_elpd_loo"])
  put("influence_pareto_k", fit$pointwise[, "influence_pareto_k"])
  put("pareto_k", fit$diagnostics$pareto_k)
  put("n_eff", fit$diagnostics$n_eff)
  put("pareto_k_table", pareto_k_table(fit)[, "Count"])
  put("pareto_k_table_min_n_eff", pareto_k_table(fit)[, "Min. n_eff"])
  put("k_threshold", loo:::ps_khat_threshold(S))
  put("tail_len", attr(fit$psis_object, "tail_len"))
  put("log_weights", t(weights(fit$psis_object, log = TRUE, normalize = TRUE)))  # (n, S), column by column
  # loo with r_eff = 1 (the default), for the tail length alone
  fit1 <- loo(ll)
  put("elpd_loo_i_reff1", fit1$pointwise[, "elpd_loo"]); put("pareto_k_reff1", fit1$diagnostics$pareto_k)
  w <- suppressWarnings(waic(ll))
  for (q in c("elpd_waic", "p_waic", "waic")) {
    put(q, w$estimates[q, "Estimate"]); put(paste0("se_", q), w$estimates[q, "SE"]); put(paste0(q, "_i"), w$pointwise[, q])
  }
  if (isTRUE(meta$has_pred)) {
    pred <- read_mat(file.path(d, "pred.bin"), S, n)
    y <- readBin(file.path(d, "y.bin"), "double", n = n, size = 8, endian = "little")
    ps <- fit$psis_object
    for (type in c("mean", "variance", "sd")) {
      e <- E_loo(pred, ps, type = type, log_ratios = -ll)
      put(paste0("E_", type), e$value); put(paste0("E_", type, "_k"), e$pareto_k)
    }
    e <- E_loo(pred, ps, type = "quantile", probs = meta$probs, log_ratios = -ll)
    put("E_quantile", e$value); put("E_quantile_k", e$pareto_k)  # (len(probs), n), column by column
    for (m in meta$metrics) {
      r <- loo_predictive_metric(pred, y, ll, metric = m, r_eff = r_eff)
      put(paste0("metric_", m), c(r$estimate, r$se))
    }
    if (isTRUE(meta$has_yrep)) {
      x <- read_mat(file.path(d, "yrep.bin"), S, n); x2 <- read_mat(file.path(d, "yrep2.bin"), S, n)
      set.seed(meta$seed); put("crps_shuffle", sample(1:S))  # the permutation loo_crps draws after set.seed
      set.seed(meta$seed); cr <- suppressWarnings(loo_crps(x, x2, y, ll, r_eff = r_eff))
      set.seed(meta$seed); sc <- suppressWarnings(loo_scrps(x, x2, y, ll, r_eff = r_eff))
      put("crps", cr$estimates); put("crps_i", cr$pointwise); put("scrps", sc$estimates); put("scrps_i", sc$pointwise)
    }
  }
  if (!is.null(meta$compare_with)) {  # loo_compare with a second log-likelihood of the same observations
    ll2 <- read_mat(file.path(d, "log_lik2.bin"), S, n)
    fit2 <- loo(ll2, r_eff = relative_eff(exp(ll2), chain_id = chain_id))
    cmp <- loo_compare(list(a = fit, b = fit2))
    put("compare_elpd_diff", cmp[, "elpd_diff"]); put("compare_se_diff", cmp[, "se_diff"])
    put("compare_order_b_first", as.double(rownames(cmp)[1] == "b"))
    put("elpd_loo_i_2", fit2$pointwise[, "elpd_loo"])
  }
  con <- file(file.path(d, "r_out.bin"), "wb")
  for (v in out) writeBin(v, con, size = 8, endian = "little")
  close(con)
  writeLines(jsonlite::toJSON(lapply(out, length), auto_unbox = TRUE), file.path(d, "r_out.json"))
}

for (case in args[-1]) one_case(case)
cat(jsonlite::toJSON(list(r_version = paste(R.version$major, R.version$minor, sep = "."),
                          loo_version = as.character(packageVersion("loo")),
                          posterior_version = as.character(packageVersion("posterior"))), auto_unbox = TRUE))
