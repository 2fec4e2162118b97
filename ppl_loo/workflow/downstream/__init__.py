"""What users run after LOO: ``pl.compare``, ``pl.loo_expectation``, ``pl.loo_roc``."""
