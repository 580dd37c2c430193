"""`python -m advjax.text.score`: scores of attacks on translation models made anywhere (the
command is `advjax.cli.text_score`; `--help` lists its arguments)."""

import sys

from advjax.cli.text_score import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
