"""Drills: a person (or a team) recovers the lab while gameday watches.

`gameday drill SCENARIO` runs baseline, inject and expect as a run does, then hands over: it runs
no recovery step. It watches the lab's events, the verify probes and the alerts; recognises a
person's actions (restarts, configuration changes, stops) whatever tool they used; says at once
when one is a shortcut the scenario lists (`does_not_restore` or `forbidden`); releases hints;
takes acknowledgements; and records time to detect, acknowledge and recover.

- `model`: what a drill looks like from outside (status, events), the contract between the drill,
  its live page, the terminal view and a workshop's scoreboard.
- `bus`: where a drill publishes that, in process (subscribers get a snapshot then each event)
  and on disk (`status.json`, for other processes).
"""
