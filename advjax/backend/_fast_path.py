"""Any JAX function re-run with convolutions and max pooling that stay on XLA's fast CPU path.

Inside a `lax.fori_loop` or `lax.while_loop` (every iterative attack), XLA's CPU backend runs a
convolution on its fast (Eigen) kernels only when the operands are laid out as NHWC input,
HWIO kernel and NHWC output; any other layout falls to a naive loop that measured 15-20x
slower. Outside loops XLA transposes the operands itself, so a model looks fast when called
alone and slow inside an attack. JAX's derivative of an input-gradient convolution always
swaps the kernel's input and output features (HWOI), and NCHW models (Equinox, PyTorch
ports) are off the fast path in the forward pass as well. The derivative of a max pooling
`lax.reduce_window` is a select-and-scatter, again slow on the CPU.

`fast_path(fn)` traces `fn` and re-runs its jaxpr with, in place of

- every `conv_general_dilated`: the same primitive on NHWC/HWIO/NHWC operands (explicit
  transposes around it when the user's layout differs), under a `custom_jvp` whose tangent
  map is written so that JAX's transpose of it, the input-gradient convolution, comes out in
  the fast layout as well; a strided convolution's tangent map is the sum over the strides'
  phases of stride-1 convolutions, so that its input gradient is stride-1 convolutions too
  (JAX's transpose of the strided form is an input-dilated convolution, which XLA's CPU
  backend runs slowly); one with fewer than 8 input features (an RGB first layer) computes its
  input gradient on the features zero-padded to 8;
- every floating-point `reduce_window` max or min: the same primitive, under a `custom_jvp`
  whose tangent picks the first extremum of each window (row-major order, as XLA's
  select-and-scatter does) with strided slices and selects, which transpose to pads and selects.

The forward values are the same primitives on the same values: bit-identical for models
already in NHWC/HWIO, and equal to XLA's own transposed evaluation otherwise. Gradients are
the same sums in another kernel: equal to float tolerance. Forward-mode derivatives stay
correct (they are not made faster). Sub-jaxprs of `jit`, `while`, `scan`, `cond`,
`checkpoint` and `closed_call` are rewritten too; functions with custom derivatives
(`custom_jvp`, `custom_vjp`) are left as they are, with their own rules.
"""

import functools
import itertools
import os
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.extend import core
from jax.extend.core import primitives as prims

from advjax.backend._flags import warn_if_unconfigured

FAST_PATH_VARIABLE = "ADVJAX_FAST_PATH"

_WRAPPED = "__advjax_fast_path__"


def fast_path_enabled() -> bool:
    """Whether `fast_path` rewrites: on the CPU backend, unless `ADVJAX_FAST_PATH=0`."""
    return os.environ.get(FAST_PATH_VARIABLE) != "0" and jax.default_backend() == "cpu"


