"""`python -m tools.api_page`: writes docs/api.md, every public name of advjax by package
(each package's `__all__`, with the first line of each name's docstring).

`--check` exits 1 when docs/api.md differs from what it would write."""

import argparse
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import advjax

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def public_packages() -> list[str]:
    """advjax and every public module below it that declares `__all__`, in order."""
    names = ["advjax"]
    for info in pkgutil.walk_packages(advjax.__path__, "advjax."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        if hasattr(importlib.import_module(info.name), "__all__"):
            names.append(info.name)
    return names


def summary(obj) -> str:
    doc = inspect.getdoc(obj) if not isinstance(obj, (int, float, str, tuple, dict)) else None
    return (doc or "").strip().splitlines()[0] if doc else ""


def render() -> str:
    packages = public_packages()
    total = sum(len(importlib.import_module(p).__all__) for p in packages)
    lines = ["# The public API", "", f"Every public name of advjax ({total} in {len(packages)} "
             "modules), by package: each package's `__all__`. Written by `python -m "
             "tools.api_page`; a test checks it is current.", ""]  # fmt: skip
    for package in packages:
        module = importlib.import_module(package)
        lines += [
            f"## `{package}` ({len(module.__all__)})",
            "",
            "| name | what it is |",
            "|---|---|",
        ]
        for name in sorted(module.__all__, key=str.lower):
            text = summary(getattr(module, name)).replace("|", "\\|")
            lines.append(f"| `{name}` | {text} |")
        lines.append("")
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
