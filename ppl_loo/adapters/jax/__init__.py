"""The jax backend of the model protocol."""
