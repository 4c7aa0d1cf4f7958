"""`python -m runner.cli`: the `gameday` command."""

from runner.cli.main import main

main()
