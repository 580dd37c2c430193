"""The any-model benchmarks compare like with like: every framework's build of a user model
computes the same function from the same weights, and the weights handed to PyTorch are the
same numbers in PyTorch's layout. No timing is asserted."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from advjax_train import CompactCNN, eval_logits_fn
from benchmarks import user_models
from benchmarks.any_model import render


def _images(n=3):
    return jax.random.uniform(jax.random.key(0), (n, 32, 32, 3))


@pytest.mark.parametrize("name", ["linen_cnn", "nnx_cnn", "equinox_cnn"])
def test_every_framework_builds_the_plain_cnn(name):
    """Linen, NNX and Equinox (NCHW, NCHW-flatten head) give the plain-jnp CNN's logits."""
    weights = user_models.cnn_weights()
    x = _images()
    expected = user_models.plain_cnn(weights)(x)
    chex.assert_trees_all_close(
        user_models.MODELS[name][1](weights)(x), expected, rtol=1e-5, atol=1e-5
    )


def test_resnet_matches_a_direct_lax_transcription():
    """The Linen ResNet equals the same blocks written with lax.conv_general_dilated."""
    w = {k: jnp.asarray(v) for k, v in user_models.resnet_weights().items()}

    def conv(x, name, stride=1):
        dims = ("NHWC", "HWIO", "NHWC")
        y = lax.conv_general_dilated(x, w[name], (stride, stride), "SAME", dimension_numbers=dims)
        return y + w[f"{name}_b"].reshape(1, 1, 1, -1)

    def reference(x):
        x = jax.nn.relu(conv(x, "stem"))
        for b in range(3):
            stride = 1 if b == 0 else 2
            y = conv(jax.nn.relu(conv(x, f"b{b}_conv0", stride)), f"b{b}_conv1")
            x = jax.nn.relu((x if b == 0 else conv(x, f"b{b}_proj", stride)) + y)
        return x.mean(axis=(1, 2)) @ w["head"] + w["head_b"][None, :]

    x = _images()
    chex.assert_trees_all_close(
        user_models.linen_resnet(user_models.resnet_weights())(x),
        reference(x),
        rtol=1e-5,
        atol=1e-5,
    )


def test_nchw_flatten_rows_is_the_transposed_flatten():
    """Row (h, w, c) of an NHWC-flatten dense kernel lands at row (c, h, w)."""
    fc = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2 * 3 * 4, 5)
    moved = user_models.nchw_flatten_rows(fc, 2, 3, 4)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)  # h, w, c
    np.testing.assert_allclose(
        x.reshape(-1) @ fc, x.transpose(2, 0, 1).reshape(-1) @ moved, rtol=1e-5
    )


def test_torch_layout_transposes_kernels_and_linear_weights():
    weights = user_models.cnn_weights()
    torch = user_models.torch_layout("cnn", weights)
    assert torch["conv1"].shape == (32, 32, 3, 3)
    np.testing.assert_array_equal(torch["conv1"], weights["conv1"].transpose(3, 2, 0, 1))
    assert torch["fc1"].shape == (10, 128)
    np.testing.assert_array_equal(torch["fc0_b"], weights["fc0_b"])


def test_plain_compact_cnn_is_the_compact_cnn():
    """The plain-jnp port of a CompactCNN checkpoint gives its eval-mode logits (batch norm
    with non-trivial running statistics)."""
    model = CompactCNN(activation="silu")
    x = _images(4)
    variables = model.init(jax.random.key(1), x, train=False)
    stats = jax.tree.map(
        lambda v: v + 0.1 * jax.random.uniform(jax.random.key(2), v.shape),
        variables["batch_stats"],
    )
    variables = {**variables, "batch_stats": stats}
    chex.assert_trees_all_close(
        user_models.plain_compact_cnn(variables, "silu")(x),
        eval_logits_fn(model, variables)(x),
        rtol=1e-4,
        atol=1e-4,
    )


def test_render_reports_rates_and_ratios():
    """Images/s at the median repetition and the ratio to the better PyTorch layout."""
    report = {
        "command": "python -m benchmarks.any_model",
        "machine": {
            "cpu_model": "cpu",
            "usable_cores": 2,
            "versions": {"jax": "0"},
            "xla_flags": "",
            "git": {"commit": "abc"},
        },
        "load_average": {"start": [0.0], "end": [2.0]},
        "images": 100,
        "batch": 50,
        "rows": {
            "plain_cnn": {
                "advjax": [1.0, 2.0, 1.0],
                "advjax_slow_path": [5.0],
                "slow_path_images": 50,
                "torch_nchw": [4.0],
                "torch_channels_last": [2.0],
                "max_logit_difference": 1e-6,
            }
        },
    }
    row = render(report).strip().splitlines()[-1]
    assert row == "| plain_cnn | 100.0 | 10.0 | 25.0 | 50.0 | 2.00x | 10.0x | 1.0e-06 |"


def test_readme_snippet_is_the_readme_block_with_or_without_configure():
    """The benchmarked code is the README's first block; the second variant differs from it
    by the configure() line alone."""
    from benchmarks.readme_snippet import CONFIGURE_LINE, snippet

    written, skipped = snippet(True), snippet(False)
    (line,) = CONFIGURE_LINE.findall(written)
    assert written.replace(line, "", 1) == skipped
    assert "configure()" not in skipped
