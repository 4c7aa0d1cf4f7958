"""Workshops: one isolated lab per attendee (a seat), a drill on each, a scoreboard for the
facilitator.

- `seats`: the workshop's folder, its seats' inventories and tokens, bringing seats up and down.
- `cards`: a seat card (how to reach the lab and its page, the commands preset to it), and all
  of them on one page to print.
- `drills`: the detached `gameday drill` on each seat.
- `scoreboard`: one row per seat from its drill's status.json.
- `board_server` and `page`: the host's page, behind its token, pushed by server-sent events.
- `summary`: what `workshop down` writes of every seat (Markdown and HTML).
"""
