# R loo's Monte Carlo SEs of elpd_loo on log-likelihood matrices. Usage: Rscript reference_mcse.R DIR CASE...
# Each DIR/CASE/ holds log_lik.bin (raw little-endian float64, (S, n) row by row) and meta.json (S, n, chains; draws
# chain-major). For every case this writes DIR/CASE/r_mcse.bin: r_eff (n), elpd_loo_i (n), mcse_elpd_loo_i (n),
# pareto_k (n) and mcse_loo (1; NaN where R gives NA), float64, and prints the versions as JSON. The workflow is
# R's recommended one: r_eff <- relative_eff(exp(log_lik), chain_id); loo(log_lik, r_eff = r_eff).
suppressPackageStartupMessages(library(loo))
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
for (case in args[-1]) {
  d <- file.path(dir, case)
  meta <- jsonlite::fromJSON(file.path(d, "meta.json"))
  S <- meta$S; n <- meta$n
  ll <- matrix(readBin(file.path(d, "log_lik.bin"), "double", n = S * n, size = 8, endian = "little"), S, n,
               byrow = TRUE)
  r_eff <- relative_eff(exp(ll), chain_id = rep(seq_len(meta$chains), each = S / meta$chains))
  fit <- suppressWarnings(loo(ll, r_eff = r_eff))
  total <- mcse_loo(fit)
  out <- c(r_eff, fit$pointwise[, "elpd_loo"], fit$pointwise[, "mcse_elpd_loo"], fit$diagnostics$pareto_k,
           if (is.na(total)) NaN else total)
  writeBin(as.double(out), file.path(d, "r_mcse.bin"), size = 8, endian = "little")
}
cat(jsonlite::toJSON(list(r_version = R.version.string, loo_version = as.character(packageVersion("loo")),
                          posterior_version = as.character(packageVersion("posterior"))), auto_unbox = TRUE))
