"""`python -m advjax.evaluate`: AutoAttack any JAX model from the command line (the command is
`advjax.cli.evaluate`; `--help` lists its arguments)."""

import sys

from advjax.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
