"""``pl.pvi``: predictive variational inference, and the held-out scores of predictive draws."""
