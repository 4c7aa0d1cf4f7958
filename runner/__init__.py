"""gameday: a chaos-engineering scenario runner for LLM-serving stacks.

The phases of a run live in runner.run; lab drivers in runner.labs; the scenario format in
runner.spec.scenario; reports in runner.report; the command line in runner.cli.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
