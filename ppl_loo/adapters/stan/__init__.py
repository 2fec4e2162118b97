"""The Stan adapter: a ``pl.StanModel`` (the in-process bridge) as the protocol, exact LOO by data deletion."""
