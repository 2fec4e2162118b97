"""``pl.loo``: adaptive importance-sampling LOO and everything it runs (reading the draws, plain PSIS, the
search, the second opinions in :mod:`.vouch`, exact refits, out-of-core and distributed paths, the result)."""
