"""The `gameday` command: every command module, and the only code that prints and exits.

The entry point is runner.cli.main:main; the library below it raises gameday's errors
(runner.errors) and the commands map them to exit codes (runner.cli.options).
"""

# First of all, the mark `--parallel auto` reads the machine's load from (runner.procstat.STARTED):
# over the command's own start, less its own CPU, rather than a wait of its own.
from runner import procstat as _procstat

_procstat.mark_start()
