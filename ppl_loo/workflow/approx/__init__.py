"""``pl.laplace`` and ``pl.qnvb``: approximations of the posterior as DataTrees, their predictive, and the
stored ``q`` that ``pl.loo`` reads back for Eq. 13."""
