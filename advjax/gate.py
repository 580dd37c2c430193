"""`python -m advjax.gate`: the release gate on a run summary (the command is
`advjax.cli.gate`; `--help` lists its arguments)."""

import sys

from advjax.cli.gate import main

if __name__ == "__main__":
    sys.exit(main())
