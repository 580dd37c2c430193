"""FAB's projections: the smallest L-inf or L2 step that puts a point on a hyperplane
<w, t + d> = b inside the box [0, 1], one example at a time (vmapped by the attack).

Each projection sorts every input dimension's breakpoint and bisects over them; the sort is
most of its time, so on the CPU it runs in NumPy (`argsort`), same indices as XLA's.

Reference: Croce & Hein, "Minimally distorted adversarial examples with a fast adaptive
boundary attack", ICML 2020; fra31/auto-attack `fab_projections.py`.
"""

import concurrent.futures
import math
import os
from typing import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_BIG = 1e12


def _safe_div(num: chex.Array, den: chex.Array) -> chex.Array:
    return jnp.where(den == 0, 0.0, num / jnp.where(den == 0, 1.0, den))


_SORT_POOL: list = []  # one thread pool, made on first use (importing starts no threads)


def _sort_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _stable_argsort_rows(rows: np.ndarray) -> np.ndarray:
    """`np.argsort(rows, -1, kind="stable")` of finite rows, as int32; for values of 32 bits
    or fewer, about twice as fast: each value's float32 bits, mapped to an unsigned integer of
    the same order (-0.0 read as 0.0), are the high half of a 64-bit key whose low half is the
    column, and NumPy's vectorised sort of those unique keys gives the stable order."""
    if rows.dtype.itemsize > 4:  # float32 keys would merge distinct float64 values
        return np.argsort(rows, axis=-1, kind="stable").astype(np.int32)
    bits = (rows.astype(np.float32) + np.float32(0.0)).view(np.uint32)
    bits = np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000)).astype(np.uint64)
    keys = (bits << np.uint64(32)) | np.arange(rows.shape[-1], dtype=np.uint64)
    keys.sort(axis=-1)
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.int32)


def _host_argsort(a: np.ndarray) -> np.ndarray:
    """The stable argsort of each row (`_stable_argsort_rows`), the rows split over the usable
    cores (NumPy's sort releases the GIL; XLA waits for the callback, so the cores are free)."""
    rows = a.reshape(-1, a.shape[-1])
    threads = min(_sort_threads(), len(rows))
    if threads < 2 or a.size < 65536:
        return _stable_argsort_rows(rows).reshape(a.shape)
    if not _SORT_POOL:
        _SORT_POOL.append(concurrent.futures.ThreadPoolExecutor(threads, "advjax-fab-sort"))
    parts = np.array_split(np.arange(len(rows)), threads)
    jobs = [_SORT_POOL[0].submit(_stable_argsort_rows, rows[p[0] : p[-1] + 1]) for p in parts]
    return np.concatenate([j.result() for j in jobs]).reshape(a.shape)


def argsort(a: chex.Array) -> chex.Array:
    """`jnp.argsort(a)` (stable, last axis), computed by NumPy when JAX runs on the CPU.

    The projections sort every input dimension of every example at every step; XLA's CPU
    sort is about 20x slower than NumPy's on these rows, and most of FAB's time. The
    indices are the same either way (both sorts are stable), and `jnp.argsort` serves
    the other backends, whose sorts are fast.
    """
    if jax.default_backend() != "cpu":
        return jnp.argsort(a, axis=-1)
    out = jax.ShapeDtypeStruct(a.shape, jnp.int32)
    return jax.pure_callback(_host_argsort, out, a, vmap_method="expand_dims")


def _bisect(n: int, go_right: Callable[[chex.Array], chex.Array]) -> chex.Array:
    """Original's bisection over 0..n-1: ceil(log2 n) halvings of [lb, ub]."""

    def body(_, bounds):
        lb, ub = bounds
        mid = (lb + ub) // 2
        right = go_right(mid)
        return jnp.where(right, mid, lb), jnp.where(right, ub, mid)

    steps = math.ceil(math.log2(n)) if n > 1 else 0
    lb, _ = lax.fori_loop(0, steps, body, (jnp.int32(0), jnp.int32(n - 1)))
    return lb


def projection_linf(t: chex.Array, w: chex.Array, b: chex.Array) -> chex.Array:
    """Smallest L-inf step d with <w, t + d> = b and t + d in [0, 1] (one example, flat).

    Where the box makes the hyperplane unreachable, d moves t to the box corner that
    changes <w, .> most toward b, as in the original.
    """
    n = t.shape[0]
    sign = jnp.where(jnp.dot(w, t) - b >= 0, 1.0, -1.0)
    w, b = w * sign, b * sign
    a = (w < 0).astype(t.dtype)
    nonzero = (w != 0).astype(t.dtype)
    d = (a - t) * nonzero
    p = a - t * (2 * a - 1)
    indp = argsort(p)
    b = b - jnp.dot(w, t)
    b0 = jnp.dot(w, d)
    indp2 = indp[::-1]
    ws = w[indp2]
    s = jnp.cumsum(jnp.abs(ws))
    sb = jnp.cumsum(-ws * d[indp2]) + b0
    b2 = sb[-1] - s[-1] * p[indp[0]]
    c_l = b - b2 > 0
    c2 = (b - b0 > 0) & ~c_l
    lb = _bisect(n, lambda k: b - (sb[k] - s[k] * p[indp[n - 1 - k]]) > 0)
    lmbd_l = jnp.maximum(_safe_div(b - sb[-1], -s[-1]), 0.0)
    lmbd_2 = jnp.maximum(_safe_div(b - sb[lb], -s[lb]), 0.0)
    d_2 = jnp.minimum(lmbd_2, d) * a + jnp.maximum(-lmbd_2, d) * (1 - a)
    d = jnp.where(c_l, (2 * a - 1) * lmbd_l, jnp.where(c2, d_2, d))
    return d * nonzero


def projection_l2(t: chex.Array, w: chex.Array, b: chex.Array) -> chex.Array:
    """Smallest L2 step d with <w, t + d> = b and t + d in [0, 1] (one example, flat).

    Where the box makes the hyperplane unreachable, every coordinate is moved to the
    bound it hits along -w, as in the original.
    """
    n = t.shape[0]
    c = jnp.dot(w, t) - b
    w = jnp.where(c < 0, -w, w)
    c = jnp.abs(c)
    small = jnp.abs(w) < 1e-8
    w_div = jnp.where(small, 1.0, w)
    r = jnp.clip(jnp.maximum(t / w_div, (t - 1) / w_div), -_BIG, _BIG)
    r = jnp.where(small | (r == -_BIG), _BIG, r)
    indr = argsort(r)
    rs = r[indr]
    rs2 = jnp.concatenate([rs[1:], jnp.zeros_like(rs[:1])])
    rs = jnp.where(rs == _BIG, 0.0, rs)
    rs2 = jnp.where(rs2 == _BIG, 0.0, rs2)
    w3s = (w**2)[indr]
    w5 = jnp.sum(w3s)
    ws = w5 - jnp.cumsum(w3s)
    d = jnp.where(small, 0.0, -(r * w))
    s = jnp.concatenate([-w5 * rs[:1], jnp.cumsum((rs - rs2) * ws) - w5 * rs[0]])
    c4 = s[0] + c < 0
    c3 = jnp.dot(d, w) + c > 0
    lb = _bisect(n, lambda k: s[k] + c > 0)
    alpha_2 = _safe_div(s[lb] + c, ws[lb]) + jnp.where(ws[lb] == 0, 0.0, rs[lb])
    d_2 = jnp.where(alpha_2 > r, d, -alpha_2 * w)
    d = jnp.where(c4, -_safe_div(c, w5) * w, jnp.where(c3, d, d_2))
    return jnp.where(small, 0.0, d)
