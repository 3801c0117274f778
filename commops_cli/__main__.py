"""`python -m commops_cli ...`: the `commops` command."""

import sys

from commops_cli.commops import main

sys.exit(main(prog_name="commops"))
