"""The JAX adapters: ``JaxModel`` (plain JAX functions), the closed-form models ``LogisticRegression`` and
``ReluNet``, and the likelihood-free ``SimulatorModel``."""
