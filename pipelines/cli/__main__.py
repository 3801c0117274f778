"""`python -m pipelines.cli ...`: the `commops` command."""

import sys

from pipelines.cli.commops import main

sys.exit(main(prog_name="commops"))
