"""The pymc backend of the model protocol."""
