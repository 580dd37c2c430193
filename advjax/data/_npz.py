"""Any image dataset as arrays in a .npz file."""

from pathlib import Path

import numpy as np

from advjax.data._cifar10 import DataError


def load_npz(path: str | Path, *, name: str = "path") -> tuple[np.ndarray, np.ndarray]:
    """(x, y) from a .npz file holding `x` (N, H, W, C) pixels, float in [0, 1] or uint8
    (scaled by 1/255), and `y` (N,) integer labels >= 0: float32 pixels and int32 labels.

    Raises:
      DataError (a ValueError) naming `name` and what is wrong: a missing file or array,
      wrong shapes or dtypes, pixels outside [0, 1], negative labels.
    """
    where = f"{name} {str(path)!r}"
    try:
        with np.load(path) as arrays:
            missing = [k for k in ("x", "y") if k not in arrays.files]
            if missing:
                raise DataError(f"{where}: no array {missing[0]!r} (needs x and y)")
            x, y = arrays["x"], arrays["y"]
    except (OSError, ValueError) as error:
        if isinstance(error, DataError):
            raise
        raise DataError(f"{where}: not a readable .npz file ({error})") from None
    if x.ndim != 4 or y.ndim != 1 or len(x) != len(y) or not len(y):
        raise DataError(f"{where}: need x (N, H, W, C) and y (N,), N >= 1, got x {x.shape} "
                        f"and y {y.shape}")  # fmt: skip
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise DataError(f"{where}: y must hold integer labels >= 0, got {y.dtype}")
    if x.dtype == np.uint8:
        x = x.astype(np.float32) / 255
    elif not np.issubdtype(x.dtype, np.floating):
        raise DataError(f"{where}: x must be uint8 or float pixels, got {x.dtype}")
    elif not (np.isfinite(x).all() and x.min() >= 0 and x.max() <= 1):
        raise DataError(f"{where}: float pixels of x must lie in [0, 1], got "
                        f"[{x.min():g}, {x.max():g}]")  # fmt: skip
    return x.astype(np.float32), y.astype(np.int32)
