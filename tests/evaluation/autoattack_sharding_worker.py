"""Run by test_autoattack.py in a subprocess with 4 simulated CPU devices: AutoAttack with
its cases sharded over a 4-device mesh and on one device; prints the per-case outcomes.
With the argument `small`: APGD-CE and APGD-T alone on the first 16 cases."""

import json
import sys

import jax
import numpy as np

from advjax.evaluation import AttackSpec, autoattack
from tests.evaluation.test_autoattack import EPS, STANDARD, _cases, _members, _mlp

logits_fn = _mlp()
x, y = _cases(logits_fn)
members = _members(*STANDARD)
if sys.argv[1:] == ["small"]:
    x, y, members = x[:16], y[:16], _members("apgd-ce", "apgd-t")
mesh = jax.make_mesh((len(jax.devices()),), ("data",))
sharded = autoattack(logits_fn, x, y, EPS, key=jax.random.key(3), members=members, batch_size=8,
                     mesh=mesh, checks=False)  # fmt: skip
single = autoattack(logits_fn, x, y, EPS, key=jax.random.key(3), members=members, batch_size=8,
                    checks=False)  # fmt: skip
assert isinstance(members[0], AttackSpec)
print(json.dumps({
    "devices": len(jax.devices()),
    "broken_by_equal": bool(np.array_equal(sharded.broken_by, single.broken_by)),
    "queries_equal": bool(np.array_equal(sharded.queries, single.queries)),
    "x_adv_max_difference": float(np.abs(sharded.x_adv - single.x_adv).max()),
    "robust": int(sharded.robust.sum()),
}))  # fmt: skip
sys.exit(0)
