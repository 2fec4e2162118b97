"""The model adapters, one package per backend: each turns a user's model into the one protocol.

``jax/`` (:class:`~ppl_loo.adapters.jax.jax_model.JaxModel`, ``LogisticRegression``, ``ReluNet``,
``SimulatorModel``), ``pymc/`` (:class:`~ppl_loo.adapters.pymc.adapter.PyMCModel`) and ``stan/``
(:class:`~ppl_loo.adapters.stan.posterior.StanPosterior`, over the in-process bridge of
:mod:`ppl_loo.stan_bridge`). The protocol and ``as_model`` live in :mod:`ppl_loo.model`.
"""
