# R loo's array-level functions on the cases written by make_reference_arrays.py (see there).
# Usage: Rscript reference_arrays.R DIR CASE...
# Each DIR/CASE/ holds meta.json and log_lik.bin (S x n, row-major float64); the "approx" case also log_p.bin and
# log_g.bin (S each). For every case this writes DIR/CASE/r_out.bin (float64, in the order of DIR/CASE/r_out.json,
# which names the numbers and gives their lengths); matrices are written row by row, (S, n). It prints the versions.
suppressPackageStartupMessages(library(loo))
args <- commandArgs(trailingOnly = TRUE)
dir <- args[1]
read_vec <- function(path, len) readBin(path, "double", n = len, size = 8, endian = "little")
read_mat <- function(path, S, n) matrix(read_vec(path, S * n), S, n, byrow = TRUE)

one_case <- function(case) {
  d <- file.path(dir, case)
  meta <- jsonlite::fromJSON(file.path(d, "meta.json"))
  S <- meta$S; n <- meta$n; chains <- meta$chains
  chain_id <- rep(seq_len(chains), each = S / chains)
  ll <- read_mat(file.path(d, "log_lik.bin"), S, n)
  out <- list()
  put <- function(name, value) out[[name]] <<- as.double(value)
  put_fit <- function(prefix, fit) {
    for (q in c("elpd_loo", "p_loo", "looic")) {
      put(paste0(prefix, q), fit$estimates[q, "Estimate"]); put(paste0(prefix, "se_", q), fit$estimates[q, "SE"])
    }
    put(paste0(prefix, "elpd_loo_i"), fit$pointwise[, "elpd_loo"]); put(paste0(prefix, "p_loo_i"), fit$pointwise[, "p_loo"])
    put(paste0(prefix, "pareto_k"), pareto_k_values(fit)); put(paste0(prefix, "n_eff"), psis_n_eff_values(fit))
  }
  if (isTRUE(meta$approx)) {
    log_p <- read_vec(file.path(d, "log_p.bin"), S); log_g <- read_vec(file.path(d, "log_g.bin"), S)
    put_fit("ap_", suppressWarnings(loo_approximate_posterior(ll, log_p = log_p, log_g = log_g)))
  } else {
    arr <- loo:::llmatrix_to_array(ll, chain_id)  # (iteration, chain, observation), R's layout
    r_eff <- relative_eff(exp(arr))
    put("r_eff", r_eff)
    put_fit("array_", suppressWarnings(loo(arr, r_eff = r_eff)))
    put_fit("matrix_", suppressWarnings(loo(ll)))  # r_eff = 1, the default
    for (m in c("psis", "sis", "tis")) {
      fun <- get(m, asNamespace("loo"))
      obj <- suppressWarnings(if (m == "sis") fun(-ll) else fun(-ll, r_eff = r_eff))
      # the (S, n) log weights of psis (unnormalized: the normalized ones are reference.npz's log_weights) and of
      # tis (normalized); sis's are the ratios themselves: its normalizing constants
      if (m == "psis") put("psis_lw_raw", t(weights(obj, normalize = FALSE)))
      if (m == "tis") put("tis_lw", t(weights(obj)))
      put(paste0(m, "_norm_const_log"), attr(obj, "norm_const_log"))
      put(paste0(m, "_pareto_k"), obj$diagnostics$pareto_k)
      put(paste0(m, "_n_eff"), psis_n_eff_values(obj))
      put(paste0(m, "_tail_len"), attr(obj, "tail_len"))
    }
    v <- suppressWarnings(psis(-ll[, 1]))  # a vector: one column, r_eff = 1
    put("psis_vector_weights", weights(v)); put("psis_vector_pareto_k", v$diagnostics$pareto_k)
    # gpdfit on the Pareto tail of the column with the largest k-hat (the exceedances PSIS fits)
    j <- which.max(obj_k <- suppressWarnings(psis(-ll, r_eff = r_eff))$diagnostics$pareto_k)
    M <- loo:::n_pareto(r_eff[j], S)
    lw <- sort(-ll[, j] - max(-ll[, j]))
    x <- exp(lw[(S - M + 1):S]) - exp(lw[S - M])
    put("gpd_x", x); put("gpd_k_psis", obj_k[j])
    for (o in list(c("wip", 1, 30), c("nowip", 0, 30), c("grid10", 1, 10))) {
      fit <- gpdfit(x, wip = as.logical(as.integer(o[2])), min_grid_pts = as.integer(o[3]))
      put(paste0("gpd_", o[1]), c(fit$k, fit$sigma))
    }
    e <- elpd(arr)
    put("elpd_i", e$pointwise[, "elpd"]); put("ic_i", e$pointwise[, "ic"])
    put("elpd_estimates", e$estimates)  # column by column: Estimate (elpd, ic), SE (elpd, ic)
    if (isTRUE(meta$llfun)) {  # loo.function of a normal mean with sigma 1, one observation at a time
      llfun <- function(data_i, draws) dnorm(data_i$y, mean = draws[, "mu"], sd = 1, log = TRUE)
      y <- read_vec(file.path(d, "y.bin"), n)
      mu <- read_vec(file.path(d, "mu.bin"), S)
      fit <- loo(llfun, data = data.frame(y = y), draws = cbind(mu = mu), r_eff = r_eff)
      put_fit("function_", fit)
    }
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
