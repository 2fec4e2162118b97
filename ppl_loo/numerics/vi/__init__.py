"""Variational inference numerics for PVI (Lai & Yao 2024): the variational families (:mod:`.families`),
the proper scores (:mod:`.scores`), the objective and its BlackJAX-style ``init``/``step``
(:mod:`.objective`) and the optimizers, ``optax``'s (:mod:`.optim`)."""
