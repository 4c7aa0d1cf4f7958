"""The drill in a terminal: what the live page shows, in a compact rich.live view, with keys
(`a` acknowledge, `h` hint, `q` twice to give up) when stdin is a terminal; where the output is
not a terminal (CI, a pipe), one plain line per event instead.

The view reads its own subscription in its own thread, so drawing never slows the drill; its
keys go back through `bus.request`, as the page's buttons do. cbreak mode (keys without Enter,
Ctrl-C still an interrupt) is set when the view starts and restored when it stops, which a
`with` block does on Ctrl-C too.

    with DrillView(bus):
        drill.run()
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
import time
from collections import deque
from typing import IO, Any

from pydantic import ValidationError
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from runner.drill.bus import DrillBus, Request, Subscription
from runner.drill.model import DrillEvent, DrillPhase, DrillStatus, EventKind
from runner.results.drill_record import ObservedAction
from runner.results.printable import printable

__all__ = ["KEYS", "DrillView", "clock_text", "plain_line"]

KEYS = {"a": Request.ACK, "h": Request.HINT, "q": Request.GIVE_UP}
TIMELINE_LINES = 8
GIVE_UP_CONFIRM_S = 5.0  # `q` a second time within this gives up
_TICKING = {DrillPhase.HANDED_OVER}
_STATE_STYLE = {"running": "green", "exited": "bold red", "crash_looping": "bold red"}


def _at(at_s: float | None) -> str:
    return "-" if at_s is None else f"+{at_s:.1f} s"


def clock_text(seconds: float | None) -> str:
    """mm:ss (h:mm:ss past an hour), as on the page."""
    if seconds is None:
        return "--:--"
    t = max(0, int(seconds))
    h, m, s = t // 3600, t // 60 % 60, t % 60
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _shortcut(event: DrillEvent) -> ObservedAction | None:
    if event.kind is not EventKind.ACTION:
        return None
    try:
        action = ObservedAction.model_validate(event.data)
    except ValidationError:
        return None
    return action if action.shortcut else None


def plain_line(event: DrillEvent) -> str:
    """One event as one line: the drill clock, the kind, the text, a shortcut's `why`."""
    line = f"{_at(event.at_s):>10}  {event.kind.value:<9} {event.text}"
    action = _shortcut(event)
    if action is not None and action.why and action.why not in event.text:
        line += f" (shortcut: {action.why})"
    return printable(line.replace("\n", " "))


class _Clock:
    """The drill clock between events: real-world seconds since the fault run faster than the
    wall on a scaled lab, at the rate an event's at_s shows against its wall time."""

    def __init__(self) -> None:
        self.s: float | None = None
        self.at = time.monotonic()
        self.rate = 1.0
        self.ticking = False

    def sync(self, status: DrillStatus, event: DrillEvent | None) -> None:
        self.s, self.at = status.clock_s, time.monotonic()
        self.ticking = status.phase in _TICKING
        if event is not None and event.at_s and status.fault_at is not None:
            wall = (event.ts - status.fault_at).total_seconds()
            if wall > 0.5:
                self.rate = event.at_s / wall

    def now(self) -> float | None:
        if self.s is None or not self.ticking:
            return self.s
        return self.s + self.rate * (time.monotonic() - self.at)


