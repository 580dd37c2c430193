"""Every attack the runners know, by name: the declarations of the attack modules.

Adding an attack is a module that declares its `Attack` (or `Attack`s, as `DECLARED`) and one
line here; campaigns (`AttackSpec(method=...)`), AutoAttack members, the threat model's query
bounds and the command's choices read this registry, and `ATTACKS[name](logits_fn, x, y, eps,
...)` calls the attack.
"""

from collections.abc import Mapping

from advjax.attacks import _apgd, _fab, _fmn, _malt, _mi_fgsm, _pgd, _square_l2
from advjax.attacks._attack import Attack


def registry(*attacks: Attack) -> Mapping[str, Attack]:
    """The attacks by name; refuses a name or a key stream declared twice."""
    for label in ("name", "stream"):
        values = [getattr(a, label) for a in attacks]
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"attack {label}s declared twice: {twice}")
    return {a.name: a for a in attacks}


ATTACKS: Mapping[str, Attack] = registry(
    *_pgd.DECLARED,
    *_apgd.DECLARED,
    *_fab.DECLARED,
    *_square_l2.DECLARED,
    *_fmn.DECLARED,
    *_malt.DECLARED,
    _mi_fgsm.MI_FGSM,
)
"""The attacks by name (`Attack`), each with its fixed key stream."""


def get_attack(name: str) -> Attack:
    """The registry's entry for `name`; a ValueError naming the choices otherwise."""
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {name!r}; choose from {tuple(ATTACKS)}")
    return ATTACKS[name]
