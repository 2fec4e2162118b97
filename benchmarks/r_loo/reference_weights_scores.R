# R loo's model weights and (S)CRPS on the inputs of make_reference_weights_scores.py. Usage:
# Rscript reference_weights_scores.R DIR. DIR holds raw little-endian float64 files (meta.json: their shapes); this
# writes DIR/r_out.bin (the numbers, in the order of DIR/r_out.json, which names them and gives their lengths).
suppressPackageStartupMessages(library(loo))
dir <- commandArgs(trailingOnly = TRUE)[1]
meta <- jsonlite::fromJSON(file.path(dir, "meta.json"))
read_mat <- function(name, S, n) {
  matrix(readBin(file.path(dir, name), "double", n = S * n, size = 8, endian = "little"), S, n, byrow = TRUE)
}
out <- list()
put <- function(name, value) out[[name]] <<- as.double(value)

# model weights: three normal models of the outlier data (sigma 1, 1.5, 3), loo with R's recommended r_eff
S <- meta$S; n <- meta$n; chains <- meta$chains
chain_id <- rep(seq_len(chains), each = S / chains)
lls <- lapply(seq_len(meta$K), function(k) read_mat(sprintf("log_lik_%d.bin", k), S, n))
fits <- lapply(lls, function(ll) loo(ll, r_eff = relative_eff(exp(ll), chain_id = chain_id)))
lpd <- sapply(fits, function(f) f$pointwise[, "elpd_loo"])
put("lpd", t(lpd))  # the (n, K) matrix row by row
put("stacking", stacking_weights(lpd))
put("stacking_tight", stacking_weights(lpd, optim_control = list(reltol = 1e-15, maxit = 10000)))
put("pseudobma", pseudobma_weights(lpd, BB = FALSE))
put("loo_model_weights_stacking", loo_model_weights(fits, method = "stacking"))
put("loo_model_weights_pseudobma", loo_model_weights(fits, method = "pseudobma", BB = FALSE))
# the log-likelihood matrices themselves: loo with r_eff = 1 (loo.matrix's default)
put("loo_model_weights_matrices", loo_model_weights(lls, method = "stacking"))
put("lpd_reff1", sapply(lls, function(ll) loo(ll)$pointwise[, "elpd_loo"]))
# two models (sigma 1 and 3): the optimum inside the simplex
put("stacking_two", stacking_weights(lpd[, c(1, 3)]))
put("stacking_two_tight", stacking_weights(lpd[, c(1, 3)], optim_control = list(reltol = 1e-15, maxit = 10000)))
# a model worse than the first everywhere: its stacking weight is 0 at the optimum
lpd_b <- cbind(lpd[, 1:2], lpd[, 1] - 0.5)
put("stacking_boundary", stacking_weights(lpd_b))
put("stacking_boundary_tight", stacking_weights(lpd_b, optim_control = list(reltol = 1e-15, maxit = 10000)))
# pseudo-BMA+ with the Bayesian bootstrap: the Dirichlet draws are the first random numbers it takes after set.seed
for (alpha in c(1, 0.5)) {
  tag <- if (alpha == 1) "" else "_alpha05"
  set.seed(meta$seed); put(paste0("dirichlet", tag), t(loo:::dirichlet_rng(meta$BB_n, rep(alpha, n))))  # row by row
  set.seed(meta$seed); put(paste0("pseudobma_bb", tag), pseudobma_weights(lpd, BB = TRUE, BB_n = meta$BB_n,
                                                                           alpha = alpha))
}

# (S)CRPS of two predictive sets, outside LOO and LOO, with 1 and 3 permutations
Sy <- meta$Sy; ny <- meta$ny
x <- read_mat("yrep.bin", Sy, ny); x2 <- read_mat("yrep2.bin", Sy, ny); ll <- read_mat("log_lik_y.bin", Sy, ny)
y <- readBin(file.path(dir, "y.bin"), "double", n = ny, size = 8, endian = "little")
r_eff <- relative_eff(exp(ll), chain_id = rep(seq_len(meta$chains_y), each = Sy / meta$chains_y))
for (P in c(1, 3)) {
  set.seed(meta$seed); put(sprintf("shuffle_%d", P), replicate(P, sample(1:Sy)))  # (Sy, P) column by column
  set.seed(meta$seed); cr <- crps(x, x2, y, permutations = P)
  set.seed(meta$seed); sc <- scrps(x, x2, y, permutations = P)
  set.seed(meta$seed); lcr <- suppressWarnings(loo_crps(x, x2, y, ll, permutations = P, r_eff = r_eff))
  set.seed(meta$seed); lsc <- suppressWarnings(loo_scrps(x, x2, y, ll, permutations = P, r_eff = r_eff))
  for (nm in c("cr", "sc", "lcr", "lsc")) {
    v <- get(nm)
    put(sprintf("%s_%d", nm, P), v$estimates); put(sprintf("%s_%d_i", nm, P), v$pointwise)
  }
}
# loo_crps with R's default r_eff = 1
set.seed(meta$seed); put("lcr_1_reff1_i", suppressWarnings(loo_crps(x, x2, y, ll))$pointwise)
# one observation: crps.numeric
set.seed(meta$seed); put("cr_numeric", crps(x[, 1], x2[, 1], y[1])$estimates)

con <- file(file.path(dir, "r_out.bin"), "wb")
for (v in out) writeBin(v, con, size = 8, endian = "little")
close(con)
writeLines(jsonlite::toJSON(lapply(out, length), auto_unbox = TRUE), file.path(dir, "r_out.json"))
cat(jsonlite::toJSON(list(r_version = paste(R.version$major, R.version$minor, sep = "."),
                          loo_version = as.character(packageVersion("loo"))), auto_unbox = TRUE))
