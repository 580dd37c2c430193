"""Every attack the runners know, by name: the declarations of the attack modules.

Adding an attack is a module that declares its `AttackInfo` and one line here; campaigns
(`AttackSpec.method`), AutoAttack members (`Member.method`), the threat model's query bounds
and the command's choices read this registry.
"""

from collections.abc import Mapping

from advjax.attacks import _apgd, _fab, _fmn, _malt, _pgd, _square_l2
from advjax.attacks._attack_info import AttackInfo, registry

ATTACKS: Mapping[str, AttackInfo] = registry(
    *_pgd.DECLARED,
    *_apgd.DECLARED,
    *_fab.DECLARED,
    *_square_l2.DECLARED,
    *_fmn.DECLARED,
    *_malt.DECLARED,
)
"""The attacks by name (`AttackInfo`), each with its fixed key stream."""


def attack_info(name: str) -> AttackInfo:
    """The registry's entry for `name`; a ValueError naming the choices otherwise."""
    if name not in ATTACKS:
        raise ValueError(f"unknown attack {name!r}; choose from {tuple(ATTACKS)}")
    return ATTACKS[name]
