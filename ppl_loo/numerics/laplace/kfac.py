"""Kronecker-factored (KFAC) Laplace covariance and exact Fisher-factor products for dense networks.

Notes A7: per layer the GGN block is approximated by a Kronecker product and the prior ``lambda`` is
added *exactly* through eigendecompositions, as laplace-torch's ``KronLaplace``:

    (G (x) A + lambda I)^{-1} = (Q_G (x) Q_A) (D_G (x) D_A + lambda)^{-1} (Q_G (x) Q_A)^T.

Layers and the parameter vector
-------------------------------
A network is a chain of dense layers ``z_l = W_l a_l + b_l`` (``W_l`` of shape ``(out, in)``, the
PyTorch convention), ``a_{l+1} = activation(z_l)``, output ``f = z_L``. A :class:`DenseLayer` says
where ``W_l`` and ``b_l`` sit in the flat ``theta``:

- :func:`mlp_layers` for ``theta = ravel_pytree([(W_1, b_1), (W_2, b_2), ...])`` (row-major, weight
  then bias per layer: the order of ``torch.nn.utils.parameters_to_vector`` for an ``nn.Sequential`` of
  ``nn.Linear``, so weights can be exchanged with PyTorch unchanged);
- :func:`relu_net_layers` for :class:`ppl_loo.models.ReluNet` (``theta = [vec(W1), W2, b2]``, the
  first-layer bias folded into ``W1`` through the constant-1 input column: pass the augmented inputs).

Curvature ingredients (:class:`Taps`, from :func:`layer_taps`): the layer inputs ``a_il`` and the
backpropagated output-Hessian square roots ``g_ikl = (d f(x_i) / d z_il)^T L_i[:, k]`` (``L_i L_i^T = H_i``,
:func:`ppl_loo.numerics.laplace.precision.lik_hessian_sqrt`). Then, exactly, the Fisher factor of
Eq. (8) has entries ``V[(l, o, a), (i, k)] = g_iko a_ia`` (weights) and ``g_iko`` (biases), which gives
the structured products :func:`factor_rmat`, :func:`factor_mat`, :func:`factor_gram` (``V^T V``, the
``m x m`` Gram of the ``m = n K`` rows, in ``O(m^2 width)`` instead of ``O(m^2 d)``) and
:func:`factor_diag`. KFAC (:func:`kfac`) uses, per layer, ``G_l = sum_ik g_ik g_ik^T`` and
``A_l = (1/n) sum_i a_i a_i^T`` (laplace-torch/BackPACK scaling for a full batch) for the weight block
``G_l (x) A_l``, and the exact ``G_l`` for the bias block (BackPACK treats the bias separately).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ppl_loo.numerics.laplace.precision import FactorOperator

__all__ = [
    "KFAC",
    "DenseLayer",
    "Taps",
    "dense_apply",
    "dense_forward",
    "factor_diag",
    "factor_gram",
    "factor_mat",
    "factor_operator",
    "factor_rmat",
    "factor_rows",
    "kfac",
    "layer_taps",
    "mlp_init",
    "mlp_layers",
    "relu_net_layers",
]


class DenseLayer(NamedTuple):
    """Positions in ``theta`` of one dense layer's ``W`` (``w_index``, ``(out, in)``) and ``b``
    (``b_index``, ``(out,)``, or None when there is no separate bias)."""

    w_index: np.ndarray
    b_index: np.ndarray | None = None


class Taps(NamedTuple):
    """Per layer, the inputs ``acts[l]`` (``(n, in_l)``) and backpropagated Hessian-square-root columns
    ``grads[l]`` (``(n, K, out_l)``) at ``theta_hat`` (module docstring)."""

    acts: tuple
    grads: tuple


# ----------------------------------------------------------------------------- layouts and forward
def mlp_layers(sizes):
    """Layers of ``theta = ravel_pytree([(W_1, b_1), ...])`` for layer widths ``sizes``
    (``(d_in, h_1, ..., C)``), ``W_l`` of shape ``(sizes[l+1], sizes[l])``. The dimension is
    ``sum (in + 1) out``."""
    layers, off = [], 0
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        w = off + np.arange(n_in * n_out).reshape(n_out, n_in)
        off += n_in * n_out
        layers.append(DenseLayer(w, off + np.arange(n_out)))
        off += n_out
    return tuple(layers)


def relu_net_layers(hidden, n_inputs, w1_index, w2_index, b2_index):
    """Layers of :class:`ppl_loo.models.ReluNet`'s ``theta`` (its ``ReluStructure`` indices):
    ``W1`` ``(hidden, n_inputs)`` on the augmented inputs ``[x, 1]`` (bias folded, ``n_inputs = p + 1``),
    then ``W2`` ``(1, hidden)`` with bias ``b2``."""
    w1 = np.asarray(w1_index).reshape(int(hidden), int(n_inputs))
    w2 = np.asarray(w2_index).reshape(1, int(hidden))
    return (DenseLayer(w1, None), DenseLayer(w2, np.asarray([int(b2_index)])))


def mlp_init(key, sizes):
    """PyTorch's default ``nn.Linear`` initialization (``U(-1/sqrt(in), 1/sqrt(in))`` for ``W`` and
    ``b``), flattened in the :func:`mlp_layers` order."""
    parts = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, kw, kb = jax.random.split(key, 3)
        bound = 1.0 / np.sqrt(n_in)
        parts += [jax.random.uniform(kw, (n_out * n_in,), minval=-bound, maxval=bound),
                  jax.random.uniform(kb, (n_out,), minval=-bound, maxval=bound)]
    return jnp.concatenate(parts)


def dense_forward(layers, X, activation=jax.nn.relu):
    """``forward(theta, eps=None) -> (f (n, C), acts)``: the network with optional additive
    perturbations ``eps[l]`` (``(n, out_l)``) of the pre-activations (their gradients are the taps)."""
    X = jnp.asarray(X)

    def forward(theta, eps=None):
        a, acts = X, []
        for l, layer in enumerate(layers):
            acts.append(a)
            z = a @ theta[layer.w_index].T
            if layer.b_index is not None:
                z = z + theta[layer.b_index]
            if eps is not None:
                z = z + eps[l]
            a = activation(z) if l < len(layers) - 1 else z
        return a, tuple(acts)

    return forward


def dense_apply(layers, theta, X, activation=jax.nn.relu):
    """The outputs ``f(theta, X)`` (``(n, C)``) of :func:`dense_forward`."""
    return dense_forward(layers, X, activation)(theta)[0]


def layer_taps(forward, theta, L, layers):
    """:class:`Taps` at ``theta``: ``forward`` as from :func:`dense_forward`, ``L`` (``(n, C, K)``) the
    output-Hessian square roots. One reverse pass per ``k`` (per-sample gradients come for free because
    the perturbations ``eps`` are per sample)."""
    n = jnp.asarray(L).shape[0]
    zeros = tuple(jnp.zeros((n, lay.w_index.shape[0]), dtype=jnp.asarray(theta).dtype) for lay in layers)
    _, acts = forward(theta, zeros)
    _, vjp = jax.vjp(lambda e: forward(theta, e)[0], zeros)
    grads = jax.vmap(lambda u: vjp(u)[0], in_axes=2, out_axes=1)(jnp.asarray(L))
    return Taps(tuple(acts), tuple(grads))


# ----------------------------------------------------------------------------- exact factor products
def factor_rmat(layers, taps, B):
    """``V^T B`` (``(n K, k)``) for ``B`` (``(d, k)``), exact (module docstring)."""
    n, K = taps.grads[0].shape[:2]
    out = 0.0
    for layer, a, g in zip(layers, taps.acts, taps.grads):
        T = jnp.einsum("ia,oac->ioc", a, B[layer.w_index])
        out = out + jnp.einsum("iko,ioc->ikc", g, T)
        if layer.b_index is not None:
            out = out + jnp.einsum("iko,oc->ikc", g, B[layer.b_index])
    return out.reshape(n * K, B.shape[1])


def factor_mat(layers, taps, U, dim):
    """``V U`` (``(d, k)``) for ``U`` (``(n K, k)``), exact; rows of parameters in no layer are 0."""
    n, K = taps.grads[0].shape[:2]
    Ur = U.reshape(n, K, U.shape[1])
    res = jnp.zeros((dim, U.shape[1]), dtype=U.dtype)
    for layer, a, g in zip(layers, taps.acts, taps.grads):
        T = jnp.einsum("iko,ikc->ioc", g, Ur)
        res = res.at[layer.w_index].set(jnp.einsum("ioc,ia->oac", T, a))
        if layer.b_index is not None:
            res = res.at[layer.b_index].set(jnp.sum(T, axis=0))
    return res


def factor_rows(layers, taps, index):
    """``V[index, :]`` (``(len(index), n K)``): the Fisher-factor rows of a parameter subset (the subset
    LA's ``P^T V`` for ``P = (e_j)_{j in index}``), gathered without forming ``V``: weight ``(o, a)`` of a
    layer gives ``g_iko a_ia``, a bias ``g_iko``, a parameter in no layer 0."""
    index = np.asarray(index, dtype=int)
    n, K = taps.grads[0].shape[:2]
    dim = max([int(index.max()) + 1] + [int(lay.w_index.max()) + 1 for lay in layers]
              + [int(lay.b_index.max()) + 1 for lay in layers if lay.b_index is not None])
    go, ai = np.full(dim, -1), np.full(dim, -1)  # column of the stacked g and a of every parameter
    g_off = a_off = 0
    for layer in layers:
        n_out, n_in = layer.w_index.shape
        go[layer.w_index] = g_off + np.arange(n_out)[:, None]
        ai[layer.w_index] = a_off + np.arange(n_in)[None, :]
        if layer.b_index is not None:
            go[layer.b_index] = g_off + np.arange(n_out)
        g_off, a_off = g_off + n_out, a_off + n_in
    G = jnp.concatenate(list(taps.grads) + [jnp.zeros((n, K, 1), taps.grads[0].dtype)], axis=2)  # last: 0
    A = jnp.concatenate(list(taps.acts) + [jnp.ones((n, 1), taps.acts[0].dtype)], axis=1)  # last: bias 1
    gsel = np.where(go[index] >= 0, go[index], g_off)
    asel = np.where(ai[index] >= 0, ai[index], a_off)
    return (G[:, :, gsel] * A[:, None, asel]).reshape(n * K, index.shape[0]).T


def factor_gram(layers, taps):
    """``V^T V`` (``(n K, n K)``) from the per-layer Grams: ``sum_l (g g^T) * (a a^T [+ 1 with bias])``."""
    n, K = taps.grads[0].shape[:2]
    out = 0.0
    for layer, a, g in zip(layers, taps.acts, taps.grads):
        gg = g.reshape(n * K, -1)
        Aa = a @ a.T + (1.0 if layer.b_index is not None else 0.0)
        out = out + ((gg @ gg.T).reshape(n, K, n, K) * Aa[:, None, :, None]).reshape(n * K, n * K)
    return out


def factor_diag(layers, taps, dim):
    """``diag(V V^T)`` (``(d,)``): the exact diagonal of the GGN without the prior."""
    res = jnp.zeros((dim,), dtype=taps.acts[0].dtype)
    for layer, a, g in zip(layers, taps.acts, taps.grads):
        res = res.at[layer.w_index].set(jnp.einsum("iko,ia->oa", g**2, a**2))
        if layer.b_index is not None:
            res = res.at[layer.b_index].set(jnp.sum(g**2, axis=(0, 1)))
    return res


def factor_operator(layers, taps, dim, *, chunk=128):
    """The Fisher factor as a :class:`~ppl_loo.numerics.laplace.precision.FactorOperator`: jitted
    :func:`factor_mat` / :func:`factor_rmat` applied in blocks of ``chunk`` columns, and the exact
    :func:`factor_gram`."""
    rm = jax.jit(lambda t, B: factor_rmat(layers, t, B))
    mm = jax.jit(lambda t, U: factor_mat(layers, t, U, dim))

    def blocks(fn, X):  # fixed-width blocks (the last one zero-padded): one compiled program
        k = X.shape[1]
        Xp = jnp.pad(X, ((0, 0), (0, (-k) % chunk))) if k > chunk else X
        return jnp.concatenate([fn(taps, Xp[:, j:j + chunk]) for j in range(0, Xp.shape[1], chunk)], axis=1)[:, :k]

    gram = jax.jit(lambda t: factor_gram(layers, t))(taps)
    return FactorOperator(lambda U: blocks(mm, U), lambda B: blocks(rm, B), gram, (dim, gram.shape[0]))


# ----------------------------------------------------------------------------- KFAC
class KFAC(NamedTuple):
    """KFAC posterior covariance ``Psi_KFAC = (block-diag(G_l (x) A_l, G_l) + lambda I)^{-1}``.

    ``factors[l] = (wA, QA, wG, QG)`` are the eigendecompositions of ``A_l`` and ``G_l``; parameters in
    no layer get the prior variance ``1 / lambda``. Methods: :meth:`psi_mat`, :meth:`diag`,
    :meth:`prec_mat` (the KFAC precision itself).
    """

    layers: tuple
    factors: tuple
    lam: float
    dim: int

    def _apply(self, B, power):
        out = B * self.lam**power
        for layer, (wA, QA, wG, QG) in zip(self.layers, self.factors):
            Y = jnp.einsum("op,oak->pak", QG, B[layer.w_index])  # Q_G^T X Q_A, in two contractions
            Y = jnp.einsum("pak,aq->pqk", Y, QA) * ((wG[:, None] * wA[None, :] + self.lam) ** power)[..., None]
            Z = jnp.einsum("op,pqk->oqk", QG, Y)
            out = out.at[layer.w_index].set(jnp.einsum("oqk,aq->oak", Z, QA))
            if layer.b_index is not None:
                y = (QG.T @ B[layer.b_index]) * ((wG + self.lam) ** power)[:, None]
                out = out.at[layer.b_index].set(QG @ y)
        return out

    def psi_mat(self, B):
        """``Psi_KFAC B`` for ``B`` of shape ``(d, k)``."""
        return self._apply(jnp.asarray(B), -1.0)

    def prec_mat(self, B):
        """``Psi_KFAC^{-1} B`` for ``B`` of shape ``(d, k)``."""
        return self._apply(jnp.asarray(B), 1.0)

    def diag(self):
        """``diag(Psi_KFAC)`` (``(d,)``), exact for the Kronecker model."""
        out = jnp.full((self.dim,), 1.0 / self.lam)
        for layer, (wA, QA, wG, QG) in zip(self.layers, self.factors):
            inv = 1.0 / (wG[:, None] * wA[None, :] + self.lam)
            out = out.at[layer.w_index].set(jnp.einsum("op,aq,pq->oa", QG**2, QA**2, inv))
            if layer.b_index is not None:
                out = out.at[layer.b_index].set((QG**2) @ (1.0 / (wG + self.lam)))
        return out


def kfac(layers, taps, prior_prec, dim):
    """The KFAC Laplace covariance (notes A7) of the GGN plus an isotropic prior ``prior_prec``.

    Parameters
    ----------
    layers : sequence of DenseLayer
    taps : Taps
        From :func:`layer_taps` on the **full** training set (Section 4.2, step 1).
    prior_prec : float
        ``lambda`` (added exactly in the eigenbasis).
    dim : int
        ``d``, the length of ``theta``.
    """
    factors = []
    for a, g in zip(taps.acts, taps.grads):
        A = a.T @ a / a.shape[0]
        G = jnp.einsum("iko,ikp->op", g, g)
        wA, QA = jnp.linalg.eigh(0.5 * (A + A.T))
        wG, QG = jnp.linalg.eigh(0.5 * (G + G.T))
        factors.append((jnp.clip(wA, 0.0, None), QA, jnp.clip(wG, 0.0, None), QG))
    return KFAC(tuple(layers), tuple(factors), float(prior_prec), int(dim))

