"""`python -m kcli` runs the command line."""

from kcli.cli.main import main

main()
