"""The drill's terminal view: one plain line per event without a terminal, the keys' requests,
and the compact live view's content."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console

from runner.cli.drill_live import DrillView, clock_text, plain_line
from runner.drill.bus import DrillBus, Request
from runner.drill.model import DrillEvent, DrillPhase, DrillStatus, EventKind, NodeView
from runner.results.drill_record import ActionKind, ObservedAction
from runner.spec.kinds import NodeStatus, Outcome

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SHORTCUT = ObservedAction(
    at_s=42.0,
    kind=ActionKind.RESTART,
    nodes=("node1",),
    detail="node1 restarted alone",
    step="restart-head-only",
    outcome=Outcome.DOES_NOT_RESTORE,
    shortcut=True,
    why="the workers keep the old head's generation",
)


def status(clock: float | None = None, **kw: Any) -> DrillStatus:
    return DrillStatus(
        scenario="head-only-restart",
        title="Head restarted alone",
        lab="local",
        phase=DrillPhase.HANDED_OVER,
        started_at=T0,
        clock_s=clock,
        **kw,
    )


def console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=False, width=200, highlight=False), buf


def test_plain_mode_prints_one_line_per_event_in_order() -> None:
    bus = DrillBus(status())
    bus.publish(EventKind.PHASE, "baseline passed")
    con, buf = console()
    view = DrillView(bus, con).start()
    bus.publish(EventKind.NODE, "node1: exited (code 1)", status=status(3.25))
    bus.publish(
        EventKind.ACTION,
        "node1 restarted alone",
        SHORTCUT.model_dump(mode="json"),
        status=status(42.0),
    )
    bus.publish(EventKind.TIMELINE, "bell \x07 and\nnewline", status=status(50.0))
    bus.close()
    view.stop()
    assert buf.getvalue() == (
        "         -  phase     baseline passed\n"
        "    +3.2 s  node      node1: exited (code 1)\n"
        "   +42.0 s  action    node1 restarted alone"
        " (shortcut: the workers keep the old head's generation)\n"
        "   +50.0 s  timeline  bell \\x07 and newline\n"
    )


def test_keys_send_requests_and_q_asks_first() -> None:
    bus = DrillBus(status())
    seen: list[Request] = []
    bus.on_request(lambda req, data: seen.append(req) or f"{req.value} ok ({data['source']})")
    con, buf = console()
    view = DrillView(bus, con, keys=False).start()
    assert view.key("a") == "ack ok (terminal)"
    assert view.key("h") == "hint ok (terminal)"
    assert view.key("x") is None
    assert view.key("q") == "press q again to give up"
    assert seen == [Request.ACK, Request.HINT]
    assert view.key("q") == "give_up ok (terminal)"
    assert seen == [Request.ACK, Request.HINT, Request.GIVE_UP]
    view.stop()
    assert buf.getvalue().splitlines()[-1] == "            answer    give_up ok (terminal)"


def test_the_live_view_shows_nodes_times_and_shortcuts() -> None:
    node = NodeView(name="node1", status=NodeStatus.EXITED, ready=False, restarts=2, generation=3)
    bus = DrillBus(
        status(
            61.0,
            nodes=(node,),
            alerts=("ServingDown",),
            actions=(SHORTCUT,),
            detected_at_s=30.0,
            hints_left=2,
        )
    )
    con, buf = console()
    view = DrillView(bus, con, live=False)
    view.start()
    con.print(view.render())
    view.stop()
    assert [line.rstrip() for line in buf.getvalue().splitlines()] == [
        "01:01  handed over  head-only-restart · lab local · Head restarted alone",
        "nodes   node1 exited not ready r2 g3",
        "probes",
        "alerts  ServingDown",
        "times   detected +30.0 s  acknowledged -  recovered -",
        "hints   none  (2 left)",
        "actions +42.0 s restart node1: node1 restarted alone  shortcut: the workers keep the old"
        " head's generation",
    ]


def test_the_clock_runs_at_the_lab_s_rate_between_events() -> None:
    fault = T0
    bus = DrillBus(status(0.0, fault_at=fault))
    view = DrillView(bus, console()[0], live=False)
    event = DrillEvent(
        seq=1, ts=fault + timedelta(seconds=2), at_s=200.0, kind=EventKind.NODE, text="x"
    )
    view._clock.sync(status(200.0, fault_at=fault), event)
    assert view._clock.rate == 100.0
    assert clock_text(59.9) == "00:59"
    assert clock_text(3725.0) == "1:02:05"
    assert clock_text(None) == "--:--"
    assert plain_line(event) == "  +200.0 s  node      x"


def test_keys_on_a_terminal_and_the_terminal_restored_after() -> None:
    import os
    import termios
    import threading

    master, slave = os.openpty()
    stdin = os.fdopen(slave, "r")
    before = termios.tcgetattr(slave)
    bus = DrillBus(status(5.0))
    acked = threading.Event()
    bus.on_request(lambda req, data: acked.set() or "acknowledged")
    con = Console(file=io.StringIO(), force_terminal=True, width=100)
    try:
        view = DrillView(bus, con, stdin=stdin)
        view.start()
        assert termios.tcgetattr(slave)[3] & termios.ICANON == 0
        os.write(master, b"a")
        assert acked.wait(5)
        view.stop()
        assert termios.tcgetattr(slave) == before
        assert "keys: a acknowledge · h hint · q give up" in con.file.getvalue()
    finally:
        stdin.close()
        os.close(master)


def test_a_crash_looping_node_is_never_green_in_the_terminal() -> None:
    from datetime import UTC, datetime

    from runner.cli.drill_live import _facts
    from runner.drill.model import DrillPhase, DrillStatus, NodeView
    from runner.spec.kinds import NodeStatus

    node = NodeView(
        name="serving",
        status=NodeStatus.RUNNING,
        ready=False,
        restarts=7,
        generation=1,
        crash_looping=True,
    )
    st = DrillStatus(
        scenario="s",
        title="t",
        lab="local",
        phase=DrillPhase.HANDED_OVER,
        started_at=datetime.now(UTC),
        nodes=(node,),
    )
    cell = _facts(st).columns[1]._cells[0]
    styles = {str(span.style) for span in cell.spans}
    assert "green" not in styles and "bold red" in styles


def test_the_users_figures_are_a_row_of_the_view_not_a_line_a_second() -> None:
    from runner.drill.model import UsersView

    users = UsersView(
        sent=90, failed=30, fault_sent=50, fault_failed=30, window_s=10.0, now_sent=20,
        now_failed=20, bin_s=2.0,
    )  # fmt: skip
    bus = DrillBus(status())
    con, buf = console()
    view = DrillView(bus, con).start()
    for clock in (1.0, 2.0, 3.0):
        bus.publish(EventKind.USERS, users.line(), status=status(clock, users=users))
    bus.publish(EventKind.NODE, "node1: exited (code 1)", status=status(3.5, users=users))
    bus.close()
    view.stop()
    assert buf.getvalue() == "    +3.5 s  node      node1: exited (code 1)\n"
    con, buf = console()
    con.print(view.render())
    assert (
        "users   100% failing (20 of 20) in the last 10 s; 30 of 50 failed since the fault, "
        "30 of 90 in all"
    ) in [line.rstrip() for line in buf.getvalue().splitlines()]
