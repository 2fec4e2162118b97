"""``pl.loo_subsample``: LOO from a subsample of the observations (plain PSIS without a model, the
adaptive search on the subsample with one), and its result."""