class DrillView:
    """The drill in the terminal, from `bus`. `console` defaults to gameday's stderr console;
    `live` (default: the console is a terminal) picks the rich view over plain lines; `keys`
    (default: live and stdin is a terminal) reads a, h and q from stdin."""

    def __init__(
        self,
        bus: DrillBus,
        console: Console | None = None,
        *,
        live: bool | None = None,
        keys: bool | None = None,
        stdin: IO[str] | None = None,
    ) -> None:
        if console is None:
            from runner.cli.output import err

            console = err
        self._bus = bus
        self._console = console
        self._live_mode = console.is_terminal if live is None else live
        self._stdin = stdin if stdin is not None else sys.stdin
        self._keys = (self._live_mode and self._stdin.isatty()) if keys is None else keys
        self._lock = threading.Lock()
        self._status = bus.status
        self._timeline: deque[str] = deque(maxlen=TIMELINE_LINES)
        self._answer = ""
        self._give_up_asked = 0.0
        self._clock = _Clock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._live: Live | None = None
        self._saved_tty: Any = None
        self._sub: Subscription | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> DrillView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> DrillView:
        self._sub = sub = self._bus.subscribe()
        with self._lock:
            self._status = sub.snapshot.status
            events = sub.snapshot.events
            self._timeline.extend(plain_line(e) for e in events)
            self._clock.sync(self._status, events[-1] if events else None)
        if self._live_mode:
            self._live = Live(
                console=self._console, get_renderable=self.render, refresh_per_second=4
            )
            self._live.start()
        else:
            for e in events:
                self._print(plain_line(e))
        self._spawn(lambda: self._read(sub), "drill-view")
        if self._keys:
            self._cbreak()
            self._spawn(self._read_keys, "drill-keys")
        return self

    def stop(self) -> None:
        """Stops the view: every event published so far is shown, the terminal restored."""
        self._stopping.set()
        if self._sub is not None:
            self._sub.close()
        for t in self._threads:
            t.join(2)
        if self._live is not None:
            self._live.stop()
        self._restore_tty()

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    # ---- events ---------------------------------------------------------------------------

    def _read(self, sub: Subscription) -> None:
        for event in sub:
            line = plain_line(event)
            # the users' figures move once a second: a row of the view, not a line each time
            figures = event.kind is EventKind.USERS
            with self._lock:
                self._status = self._bus.status
                if not figures:
                    self._timeline.append(line)
                self._clock.sync(self._status, event)
            if self._live is None and not figures:
                self._print(line)

    def _print(self, line: str) -> None:
        self._console.print(Text(line), soft_wrap=True)

    # ---- keys -----------------------------------------------------------------------------

    def _cbreak(self) -> None:
        import termios
        import tty

        fd = self._stdin.fileno()
        self._saved_tty = termios.tcgetattr(fd)
        tty.setcbreak(fd)

    def _restore_tty(self) -> None:
        if self._saved_tty is None:
            return
        import termios

        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(self._stdin.fileno(), termios.TCSADRAIN, self._saved_tty)
        self._saved_tty = None

    def _read_keys(self) -> None:
        fd = self._stdin.fileno()
        while not self._stopping.is_set():
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                data = os.read(fd, 1)
                if not data:
                    return
                self.key(data.decode(errors="replace"))

    def key(self, ch: str) -> str | None:
        """A key pressed: the drill's answer for a, h and q (the first q only asks to press it
        again); None for any other key."""
        req = KEYS.get(ch.lower())
        if req is None:
            return None
        if req is Request.GIVE_UP and time.monotonic() - self._give_up_asked > GIVE_UP_CONFIRM_S:
            self._give_up_asked = time.monotonic()
            answer = "press q again to give up"
        else:
            try:
                answer = self._bus.request(req, {"source": "terminal"})
            except ValueError as exc:
                answer = str(exc)
        with self._lock:
            self._answer = answer
        if self._live is None:
            self._print(f"{'':>10}  {'answer':<9} {printable(answer)}")
        return answer

    # ---- the live view --------------------------------------------------------------------

    def render(self) -> RenderableType:
        with self._lock:
            st, lines, answer = self._status, list(self._timeline), self._answer
            clock = self._clock.now()
        head = Text()
        head.append(clock_text(clock), style="bold")
        head.append(f"  {st.phase.value.replace('_', ' ')}", style="bold yellow")
        seat = f" · seat {st.seat}" if st.seat is not None else ""
        head.append(printable(f"  {st.scenario}{seat} · lab {st.lab} · {st.title}"))
        parts: list[RenderableType] = [head, _facts(st)]
        if lines:
            parts.append(Text("\n".join(lines), style="dim"))
        if self._keys:
            foot = Text("keys: a acknowledge · h hint · q give up", style="dim")
            if answer:
                foot.append(printable(f"   {answer}"), style="")
            parts.append(foot)
        return Group(*parts)


def _facts(st: DrillStatus) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    nodes = Text()
    for n in st.nodes:
        nodes.append(printable(n.name) + " ")
        # a crash loop is failing whatever its state between two crashes: never green
        state = "crash_looping" if n.crash_looping else n.status.value
        nodes.append(n.status.value, style=_STATE_STYLE.get(state, "yellow"))
        nodes.append(f"{'' if n.ready else ' not ready'} r{n.restarts} g{n.generation}   ")
    grid.add_row("nodes", nodes)
    probes = Text()
    for p in st.probes:
        probes.append(printable(f"{p.name} "))
        probes.append(p.verdict, style="green" if p.verdict == "passed" else "red")
        probes.append(printable(f" {p.observed}   "))
    grid.add_row("probes", probes)
    grid.add_row("alerts", Text(printable(", ".join(st.alerts) or "none"), style="red"))
    times = (
        f"detected {_at(st.detected_at_s)}  acknowledged {_at(st.acked_at_s)}  "
        f"recovered {_at(st.recovered_at_s)}"
    )
    grid.add_row("times", times)
    if st.users is not None:
        grid.add_row("users", Text(st.users.line().removeprefix("users: ")))
    hints = [f"{h.index}. {h.text} ({_at(h.at_s)})" for h in st.hints]
    grid.add_row("hints", Text(printable("\n".join(hints) or "none") + f"  ({st.hints_left} left)"))
    actions = Text()
    for a in st.actions:
        line = f"{_at(a.at_s)} {a.kind.value} {', '.join(a.nodes)}: {a.detail}"
        actions.append(printable(line), style="bold red" if a.shortcut else "")
        if a.shortcut:
            actions.append(printable(f"  shortcut: {a.why}"), style="red")
        actions.append("\n")
    actions.rstrip()
    grid.add_row("actions", actions if st.actions else Text("none"))
    if st.page_url:
        grid.add_row("page", Text(printable(st.page_url)))
    return grid
