"""What users run after LOO: ``pl.compare``, ``pl.loo_expectations``, ``pl.loo_roc``."""
