"""Array numerics in JAX: pure functions on arrays, no xarray and no model objects."""
