"""Reproducible stratified splits of the study, drawn with explicit `jax.random` keys.

Pure functions of the labels and a key (no I/O): the training and validation subsets come
from the official training split, the evaluation subset from the official test split, whose
labels are used only to stratify it.
"""

from typing import NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from advjax.data._cifar10 import DataError

_TRAIN_STREAM, _VAL_STREAM, _EVAL_STREAM = 0, 1, 2


class StudySplits(NamedTuple):
    """Sorted int64 indices of the study subsets.

    Attributes:
        train: indices into the official training split.
        val: indices into the official training split, disjoint from ``train``.
        eval: indices into the official test split.
    """

    train: np.ndarray
    val: np.ndarray
    eval: np.ndarray


def stratified_indices(
    labels: ArrayLike,
    n: int,
    key: jax.Array,
    *,
    exclude: ArrayLike | None = None,
) -> np.ndarray:
    """Draws ``n`` indices, the same number from each class, without replacement.

    Class ``c`` takes the first ``n // num_classes`` entries of
    ``jax.random.permutation(jax.random.fold_in(key, c), candidates)``, where the
    candidates are its indices not in ``exclude``, in increasing order.

    Args:
        labels: (N,) non-negative integer labels; the classes are those present.
        n: how many indices; must be a multiple of the number of classes.
        key: a ``jax.random`` key.
        exclude: indices that must not be drawn.

    Returns:
        Sorted (n,) int64 indices into ``labels``.

    Raises:
        ValueError: bad ``labels`` or ``exclude``, ``n`` negative or not divisible
            by the number of classes, or a class with too few available indices.

    Example:
        >>> idx = stratified_indices(labels, 1000, jax.random.key(0))
    """
    labels = np.asarray(labels)
    is_int = np.issubdtype(labels.dtype, np.integer)
    if labels.ndim != 1 or not labels.size or not is_int or (labels < 0).any():
        raise ValueError(
            f"labels must be non-empty 1-D non-negative ints; got {labels.dtype} {labels.shape}"
        )
    classes = np.unique(labels)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be a non-negative int; got {n=!r}")
    if n % len(classes):
        raise ValueError(f"{n=} is not divisible by the number of classes ({len(classes)})")
    available = np.ones(labels.shape, dtype=bool)
    if exclude is not None:
        exclude = np.asarray(exclude).ravel()
        if exclude.size and (
            not np.issubdtype(exclude.dtype, np.integer)
            or exclude.min() < 0
            or exclude.max() >= labels.size
        ):
            raise ValueError(
                f"exclude must hold integer indices in [0, {labels.size}); got {exclude}"
            )
        available[exclude] = False
    per_class = n // len(classes)
    chosen = []
    for c in classes:
        candidates = np.flatnonzero((labels == c) & available)
        if candidates.size < per_class:
            raise ValueError(
                f"class {c} has {candidates.size} available indices; {per_class} needed for {n=}"
            )
        perm = jax.random.permutation(jax.random.fold_in(key, int(c)), candidates.size)
        chosen.append(candidates[np.asarray(perm[:per_class])])
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def study_splits(
    train_labels: ArrayLike,
    test_labels: ArrayLike,
    *,
    train_size: int = 15000,
    val_size: int = 3000,
    eval_size: int = 1000,
    seed: int = 42,
) -> StudySplits:
    """Draws the stratified train / val / eval subsets used by the study.

    With ``key = jax.random.key(seed)``, each subset uses its own stream
    ``fold_in(key, stream)``; val excludes train. Test labels are used only to
    stratify the eval subset.

    Args:
        train_labels: labels of the official training split.
        test_labels: labels of the official test split.
        train_size: size of the training subset.
        val_size: size of the validation subset (from the training split).
        eval_size: size of the evaluation subset (from the test split).
        seed: integer seed; the same seed gives the same indices.

    Returns:
        ``StudySplits`` of sorted int64 indices.

    Raises:
        ValueError: bad seed or sizes that cannot be met (see
            ``stratified_indices``).

    Example:
        >>> splits = study_splits(data.train_labels, data.test_labels)
        >>> x_eval = data.test_images[splits.eval]
    """
    key = _study_key(seed)
    train = stratified_indices(train_labels, train_size, jax.random.fold_in(key, _TRAIN_STREAM))
    val = stratified_indices(
        train_labels, val_size, jax.random.fold_in(key, _VAL_STREAM), exclude=train
    )
    eval_ = stratified_indices(test_labels, eval_size, jax.random.fold_in(key, _EVAL_STREAM))
    return StudySplits(train=train, val=val, eval=eval_)


def _study_key(seed) -> jax.Array:
    """The root key of the study's subsets; raises ValueError unless `seed` is an int."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an int; got {seed=!r}")
    return jax.random.key(seed)


def study_eval_indices(
    test_labels: ArrayLike, *, eval_size: int = 1000, seed: int = 42
) -> np.ndarray:
    """The study's stratified evaluation subset (`study_splits(...).eval`) from the test
    labels alone, so an evaluation needs no training data.

    Raises:
        ValueError: bad seed or a size the test split cannot meet.
    """
    key = jax.random.fold_in(_study_key(seed), _EVAL_STREAM)
    return stratified_indices(test_labels, eval_size, key)


def check_case_count(n, total: int, where: str) -> None:
    """Raise DataError (naming `where`) unless `n` is an integer in [1, total]."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= total:
        raise DataError(f"{where}: n={n!r} must be in [1, {total}] (the cases there are)")


def share_positions(n: int, share: tuple[int, int] | None = None) -> np.ndarray:
    """Positions among `n` cases of the share (index, count): every count-th from index, so
    each share takes cases from every part of a sorted or stratified list; all n without one.

    Raises:
      ValueError: an index outside [0, count).
    """
    if share is None:
        return np.arange(n)
    index, count = share
    if not 0 <= index < count:
        raise ValueError(f"share {tuple(share)!r}: the index must be in [0, {count})")
    return np.arange(index, n, count)
