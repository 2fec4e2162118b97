"""The stan backend of the model protocol."""