def fast_path(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its convolutions and max pooling on XLA's fast CPU path, in value and gradient.

    The returned function takes the same arguments and returns the same values (see the module
    docstring for the precise sense). It traces `fn` on every call (under `jit`, once per
    compilation). Arguments that are not arrays are passed through as static values.
    Returns `fn` itself when the rewrite is off (another backend, or `ADVJAX_FAST_PATH=0`) or
    when `fn` is already rewritten. Works under `jit`, `vmap`, `grad` and `jvp`. On a CPU
    without advjax's XLA flags it warns once (see `warn_if_unconfigured`).

    Example:
      >>> logits_fn = fast_path(lambda x: model.apply(params, x))
    """
    warn_if_unconfigured()
    if getattr(fn, _WRAPPED, False) or not fast_path_enabled():
        return fn

    @functools.wraps(fn)
    def rewritten(*args, **kwargs):
        leaves, treedef = jax.tree.flatten((args, kwargs))
        dynamic = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]

        def flat_fn(*values):
            filled = list(leaves)
            for i, value in zip(dynamic, values):
                filled[i] = value
            call_args, call_kwargs = jax.tree.unflatten(treedef, filled)
            return fn(*call_args, **call_kwargs)

        values = [leaves[i] for i in dynamic]
        closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*values)
        out = _eval_jaxpr(closed.jaxpr, closed.consts, values)
        return jax.tree.unflatten(jax.tree.structure(out_shape), out)

    setattr(rewritten, _WRAPPED, True)
    return rewritten


def _is_array(leaf) -> bool:
    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


# The interpreter.


def _eval_jaxpr(jaxpr: core.Jaxpr, consts, args) -> list:
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    def write(v, value):
        if not isinstance(v, core.DropVar):
            env[v] = value

    for v, value in zip(jaxpr.constvars, consts):
        write(v, value)
    for v, value in zip(jaxpr.invars, args):
        write(v, value)
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        rule = _RULES.get(eqn.primitive)
        out = rule(eqn.primitive, invals, eqn.params) if rule is not None else None
        if out is None:
            params = _rewrite_params(eqn.primitive, eqn.params)
            out = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(params))
        if eqn.primitive.multiple_results:
            for v, value in zip(eqn.outvars, out):
                write(v, value)
        else:
            write(eqn.outvars[0], out)
    return [read(v) for v in jaxpr.outvars]


_REWRITTEN_SUBJAXPRS = {
    "jit",
    "pjit",
    "while",
    "scan",
    "cond",
    "closed_call",
    "checkpoint",
    "remat2",
}


def _rewrite_params(primitive, params: dict) -> dict:
    if primitive.name not in _REWRITTEN_SUBJAXPRS:
        return params
    new = dict(params)
    for name, value in params.items():
        if isinstance(value, core.ClosedJaxpr):
            new[name] = _rewrite_closed(value)
        elif isinstance(value, core.Jaxpr):
            new[name] = _rewrite_open(value)
        elif (
            isinstance(value, tuple)
            and value
            and all(isinstance(v, core.ClosedJaxpr) for v in value)
        ):
            new[name] = tuple(_rewrite_closed(v) for v in value)
    return new


def _trace(jaxpr: core.Jaxpr, consts, in_avals) -> core.ClosedJaxpr:
    specs = [
        jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False))
        for a in in_avals
    ]
    return jax.make_jaxpr(lambda *args: _eval_jaxpr(jaxpr, consts, args))(*specs)


_closed_cache: "weakref.WeakKeyDictionary[core.ClosedJaxpr, core.ClosedJaxpr]" = (
    weakref.WeakKeyDictionary()
)


def _rewrite_closed(closed: core.ClosedJaxpr) -> core.ClosedJaxpr:
    """The same closed jaxpr, rewritten; cached per object so that a jitted sub-function
    keeps one rewritten jaxpr (and one compilation) across calls."""
    cached = _closed_cache.get(closed)
    if cached is not None:
        return cached
    rewritten = _trace(closed.jaxpr, closed.consts, closed.in_avals)
    if not any(isinstance(c, jax.core.Tracer) for c in closed.consts):
        _closed_cache[closed] = rewritten
    return rewritten


def _rewrite_open(jaxpr: core.Jaxpr) -> core.Jaxpr:
    """An open (const-free) sub-jaxpr rewritten; kept as it was if the rewrite needs consts."""
    new = _trace(jaxpr, [], [v.aval for v in jaxpr.invars])
    return new.jaxpr if not new.consts else jaxpr


# Convolution.


def _canonical_specs(ndim: int) -> lax.ConvDimensionNumbers:
    spatial = tuple(range(1, ndim - 1))
    return lax.ConvDimensionNumbers(
        lhs_spec=(0, ndim - 1) + spatial,
        rhs_spec=(ndim - 1, ndim - 2) + tuple(range(ndim - 2)),
        out_spec=(0, ndim - 1) + spatial,
    )


def _to_canonical(spec: tuple[int, ...], rhs: bool) -> tuple[int, ...]:
    """Axis permutation taking an operand laid out by `spec` to the canonical layout
    (lhs/out: batch, spatial..., feature; rhs: spatial..., in, out)."""
    if rhs:
        return tuple(spec[2:]) + (spec[1], spec[0])
    return (spec[0],) + tuple(spec[2:]) + (spec[1],)


def _conv_rule(primitive, invals, params):
    if params["batch_group_count"] != 1 or len(invals[0].shape) < 3:
        return None
    features = invals[0].shape[params["dimension_numbers"].lhs_spec[1]]
    fn = _cached(_conv_fn, params, features)
    return None if fn is None else fn(*invals)


def _cached(factory, params: dict, *args):
    """`factory(*args, params)`'s function for these primitive parameters (None if they are
    unhashable)."""
    try:
        return factory(*args, tuple(sorted(params.items(), key=lambda item: item[0])))
    except TypeError:
        return None


MIN_INPUT_FEATURES = 8
"""Input features below which a convolution's input gradient is computed with the features
zero-padded to this many: XLA's CPU kernels run an input gradient with 3 output features
(an RGB model's first layer) ~1.6x slower than with 8."""


@functools.lru_cache(maxsize=512)
def _conv_fn(x_features: int, frozen: tuple) -> Callable[[jax.Array, jax.Array], jax.Array]:
    params = dict(frozen)
    dims = params["dimension_numbers"]
    ndim = len(dims.lhs_spec)
    canonical = _canonical_specs(ndim)
    lhs_perm = _to_canonical(dims.lhs_spec, rhs=False)
    rhs_perm = _to_canonical(dims.rhs_spec, rhs=True)
    out_perm = _to_canonical(dims.out_spec, rhs=False)
    out_inverse = tuple(int(i) for i in np.argsort(out_perm))
    is_canonical = dims == canonical
    # The input-gradient map's kernel: in and out features swapped, so that JAX's transpose
    # of it (which swaps them back) reads the kernel as HWIO.
    swapped = lax.ConvDimensionNumbers(
        lhs_spec=canonical.lhs_spec,
        rhs_spec=(ndim - 2, ndim - 1) + tuple(range(ndim - 2)),
        out_spec=canonical.out_spec,
    )
    conv_params = {k: v for k, v in params.items() if k != "dimension_numbers"}

    def forward(x, kernel):
        if is_canonical:
            return prims.conv_general_dilated_p.bind(x, kernel, **params)
        out = prims.conv_general_dilated_p.bind(
            jnp.transpose(x, lhs_perm),
            jnp.transpose(kernel, rhs_perm),
            dimension_numbers=canonical,
            **conv_params,
        )
        return jnp.transpose(out, out_inverse)

    strides = tuple(params["window_strides"])
    polyphase = (
        any(s > 1 for s in strides)
        and all(d == 1 for d in (*params["lhs_dilation"], *params["rhs_dilation"]))
        and all(p >= 0 for pair in params["padding"] for p in pair)
    )
    unit = (1,) * len(strides)
    stride_one = conv_params | {"window_strides": unit, "padding": ((0, 0),) * len(strides)}

    narrow = params["feature_group_count"] == 1 and x_features < MIN_INPUT_FEATURES

    def input_tangent(t, kernel):
        kernel_t = jnp.swapaxes(jnp.transpose(kernel, rhs_perm), -1, -2)
        t = jnp.transpose(t, lhs_perm)
        if narrow:
            widen = [(0, 0)] * (t.ndim - 1) + [(0, MIN_INPUT_FEATURES - x_features)]
            t, kernel_t = jnp.pad(t, widen), jnp.pad(kernel_t, widen)
        if polyphase:
            out = _polyphase_conv(t, kernel_t, strides, params["padding"], swapped, stride_one)
        else:
            out = prims.conv_general_dilated_p.bind(
                t, kernel_t, dimension_numbers=swapped, **conv_params
            )
        return jnp.transpose(out, out_inverse)

    @jax.custom_jvp
    def conv(x, kernel):
        return forward(x, kernel)

    def conv_jvp(primals, tangents):
        x, kernel = primals
        tx, tk = tangents
        out = forward(x, kernel)
        parts = []
        if not isinstance(tx, SymbolicZero):
            parts.append(input_tangent(tx, kernel))
        if not isinstance(tk, SymbolicZero):
            parts.append(forward(x, tk))
        if not parts:
            return out, jnp.zeros_like(out)
        return out, functools.reduce(jnp.add, parts)

    conv.defjvp(conv_jvp, symbolic_zeros=True)
    return conv


def _polyphase_conv(t, kernel_t, strides, padding, dims, stride_one) -> jax.Array:
    """A strided, undilated convolution of canonical-layout `t` with the in/out-swapped
    kernel `kernel_t` (spatial..., out, in), written as the sum over the strides' phases of
    stride-1 'VALID' convolutions: phase a of a spatial axis takes every stride-th tap from
    tap a and every stride-th input row from row a of the padded input. The same sums in
    another order; JAX's transpose of it is stride-1 convolutions and interior padding, where
    the strided form's transpose is an input-dilated convolution, off XLA's fast CPU kernels
    (a ResNet's downsampling layers)."""
    spatial = len(strides)
    padded = lax.pad(
        t, jnp.zeros((), t.dtype), [(0, 0, 0), *[(lo, hi, 0) for lo, hi in padding], (0, 0, 0)]
    )
    taps = kernel_t.shape[:spatial]
    sizes = [(padded.shape[1 + i] - taps[i]) // strides[i] + 1 for i in range(spatial)]
    out = None
    for phase in itertools.product(*(range(min(s, k)) for s, k in zip(strides, taps))):
        sub = kernel_t[tuple(slice(a, None, s) for a, s in zip(phase, strides))]
        rows = [n + sub.shape[i] - 1 for i, n in enumerate(sizes)]
        start = (0, *phase, 0)
        limit = (padded.shape[0], *[a + s * (r - 1) + 1 for a, s, r in zip(phase, strides, rows)],
                 padded.shape[-1])  # fmt: skip
        part = prims.conv_general_dilated_p.bind(
            lax.slice(padded, start, limit, (1, *strides, 1)), sub, dimension_numbers=dims,
            **stride_one,
        )  # fmt: skip
        out = part if out is None else out + part
    return out


# Max and min pooling.


def _pool_rule(primitive, invals, params):
    (x,) = invals
    if not jnp.issubdtype(x.dtype, jnp.floating) or any(d != 1 for d in params["base_dilation"]):
        return None
    fn = _cached(_pool_fn, params, primitive)
    return None if fn is None else fn(x)


@functools.lru_cache(maxsize=512)
def _pool_fn(primitive, frozen: tuple) -> Callable[[jax.Array], jax.Array]:
    params = dict(frozen)
    window = params["window_dimensions"]
    strides = params["window_strides"]
    padding = params["padding"]
    dilation = params["window_dilation"]
    fill = -jnp.inf if primitive is prims.reduce_window_max_p else jnp.inf

    def forward(x):
        return primitive.bind(x, **params)

    def windows(a, out_shape, value):
        """Each window offset's strided view of `a` (padded with `value`), row-major."""
        padded = lax.pad(a, jnp.asarray(value, a.dtype), [(lo, hi, 0) for lo, hi in padding])
        for offset in itertools.product(*(range(w) for w in window)):
            start = [o * d for o, d in zip(offset, dilation)]
            limit = [s + (n - 1) * st + 1 for s, n, st in zip(start, out_shape, strides)]
            yield lax.slice(padded, start, limit, strides)

    @jax.custom_jvp
    def pool(x):
        return forward(x)

    @pool.defjvp
    def pool_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        out = forward(x)
        taken = jnp.zeros(out.shape, bool)
        tangent = jnp.zeros(out.shape, t.dtype)
        for x_w, t_w in zip(windows(x, out.shape, fill), windows(t, out.shape, 0)):
            hit = (x_w == out) & ~taken
            tangent = tangent + jnp.where(hit, t_w, jnp.zeros_like(t_w))
            taken = taken | hit
        return out, tangent

    return pool


_RULES = {
    prims.conv_general_dilated_p: _conv_rule,
    prims.reduce_window_max_p: _pool_rule,
    prims.reduce_window_min_p: _pool_rule,
}
