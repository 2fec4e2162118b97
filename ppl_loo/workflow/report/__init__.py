"""``pl.report``: the self-contained HTML page and its figures."""
