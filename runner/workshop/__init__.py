"""Workshops: one isolated lab per attendee (a seat), a drill on each, a scoreboard for the
facilitator.

- `seats`: the workshop's folder, its seats' inventories, bringing seats up and down.
- `cards`: a seat card (how to reach the lab, the commands preset to it).
- `drills`: the detached `gameday drill` on each seat.
- `scoreboard`: one row per seat from its drill's status.json.
- `server` and `page`: the facilitator's page, pushed by server-sent events.
- `summary`: what `workshop down` writes of every seat (Markdown and HTML).
"""
