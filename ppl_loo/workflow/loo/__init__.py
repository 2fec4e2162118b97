"""``pl.loo``: adaptive importance-sampling LOO and everything it runs (reading the draws, plain PSIS, the
search, the second opinions in :mod:`.vouch`, out-of-core and distributed paths, the result); its exact refits
(``refit=``) are in :mod:`ppl_loo.workflow.exact`."""
