"""The delivery check (detect: alert X delivered) fails when it should: nothing delivered in its
window, the annotation text missing, or another alert's delivery."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import httpx

from runner.labs.base import LabDriver
from runner.results.schema import Verdict
from runner.run.context import Context
from runner.run.journal import Journal
from runner.run.phases.detect import check_delivered, check_own
from runner.run.receiver import WebhookReceiver, parse_notification
from runner.run.record import Recorder
from runner.spec.expectations import AlertExpectation
from runner.spec.timing import TimeScale

WANT = AlertExpectation(
    name="ServingDown",
    within_s=600,
    delivered=True,
    delivered_within_s=60,
    annotations={"procedure": "restart all four together"},
)


def context() -> Context:
    lab = SimpleNamespace(inventory=SimpleNamespace(lab=SimpleNamespace(monitoring=None)))
    return Context(
        lab=cast(LabDriver, lab),
        scale=TimeScale(scale=100.0, allowance_s=0.0),
        journal=cast(Journal, None),
        scenario_id="delivery",
        target="serving",
        progress=lambda _s: None,
        rec=Recorder(),
        http=cast(httpx.Client, None),
    )


def delivered(receiver: WebhookReceiver, name: str, at: datetime, **annotations: str) -> None:
    """What Alertmanager's webhook would post, as the receiver parses it."""
    body: dict[str, Any] = {
        "version": "4",
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": name},
                "annotations": annotations,
                "startsAt": at.isoformat().replace("+00:00", "Z"),
            }
        ],
    }
    receiver._add(parse_notification(body, at))  # the receiver's own path from a POST


def check(receiver: WebhookReceiver | str | None, since: datetime) -> tuple[Verdict, str]:
    ctx = context()
    check_delivered(ctx, WANT, since, receiver)
    [a] = ctx.rec.assertions
    assert a.name == "detect: alert ServingDown delivered"
    return a.verdict, a.observed


def test_a_delivery_with_the_procedure_passes() -> None:
    since = datetime.now(UTC)
    receiver = WebhookReceiver("127.0.0.1", 0)
    delivered(
        receiver,
        "ServingDown",
        since + timedelta(seconds=0.1),
        procedure="restart all four together now",
    )
    verdict, observed = check(receiver, since)
    assert verdict is Verdict.PASSED, observed


def test_a_delivery_without_the_procedure_fails_naming_it() -> None:
    since = datetime.now(UTC)
    receiver = WebhookReceiver("127.0.0.1", 0)
    delivered(receiver, "ServingDown", since + timedelta(seconds=0.1), summary="serving is down")
    verdict, observed = check(receiver, since)
    assert verdict is Verdict.FAILED
    assert observed.endswith("; missing annotation text: procedure")


def test_nothing_delivered_in_the_window_fails_and_says_what_came_instead() -> None:
    since = datetime.now(UTC) - timedelta(seconds=0.7)  # 60 s real at x100: 0.6 s lab, gone
    receiver = WebhookReceiver("127.0.0.1", 0)
    delivered(receiver, "ExporterTargetDown", since, procedure="restart all four together")
    verdict, observed = check(receiver, since)
    assert (verdict, observed) == (
        Verdict.FAILED,
        "nothing delivered after 60 s real (received: ExporterTargetDown firing)",
    )


def test_a_late_delivery_fails_its_window() -> None:
    since = datetime.now(UTC) - timedelta(seconds=2)
    receiver = WebhookReceiver("127.0.0.1", 0)
    delivered(
        receiver,
        "ServingDown",
        since + timedelta(seconds=1.5),
        procedure="restart all four together",
    )
    verdict, observed = check(receiver, since)
    assert verdict is Verdict.FAILED
    assert observed.startswith("delivered 150.0 s real after the injection: ")


def test_no_receiver_is_an_error_not_a_pass() -> None:
    verdict, observed = check(
        "this lab has no monitoring (gameday_lab.monitoring)", datetime.now(UTC)
    )
    assert (verdict, observed) == (
        Verdict.ERROR,
        "probe error: this lab has no monitoring (gameday_lab.monitoring)",
    )


def notified(receiver: WebhookReceiver, name: str, began: datetime, at: datetime, lab: str) -> None:
    """A notification of an alert that began at `began`, delivered at `at`, from lab `lab`'s
    Prometheus (its external label)."""
    body = {
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": name, "gameday_lab": lab},
                "startsAt": began.isoformat().replace("+00:00", "Z"),
            }
        ]
    }
    receiver._add(parse_notification(body, at))


def test_the_evidence_leaves_out_what_came_before_the_injection_and_names_earlier_alerts() -> None:
    since = datetime.now(UTC) - timedelta(seconds=0.7)
    receiver = WebhookReceiver("127.0.0.1", 0, "local")
    # the boot's ServingDown, delivered before the injection: not this scenario's business
    notified(receiver, "ServingDown", since - timedelta(seconds=9), since - timedelta(1), "local")
    # an earlier fault's alert, its notification retried into this scenario
    notified(receiver, "KvCacheLow", since - timedelta(seconds=5), since, "local")
    verdict, observed = check(receiver, since)
    assert (verdict, observed) == (
        Verdict.FAILED,
        "nothing delivered after 60 s real (received: KvCacheLow firing (began before the "
        "injection))",
    )


def test_another_labs_alert_is_never_this_labs_delivery_and_is_a_lab_error() -> None:
    since = datetime.now(UTC) - timedelta(seconds=0.7)
    receiver = WebhookReceiver("127.0.0.1", 0, "local-p1")
    notified(receiver, "ServingDown", since, since + timedelta(seconds=0.1), "local-p2")
    verdict, observed = check(receiver, since)
    assert (verdict, observed) == (Verdict.FAILED, "nothing delivered after 60 s real")
    ctx = context()
    check_own(ctx, receiver, since)
    [a] = ctx.rec.assertions
    assert (a.name, a.verdict) == ("detect: only this lab's alerts delivered", Verdict.ERROR)
    assert a.observed.startswith("1 alert(s) of another lab: gameday_lab=local-p2: ServingDown")
    quiet = context()
    check_own(quiet, WebhookReceiver("127.0.0.1", 0, "local-p2"), since)
    assert quiet.rec.assertions == []


def test_a_receiver_that_stops_listening_ends_the_wait_and_says_so() -> None:
    # a delivery window of 864 lab seconds: the receiver's death, not the window, ends the wait
    want = WANT.model_copy(update={"delivered_within_s": 86400})
    ctx = context()
    ctx.lab.dead_part = lambda: None  # type: ignore[attr-defined]
    receiver = WebhookReceiver("127.0.0.1", 0).start()
    try:
        server = receiver._server
        assert server is not None

        def broken() -> None:
            raise OSError(24, "Too many open files")

        server.service_actions = broken  # type: ignore[method-assign]
        t0 = time.monotonic()
        check_delivered(ctx, want, datetime.now(UTC), receiver)
        assert time.monotonic() - t0 < 10
    finally:
        receiver.stop()
    [a] = ctx.rec.assertions
    assert a.verdict is Verdict.ERROR
    assert a.died is not None and a.died.part == "the runner's alert receiver on 127.0.0.1:0"
    assert a.observed == (
        "the runner's alert receiver on 127.0.0.1:0 died: stopped listening; "
        "its last line: OSError: [Errno 24] Too many open files"
    )
