"""The command line: one typer module per command group; thin: parse, call, render."""
