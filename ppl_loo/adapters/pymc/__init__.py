"""The PyMC adapter: a ``pymc.Model`` through PyTensor's JAX backend, its GLM structure and its PVI terms."""
