"""Adversarial training of seq2seq models with on-the-fly one-word perturbations.

Michel et al. (2019, Sec. 6) replace the NLL objective by
(1 - alpha) * NLL(x, y) + alpha * NLL(x_adv, y). Here x_adv is made inside the jitted
step: one forward/backward pass on the clean batch gives both the parameter gradient of
NLL(x) and its gradient with respect to the source embeddings; the latter scores every
(position, replacement) pair to first order (as in `advjax_text.translate`), the
`top_k` best are kept, and each sentence takes one of them at random (`key`). A second
forward/backward pass on x_adv gives the adversarial gradient. The step therefore costs
about two clean steps (a little less for alpha = 1, where the clean pass needs no
parameter gradient); it uses the NLL gradient (not the attack loss's) to
rank candidates so that no third pass is needed, and does not re-score exactly: both
are approximations made for cost, stated here and in the report. Works for any model
whose source embedding table is `params["src_embedding"]` (the LSTM and the Transformer).
"""

from typing import Callable

import jax
import jax.numpy as jnp

from advjax.types import Array, ArrayLike
from advjax_text.tokenize import PAD
from advjax_text.translate._attack import SETTINGS, candidate_scores, first_order_scores
from advjax_text.translate._train import TrainState, token_nll


def make_adv_train_step(
    *,
    setting: str,
    alpha: float,
    word_mask: ArrayLike,
    knn: ArrayLike | None = None,
    top_k: int = 3,
) -> Callable[[TrainState, Array, Array, Array, Array], tuple[TrainState, Array]]:
    """A jitted `(state, src, tgt_in, tgt_out, key) -> (state, loss)` adversarial step.

    Args:
      setting: "unconstrained", "knn" or "charswap" (word-level: the word becomes <unk>).
      alpha: weight of the adversarial NLL, in (0, 1] (the paper uses 1.0 and 0.5).
      word_mask: (V,) tokens that may be attacked and used as replacements.
      knn: (V, k) neighbour table, for "knn".
      top_k: candidates per sentence among which the perturbation is drawn.

    Raises:
      ValueError: bad setting, alpha or top_k.
    """
    if setting not in SETTINGS:
        raise ValueError(f"setting={setting!r} must be one of {SETTINGS}")
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha={alpha} must be in (0, 1]")
    if top_k < 1:
        raise ValueError(f"{top_k=} must be >= 1")
    if setting == "knn" and knn is None:
        raise ValueError("setting='knn' needs a knn table")
    word_mask = jnp.asarray(word_mask, bool)
    knn = None if knn is None else jnp.asarray(knn)

    @jax.jit
    def step(state: TrainState, src: Array, tgt_in: Array, tgt_out: Array, key: Array):
        drop_clean, drop_adv, pick_key = jax.random.split(key, 3)
        mask = src != PAD

        def nll(params, emb, dropout_key):
            logits = state.apply_fn(
                {"params": params}, emb, mask, tgt_in, train=True, rngs={"dropout": dropout_key},
                method="logits_from_embeddings",
            )  # fmt: skip
            total, count = token_nll(logits, tgt_out)
            return total / jnp.maximum(count, 1)

        def embed(params, ids):
            return jnp.take(params["src_embedding"], ids, axis=0)

        if alpha < 1:
            clean_loss, (g_params, g_emb) = jax.value_and_grad(nll, argnums=(0, 1))(
                state.params, embed(state.params, src), drop_clean
            )
            g_params = _add_lookup_grad(g_params, src, g_emb)  # the lookup's own gradient
        else:  # alpha = 1: only the embedding gradient of the clean pass is needed
            clean_loss, g_emb = jax.value_and_grad(nll, argnums=1)(
                state.params, embed(state.params, src), drop_clean
            )
            g_params = jax.tree.map(jnp.zeros_like, state.params)
        embedding = jax.lax.stop_gradient(state.params["src_embedding"])
        adv = draw_perturbation(
            g_emb,
            embedding,
            src,
            pick_key,
            setting=setting,
            word_mask=word_mask,
            knn=knn,
            top_k=top_k,
        )

        def adv_nll(params):
            return nll(params, embed(params, adv), drop_adv)

        adv_loss, g_adv = jax.value_and_grad(adv_nll)(state.params)
        grads = jax.tree.map(lambda c, a: (1 - alpha) * c + alpha * a, g_params, g_adv)
        loss = (1 - alpha) * clean_loss + alpha * adv_loss
        return state.apply_gradients(grads=grads), loss

    return step


def draw_perturbation(
    grad: Array,
    embedding: Array,
    src: Array,
    key: Array,
    *,
    setting: str,
    word_mask: Array,
    knn: Array | None,
    top_k: int,
) -> Array:
    """One-word perturbation per sentence, drawn uniformly among its `top_k` first-order
    candidates (gradient `grad` w.r.t. the source embeddings); rows with no candidate stay."""
    scores = first_order_scores(grad, embedding, src)
    ids, cand = candidate_scores(scores, src, setting=setting, word_mask=word_mask, knn=knn)
    b, s, k = ids.shape
    best, flat = jax.lax.top_k(cand.reshape(b, s * k), min(top_k, s * k))
    n_ok = jnp.sum(jnp.isfinite(best), axis=1)
    choice = jnp.floor(jax.random.uniform(key, (b,)) * jnp.maximum(n_ok, 1)).astype(jnp.int32)
    chosen = jnp.take_along_axis(flat, choice[:, None], axis=1)[:, 0]
    pos = chosen // k
    new = jnp.take_along_axis(ids.reshape(b, s * k), chosen[:, None], axis=1)[:, 0]
    hit = (jnp.arange(s)[None, :] == pos[:, None]) & (n_ok > 0)[:, None]
    return jnp.where(hit, new[:, None], src)


def _add_lookup_grad(grads: dict, src: Array, g_emb: Array) -> dict:
    """Add the gradient that flows through `src_embedding[src]` to the embedding table's."""
    table = grads["src_embedding"]
    flat_ids, flat_g = src.reshape(-1), g_emb.reshape(-1, g_emb.shape[-1])
    return {**grads, "src_embedding": table.at[flat_ids].add(flat_g)}
