"""The model an evaluation attacks, as one value: what every runner takes beside the cases."""

from typing import NamedTuple

from advjax.types import LogitsFn


class Model(NamedTuple):
    """The model an evaluation attacks, as its records name it.

    Attributes:
      name: the records' model name.
      logits_fn: a pure function from a batch of pixels in [0, 1] to logits.
      model_hash: the records' model hash: `advjax.io.model_hash` of its checkpoint, or any
        stable digest of its weights (records of the same name and another hash are refused).
    """

    name: str
    logits_fn: LogitsFn
    model_hash: str
