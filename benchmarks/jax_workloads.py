"""The JAX side: advjax workloads built and timed the way torch_reference.py times its own.

Every timed region ends with `jax.block_until_ready`, so asynchronous dispatch never hides
work. Data is synthetic uint8 of CIFAR shape, as in the reference.
"""

import math
import statistics
import time
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from advjax.evaluation import AttackSpec
from advjax.evaluation.engine import make_attack_fn
from advjax_train import (
    Batch,
    CompactCNN,
    TrainConfig,
    create_train_state,
    eval_logits_fn,
    make_train_step,
    to_float,
)
from benchmarks.config import EPS, BenchConfig, WorkloadSpec


class Workload(Protocol):
    """A benchmark workload: one untimed-by-the-table first call, then timed repetitions."""

    images_per_rep: int
    calls_per_rep: int

    def first_call(self) -> float:
        """Run the first call (it compiles) and any warm-up; return the first call's seconds."""
        ...

    def rep(self) -> float:
        """Run one repetition and return its wall-clock seconds."""
        ...


def synthetic(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Uniform random uint8 NHWC images of CIFAR shape and int32 labels in [0, 10)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=(n,)).astype(np.int32)
    return images, labels


class TrainWorkload:
    """`config.train_steps` jitted advjax train steps per repetition, batches drawn on the host.

    Like the reference, each step gathers a batch from a shuffled uint8 pool (numpy indexing),
    and augmentation runs inside the step; the optimiser's cosine schedule spans 12 epochs.
    """

    def __init__(self, spec: WorkloadSpec, config: BenchConfig, seed: int = 0):
        train_config = TrainConfig(mode=spec.mode, batch_size=config.train_batch)
        total_steps = 12 * math.ceil(config.n_data / config.train_batch)
        self._state = create_train_state(jax.random.key(seed), train_config, total_steps)
        self._step = make_train_step(train_config)
        self._images, self._labels = synthetic(config.n_data, seed=0)
        self._perm = np.random.default_rng(seed).permutation(config.n_data)
        self._batch = config.train_batch
        self._steps = config.train_steps
        self._key = jax.random.key(seed + 1)
        self._pointer = 0
        self._count = 0
        self.images_per_rep = config.train_steps * config.train_batch
        self.calls_per_rep = config.train_steps

    def _one_step(self):
        start = self._pointer if self._pointer + self._batch <= len(self._perm) else 0
        self._pointer = start + self._batch
        index = self._perm[start : self._pointer]
        batch = Batch(images=self._images[index], labels=self._labels[index])
        key = jax.random.fold_in(self._key, self._count)
        self._count += 1
        self._state, metrics = self._step(self._state, batch, key)
        return metrics

    def first_call(self) -> float:
        start = time.perf_counter()
        metrics = self._one_step()
        jax.block_until_ready((self._state, metrics))
        first = time.perf_counter() - start
        for _ in range(2):
            metrics = self._one_step()
            jax.block_until_ready((self._state, metrics))
        return first

    def rep(self) -> float:
        start = time.perf_counter()
        for _ in range(self._steps):
            metrics = self._one_step()
        jax.block_until_ready((self._state, metrics))
        return time.perf_counter() - start


class EvalWorkload:
    """FGSM, PGD or clean inference over `config.n_eval` images in batches of `eval_batch`.

    Attacks use `advjax.evaluation.engine.make_attack_fn`, which, like the reference, also scores the
    attacked batch with a final forward pass; the model is a freshly initialised CompactCNN
    in eval mode. One repetition is one pass over all images.
    """

    def __init__(self, spec: WorkloadSpec, config: BenchConfig, seed: int = 0):
        state = create_train_state(jax.random.key(seed), TrainConfig(), 1)
        variables = {"params": state.params, "batch_stats": state.batch_stats}
        logits_fn = eval_logits_fn(CompactCNN(), variables)
        self._kind = spec.kind
        if spec.kind == "infer":
            self._fn = jax.jit(lambda x: jnp.argmax(logits_fn(x), axis=-1))
        else:
            steps = 1 if spec.kind == "fgsm" else config.pgd_steps
            attack = AttackSpec(name=spec.kind, method=spec.kind, eps=(EPS,), steps=steps,
                                restarts=spec.restarts)  # fmt: skip
            self._fn = make_attack_fn(logits_fn, attack)
        images, labels = synthetic(config.n_eval, seed=1)
        x_all = to_float(images)
        b = config.eval_batch
        self._batches = [
            (x_all[i : i + b], jnp.asarray(labels[i : i + b])) for i in range(0, config.n_eval, b)
        ]
        base_key = jax.random.key(seed + 2)
        self._keys = [jax.random.fold_in(base_key, i) for i in range(len(self._batches))]
        self._eps = jnp.float32(EPS)
        jax.block_until_ready((self._batches, self._keys))
        self.images_per_rep = config.n_eval
        self.calls_per_rep = 1

    def _pass(self) -> int:
        correct = []
        for (x, y), key in zip(self._batches, self._keys):
            if self._kind == "infer":
                predictions = self._fn(x)
            else:
                _, predictions, _ = self._fn(x, y, self._eps, key)
            correct.append(jnp.sum(predictions == y))
        return int(sum(jax.block_until_ready(correct)))

    def first_call(self) -> float:
        start = time.perf_counter()
        self._pass()
        return time.perf_counter() - start

    def rep(self) -> float:
        start = time.perf_counter()
        self._pass()
        return time.perf_counter() - start


def build_workload(spec: WorkloadSpec, config: BenchConfig) -> Workload:
    """The JAX workload for a table row."""
    if spec.kind == "train":
        return TrainWorkload(spec, config)
    return EvalWorkload(spec, config)


def matmul_peak(size: int, reps: int) -> dict:
    """Median and best GFLOP/s of a jitted `jnp.dot` of two float32 `size x size` matrices."""
    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (size, size), jnp.float32)
    b = jax.random.normal(key_b, (size, size), jnp.float32)
    dot = jax.jit(jnp.dot)
    for _ in range(2):
        dot(a, b).block_until_ready()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        dot(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    gflop = 2 * size**3 / 1e9
    return {
        "size": size,
        "reps": reps,
        "times_s": times,
        "gflops_median": gflop / statistics.median(times),
        "gflops_best": gflop / min(times),
    }
