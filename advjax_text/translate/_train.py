"""Training and translation for the seq2seq models: pure jitted steps plus a small loop.

`train_step` minimises the token-level NLL (teacher forcing, PAD masked); with
`adv_alpha` > 0 the step instead minimises (1 - alpha) * NLL(x) + alpha * NLL(x_adv) where
x_adv is made on the fly by `advjax_text.translate` (adversarial training of Michel
et al. 2019, Sec. 6). The loop takes a `log` callback and does no file I/O itself.
Everything accepts an `LSTMConfig` or a `TransformerConfig`; `build_model` picks the class.
"""

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from advjax.types import Array
from advjax_text.tokenize import EOS, PAD
from advjax_text.translate._batches import batches, bucket_length, pad_batch
from advjax_text.translate._beam import beam_decode
from advjax_text.translate._lstm import LSTMConfig, LSTMSeq2Seq, greedy_decode
from advjax_text.translate._transformer import TransformerConfig, TransformerSeq2Seq

ModelConfig = LSTMConfig | TransformerConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Optimisation settings of one seq2seq training run."""

    epochs: int = 8
    batch_size: int = 64
    learning_rate: float = 2e-3
    clip_norm: float = 1.0
    max_len: int = 32
    seed: int = 0

    def __post_init__(self):
        for name, low in (("epochs", 0), ("batch_size", 1), ("max_len", 2)):
            if getattr(self, name) < low:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= {low}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")


class TrainState(train_state.TrainState):
    """Flax train state (params, optimiser state, step)."""


def build_model(model_config: ModelConfig) -> nn.Module:
    """The Flax module a model config describes.

    Raises:
      TypeError: `model_config` is neither an `LSTMConfig` nor a `TransformerConfig`.
    """
    if isinstance(model_config, LSTMConfig):
        return LSTMSeq2Seq(model_config)
    if isinstance(model_config, TransformerConfig):
        return TransformerSeq2Seq(model_config)
    raise TypeError(f"unknown model config {type(model_config).__name__}: {model_config!r}")


def create_train_state(key: Array, model_config: ModelConfig, config: TrainConfig) -> TrainState:
    """Initialise the model and an Adam optimiser with global-norm clipping."""
    model = build_model(model_config)
    src = jnp.full((2, 8), 4, jnp.int32)
    params = jax.jit(model.init)(key, src, src)["params"]
    tx = optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.adam(config.learning_rate))
    return TrainState.create(apply_fn=model.apply, params=params, tx=tx)


def token_nll(logits: Array, tgt_out: Array) -> tuple[Array, Array]:
    """Summed NLL over non-PAD target tokens and their count."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, tgt_out[..., None], axis=-1)[..., 0]
    mask = tgt_out != PAD
    return jnp.sum(nll * mask), jnp.sum(mask)


@jax.jit
def train_step(state: TrainState, src: Array, tgt_in: Array, tgt_out: Array, key: Array):
    """One NLL step; returns (new state, mean token NLL)."""

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, src, tgt_in, train=True, rngs={"dropout": key})
        total, count = token_nll(logits, tgt_out)
        return total / jnp.maximum(count, 1)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


@jax.jit
def eval_step(state: TrainState, src: Array, tgt_in: Array, tgt_out: Array) -> tuple[Array, Array]:
    """Summed NLL and token count of one batch (no dropout)."""
    return token_nll(state.apply_fn({"params": state.params}, src, tgt_in), tgt_out)


def fit(
    model_config: ModelConfig,
    config: TrainConfig,
    train: tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]],
    val: tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]],
    *,
    step_fn: Callable | None = None,
    init_params: Any = None,
    log: Callable[[dict], Any] = lambda _: None,
) -> tuple[TrainState, list[dict]]:
    """Train for `config.epochs` epochs; log one dict per epoch (loss, val NLL, seconds).

    `step_fn(state, src, tgt_in, tgt_out, key) -> (state, loss)` replaces `train_step`
    (adversarial training); `init_params` starts from trained parameters (fine-tuning).
    Keys: `fold_in(fold_in(root, epoch), batch)`.
    """
    root = jax.random.key(config.seed)
    state = create_train_state(jax.random.fold_in(root, 0), model_config, config)
    if init_params is not None:
        state = state.replace(params=init_params, opt_state=state.tx.init(init_params))
    step_fn = step_fn or train_step
    history = []
    for epoch in range(config.epochs):
        start = time.perf_counter()
        rng = np.random.default_rng(config.seed * 1000 + epoch)
        epoch_key = jax.random.fold_in(jax.random.fold_in(root, 1), epoch)
        losses = []
        for b, (s, ti, to) in enumerate(
            batches(*train, batch_size=config.batch_size, rng=rng, max_len=config.max_len)
        ):
            state, loss = step_fn(state, s, ti, to, jax.random.fold_in(epoch_key, b))
            losses.append(loss)
        train_loss = float(np.mean(jax.device_get(losses)))
        seconds = time.perf_counter() - start
        total = count = 0.0
        for s, ti, to in batches(*val, batch_size=config.batch_size, max_len=config.max_len):
            t, c = eval_step(state, s, ti, to)
            total, count = total + float(t), count + float(c)
        entry = {
            "epoch": epoch + 1,
            "train_nll": train_loss,
            "val_nll": total / max(count, 1),
            "seconds": seconds,
        }
        history.append(entry)
        log(entry)
    return state, history


def translate(
    model_config: ModelConfig,
    params,
    src: Sequence[Sequence[int]],
    *,
    batch_size: int = 128,
    max_len: int = 32,
    beam_size: int | None = None,
    alpha: float = 0.6,
) -> list[list[int]]:
    """Translations (output ids without <eos>) of every source id sequence, in order:
    greedy by default, beam search (`advjax_text.translate`, length exponent `alpha`) when
    `beam_size` is given."""
    decode = _decoder(model_config, max_len, beam_size, alpha)
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    out: list[list[int]] = [[] for _ in src]
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        length = bucket_length(max(len(src[i]) for i in idx), step=16, max_len=max_len)
        fill = batch_size - len(idx)
        ids = np.asarray(decode(params, pad_batch([src[i] for i in idx] + [[]] * fill, length)))
        for row, i in enumerate(idx):
            seq = list(ids[row])
            out[i] = (
                [int(t) for t in seq[: seq.index(EOS)]]
                if EOS in seq
                else [int(t) for t in seq if t != PAD]
            )
    return out


_DECODERS: dict = {}


def _decoder(model_config: ModelConfig, max_len: int, beam_size: int | None, alpha: float):
    key = (model_config, max_len, beam_size, alpha)
    if key not in _DECODERS:
        model = build_model(model_config)

        def decode(params, src):
            if beam_size is None:
                return greedy_decode(model, params, src, max_len=max_len)
            return beam_decode(
                model, params, src, beam_size=beam_size, max_len=max_len, alpha=alpha
            ).tokens

        _DECODERS[key] = jax.jit(decode)
    return _DECODERS[key]
