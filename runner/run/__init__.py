"""One scenario on one lab, phase by phase (runner.run.phases):

    baseline -> inject -> expect -> detect -> recover (+ verify) -> cleanup (always)

Every change is journalled before it is applied (runner.run.journal) and undone in `cleanup`, which
runs whatever happens, Ctrl-C included (runner.run.interrupt). Waiting is driven by the lab's
event stream (runner.run.context); times come from the lab's own clocks (process start, first
output, exit) and are converted to real-world seconds with the lab's time scale
(runner.spec.timing). What a run finds is recorded by runner.run.record.
"""

from runner.run.context import Progress
from runner.run.interrupt import CLEANING, shielded_from_sigint
from runner.run.orchestration import run_scenario

__all__ = ["CLEANING", "Progress", "run_scenario", "shielded_from_sigint"]
