"""`python -m tools.api_page`: writes docs/api.md, every public name of advjax by package
(each package's `__all__`, with the first line of each name's docstring), then those of the
packages beside it, `advjax_train` and `advjax_text`.

`--check` exits 1 when docs/api.md differs from what it would write."""

import argparse
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

BESIDE = ("advjax_train", "advjax_text")
PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def public_packages(root: str = "advjax") -> list[str]:
    """`root` and every public module below it that declares `__all__`, in order."""
    names = [root]
    top = importlib.import_module(root)
    for info in pkgutil.walk_packages(top.__path__, f"{root}."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        if hasattr(importlib.import_module(info.name), "__all__"):
            names.append(info.name)
    return names


def summary(obj) -> str:
    doc = inspect.getdoc(obj) if not isinstance(obj, (int, float, str, tuple, dict)) else None
    return (doc or "").strip().splitlines()[0] if doc else ""


def public_count(root: str = "advjax") -> int:
    """How many names `root`'s public modules list in `__all__` (the public surface)."""
    return sum(len(importlib.import_module(p).__all__) for p in public_packages(root))


def _section(package: str, level: str) -> list[str]:
    module = importlib.import_module(package)
    lines = [
        f"{level} `{package}` ({len(module.__all__)})",
        "",
        "| name | what it is |",
        "|---|---|",
    ]
    for name in sorted(module.__all__, key=str.lower):
        text = summary(getattr(module, name)).replace("|", "\\|")
        lines.append(f"| `{name}` | {text} |")
    return lines + [""]


def render() -> str:
    packages = public_packages()
    lines = ["# The public API", "", f"Every public name of advjax ({public_count()} in "
             f"{len(packages)} modules), by package: each package's `__all__`; then the "
             "packages beside it, built on advjax's public names: "
             + ", ".join(f"`{root}` ({public_count(root)})" for root in BESIDE)
             + ". Written by `python -m tools.api_page`; a test checks it is current.", ""]  # fmt: skip
    for package in packages:
        lines += _section(package, "##")
    for root in BESIDE:
        lines += [f"## Beside advjax: `{root}`", "", summary(importlib.import_module(root)), ""]
        for package in public_packages(root):
            lines += _section(package, "###")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        return 0 if PAGE.read_text() == text else 1
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
