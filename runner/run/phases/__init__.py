"""The phases of a run, in order: baseline, inject, expect, detect, recover (with verify), and
cleanup, which always runs. Each is a function of the run's context that records what it saw and
returns what the next phases need; one that makes the rest pointless raises ScenarioAborted."""
