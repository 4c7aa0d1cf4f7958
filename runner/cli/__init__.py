"""The `gameday` command: every command module, and the only code that prints and exits.

The entry point is runner.cli.main:main; the library below it raises gameday's errors
(runner.errors) and the commands map them to exit codes (runner.cli.options).
"""
