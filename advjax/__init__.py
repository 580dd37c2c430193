"""advjax: a functional JAX library for adversarial robustness evaluation.

Its public packages, one concept each: `advjax.attacks` (pure attacks, their registry and the
attack wrapper), `advjax.evaluation` (threat model, the engine and AutoAttack, statistics,
checks, gate, summary), `advjax.records` (per-case records and their log), `advjax.data`
(dataset readers and evaluation cases), `advjax.io` (checkpoints, locks, progress,
provenance) and `advjax.backend` (XLA's fast CPU path). Importing advjax changes nothing in
the process: entry points that want advjax's fast XLA CPU settings call
`advjax.backend.configure()` before any JAX work.
"""

from advjax import attacks, backend, data, evaluation, io, records

__version__ = "0.1.0"

__all__ = ["attacks", "backend", "data", "evaluation", "io", "records"]
