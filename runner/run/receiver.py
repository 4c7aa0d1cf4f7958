"""The runner's alert webhook receiver (what Alertmanager delivers, kept with the time it
came), and `gameday alerts test`'s check of the whole path: rule -> Prometheus -> Alertmanager
-> receiver.

Stdlib http.server in a thread: the runner is synchronous (no event loop to serve from), the
receiver takes a handful of small POSTs per run, and it needs no dependency. It binds only the
address it is given (loopback, or the compose lab's own bridge address).

A receiver knows the lab it serves: every alert a lab's Prometheus sends carries the lab's name
(`external_labels`, LAB_LABEL), and one of another lab is kept apart as foreign, never taken for
this lab's (an instance of `--parallel` is a lab of its own name). A suite holds each instance's
receiver from the instance's setup to its teardown (`held`), so that what Alertmanager delivers
between scenarios (the boot's alerts, a resolution after a scenario's end) is accepted, and its
notification log stays true: a notification it could not deliver is retried into the next
scenario's receiver, and one it believes delivered while the receiver was gone holds back the
next firing of the same alert for its repeat_interval.

A receiver given the lab's token (runner.labs.common.alertmanager_config.receiver_token) takes
only a POST that carries it as its bearer token, compared in constant time: anyone who reaches
the address could otherwise post a firing alert and fake a time to detect. A body is read only
with a valid Content-Length (400 otherwise) of at most MAX_BODY bytes (413 above it)."""

from __future__ import annotations

import contextlib
import enum
import hmac
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import BaseModel, ConfigDict

from runner.errors import LabError
from runner.labs.common import prometheus_config as monitoring
from runner.labs.common.alertmanager_config import RECEIVER_PATH
from runner.labs.common.prometheus_config import LAB_LABEL
from runner.results.schema import PartDeath
from runner.run import prometheus_api as prometheus

# An Alertmanager notification is a few KiB per alert; this holds thousands of them.
MAX_BODY = 4 * 1024 * 1024


class ReceivedAlert(BaseModel):
    """One alert of one webhook notification, as Alertmanager sent it."""

    model_config = ConfigDict(frozen=True)

    alertname: str
    status: str  # firing | resolved
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: str  # Alertmanager's startsAt (RFC 3339)
    received_at: datetime  # the runner's clock, when the POST arrived

    def started(self) -> datetime | None:
        """startsAt as a time; None when Alertmanager sent none readable."""
        try:
            return datetime.fromisoformat(self.starts_at.replace("Z", "+00:00"))
        except ValueError:
            return None

    def lab(self) -> str | None:
        """The lab whose Prometheus sent it (LAB_LABEL); None from a Prometheus gameday did
        not configure (an adopted lab's own)."""
        return self.labels.get(LAB_LABEL)

    def evidence(self) -> str:
        notes = "; ".join(f"{k}={v!r}" for k, v in sorted(self.annotations.items()))
        return (
            f"{self.alertname} {self.status} received {self.received_at.isoformat()} "
            f"(startsAt {self.starts_at}); annotations: {notes}"
        )


def parse_notification(body: Any, at: datetime) -> list[ReceivedAlert]:
    """The alerts of one Alertmanager webhook payload (version 4); [] when it is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("alerts"), list):
        return []
    out = []
    for a in body["alerts"]:
        if not isinstance(a, dict):
            continue
        labels = {str(k): str(v) for k, v in (a.get("labels") or {}).items()}
        out.append(
            ReceivedAlert(
                alertname=labels.get("alertname", ""),
                status=str(a.get("status", "")),
                labels=labels,
                annotations={str(k): str(v) for k, v in (a.get("annotations") or {}).items()},
                starts_at=str(a.get("startsAt", "")),
                received_at=at,
            )
        )
    return out


class _QuietServer(ThreadingHTTPServer):
    """The library never prints: a client that hangs up mid-request is its own problem, and any
    other failure of a handler is kept (`failures`) for a failed delivery's evidence."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failures: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if exc is None or isinstance(exc, ConnectionError | TimeoutError):
            return
        self.failures = [*self.failures[-4:], f"{type(exc).__name__}: {exc}"]


class WebhookReceiver:
    """Serves Alertmanager's webhook on host:port until stopped; `received()` is every alert of
    lab `lab` delivered so far (every alert, when `lab` is None), `foreign()` every alert of
    another lab, `wait_for` blocks until one of the lab's matches."""

    def __init__(
        self, host: str, port: int, lab: str | None = None, token: str | None = None
    ) -> None:
        self.host, self.port, self.lab = host, port, lab
        self._expected = None if token is None else f"Bearer {token}".encode()
        self.refused = 0  # POSTs refused for a missing or wrong token
        self._alerts: list[ReceivedAlert] = []
        self._foreign: list[ReceivedAlert] = []
        self._cond = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopped: BaseException | None = None  # what ended the serving thread early

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{RECEIVER_PATH}"

    def start(self) -> WebhookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # s: a sender that stalls mid-request loses its connection, not a thread

            def do_POST(self) -> None:
                if self.path.split("?")[0] != RECEIVER_PATH:
                    return self._answer(404)
                if not receiver._authorised(self.headers.get("Authorization")):
                    with receiver._cond:
                        receiver.refused += 1
                    return self._answer(401)
                try:
                    length = int(self.headers.get("Content-Length") or "")
                except ValueError:
                    return self._answer(400)
                if length < 0:
                    return self._answer(400)
                if length > MAX_BODY:
                    return self._answer(413)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = None
                receiver._add(parse_notification(body, datetime.now(UTC)))
                self._answer(200)

            def _answer(self, status: int) -> None:
                if status != 200:
                    self.close_connection = True  # a body left unread is not a next request
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return  # the library never prints

        try:
            self._server = _QuietServer((self.host, self.port), Handler)
        except OSError as exc:
            raise LabError(
                f"the alert receiver cannot listen on {self.host}:{self.port}: {exc.strerror}",
                hint="another gameday run may hold it; set gameday_lab.monitoring.receiver_listen",
            ) from exc
        self._server.daemon_threads = True
        self._stopped = None
        self._thread = threading.Thread(target=self._serve, args=(self._server,), daemon=True)
        self._thread.start()
        return self

    def _serve(self, server: ThreadingHTTPServer) -> None:
        try:
            server.serve_forever(poll_interval=0.05)
        except BaseException as exc:  # kept for death(): nothing else would ever see it
            self._stopped = exc

    def death(self) -> PartDeath | None:
        """The receiver's serving thread ended while the receiver was meant to listen (its
        socket failed under it): an alert delivered now is never taken in, so a wait for one
        must end at once and say so."""
        thread = self._thread
        if thread is None or thread.is_alive():
            return None
        exc = self._stopped
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "its thread ended"
        return PartDeath(
            part=f"the runner's alert receiver on {self.host}:{self.port}",
            reason="stopped listening",
            last_lines=(why,),
        )

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _authorised(self, header: str | None) -> bool:
        if self._expected is None:
            return True
        return hmac.compare_digest((header or "").encode(), self._expected)

    def _add(self, alerts: list[ReceivedAlert]) -> None:
        with self._cond:
            for a in alerts:
                self._foreign_or_own(a).append(a)
            self._cond.notify_all()

    def _foreign_or_own(self, a: ReceivedAlert) -> list[ReceivedAlert]:
        # an alert without the label comes from a Prometheus gameday did not configure: it
        # cannot be told apart, so it counts as the lab's own
        foreign = self.lab is not None and a.lab() not in (None, self.lab)
        return self._foreign if foreign else self._alerts

    def received(self, since: datetime | None = None) -> list[ReceivedAlert]:
        """The lab's alerts delivered (since `since`, when given)."""
        with self._cond:
            return [a for a in self._alerts if since is None or a.received_at >= since]

    def failures(self) -> list[str]:
        """The last few requests the receiver failed to handle (not a client hanging up)."""
        server = self._server
        return list(server.failures) if isinstance(server, _QuietServer) else []

    def foreign(self, since: datetime | None = None) -> list[ReceivedAlert]:
        """Alerts of another lab delivered here (since `since`): never one, when each lab's
        alert path is its own."""
        with self._cond:
            return [a for a in self._foreign if since is None or a.received_at >= since]

    def wait_for(
        self, match: Callable[[ReceivedAlert], bool], timeout: float
    ) -> ReceivedAlert | None:
        """The first alert received (so far or within `timeout` s) that `match`es; None."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hit = next((a for a in self._alerts if match(a)), None)
                left = deadline - time.monotonic()
                if hit is not None or left <= 0:
                    return hit
                self._cond.wait(left)


_HELD: dict[tuple[str, int], tuple[WebhookReceiver, int]] = {}
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def held(
    host: str, port: int, lab: str | None, token: str | None = None
) -> Iterator[WebhookReceiver]:
    """The receiver listening on host:port while the block runs: the one this process already
    holds there (a suite's, for its lab instance), else a new one (taking only POSTs that carry
    `token`); it stops when its last holder is done. Raises LabError when the address cannot be
    listened on."""
    with _HELD_LOCK:
        receiver, holders = _HELD.get((host, port), (None, 0))
        if receiver is None:
            receiver = WebhookReceiver(host, port, lab, token).start()
        elif receiver.lab != lab:
            raise LabError(
                f"the alert receiver on {host}:{port} is lab {receiver.lab!r}'s, not {lab!r}'s",
                hint="give each lab its own gameday_lab.monitoring.receiver_listen",
            )
        _HELD[(host, port)] = (receiver, holders + 1)
    try:
        yield receiver
    finally:
        with _HELD_LOCK:
            receiver, holders = _HELD.pop((host, port))
            if holders > 1:
                _HELD[(host, port)] = (receiver, holders - 1)
            else:
                receiver.stop()


# ---- `gameday alerts test`: the DeepGEMM crash write-up's check of the whole path ----------

TEST_ALERT = "GamedayAlertsTest"


class Hop(enum.IntEnum):
    """Where the path broke, as the exit code of `gameday alerts test`."""

    RULE_NOT_LOADED = 4
    NOT_FIRING = 5
    ALERTMANAGER_UNREACHABLE = 6
    RECEIVER_NOT_REACHED = 7


class PathBroken(LabError):
    def __init__(self, hop: Hop, message: str, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.hop = hop
        self.exit_code = int(hop)


class PathChecked(BaseModel):
    """What `gameday alerts test` saw, hop by hop (seconds from the rule's load)."""

    model_config = ConfigDict(frozen=True)

    rule_loaded_s: float
    firing_s: float
    in_alertmanager_s: float
    delivered_s: float
    delivered: ReceivedAlert
    removed: bool


def with_test_rule(original: str, token: str) -> str:
    """`original` rules.yml with one more group: an alert that fires at its first evaluation."""
    data = yaml.safe_load(original) or {}
    groups = list(data.get("groups") or [])
    groups.append(
        {
            "name": "gameday-alerts-test",
            "rules": [
                {
                    "alert": TEST_ALERT,
                    "expr": "vector(1) > 0",
                    "labels": {"severity": "test", "gameday_test": token},
                    "annotations": {
                        "summary": "gameday alerts test: rule -> route -> receiver",
                        "procedure": "none: `gameday alerts test` removes this rule itself",
                    },
                }
            ],
        }
    )
    return yaml.safe_dump({**data, "groups": groups}, sort_keys=False)


def _until(what: Callable[[], bool], timeout: float) -> bool:
    """Look every 50 ms (Prometheus and Alertmanager have no push API) until `what()`."""
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _rule_loaded(http: httpx.Client, prom: str) -> bool:
    try:
        groups = http.get(prom + "/api/v1/rules", timeout=2).json()["data"]["groups"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return False
    return any(r.get("name") == TEST_ALERT for g in groups for r in g.get("rules", []))


def _firing(http: httpx.Client, prom: str, token: str) -> bool:
    try:
        alerts = prometheus.alerts(http, prom)
    except LabError:
        return False
    return any(
        a["labels"].get("gameday_test") == token and a.get("state") == "firing" for a in alerts
    )


def _in_alertmanager(http: httpx.Client, am: str, token: str) -> bool:
    """Alertmanager holds the alert (raises httpx.HTTPError when it does not answer)."""
    r = http.get(am + "/api/v2/alerts", params={"filter": f'gameday_test="{token}"'}, timeout=2)
    r.raise_for_status()
    return bool(r.json())


def _am_reachable(http: httpx.Client, am: str) -> str:
    """ "" when Alertmanager answers /-/ready; otherwise why not."""
    try:
        http.get(am + "/-/ready", timeout=2).raise_for_status()
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def check_path(
    rules: Path, prom: str, am: str, receiver: WebhookReceiver, timeout: float
) -> PathChecked:
    """Load a `vector(1) > 0` rule into the Prometheus at `prom` (its rule file `rules`
    rewritten, then /-/reload), see it fire, reach the Alertmanager at `am` and be delivered to
    `receiver`; then put the rule file back and see the rule gone. Each hop waits up to
    `timeout` s; PathBroken names the first that fails."""
    original = rules.read_text()
    token = uuid.uuid4().hex[:12]
    http = httpx.Client(trust_env=False)
    began = time.monotonic()
    try:
        tmp = rules.with_suffix(".test.tmp")
        tmp.write_text(with_test_rule(original, token))
        tmp.replace(rules)
        monitoring.reload(prom)
        result = _hops(http, prom, am, receiver, token, timeout, began)
    finally:
        tmp = rules.with_suffix(".restore.tmp")
        tmp.write_text(original)
        tmp.replace(rules)
        monitoring.reload(prom)
    removed = _until(lambda: not _rule_loaded(http, prom), timeout)
    http.close()
    if not removed:
        raise LabError(
            f"the test rule {TEST_ALERT} is still loaded in {prom} after {rules} was put back",
            hint=f"check {rules} and POST {prom}/-/reload",
        )
    return result.model_copy(update={"removed": True})


def _hops(
    http: httpx.Client,
    prom: str,
    am: str,
    receiver: WebhookReceiver,
    token: str,
    timeout: float,
    began: float,
) -> PathChecked:
    def since() -> float:
        return round(time.monotonic() - began, 3)

    if not _until(lambda: _rule_loaded(http, prom), timeout):
        raise PathBroken(
            Hop.RULE_NOT_LOADED,
            f"rule not loaded: Prometheus at {prom} does not list {TEST_ALERT} {timeout:g} s "
            "after the rule file was rewritten and reloaded",
            hint="is prometheus.yml's rule_files the file gameday wrote?",
        )
    loaded = since()
    if not _until(lambda: _firing(http, prom, token), timeout):
        raise PathBroken(
            Hop.NOT_FIRING, f"not firing: {TEST_ALERT} is loaded but not firing in {prom}"
        )
    firing = since()
    why = _am_reachable(http, am)
    try:
        arrived = not why and _until(lambda: _in_alertmanager(http, am, token), timeout)
    except httpx.HTTPError as exc:
        why, arrived = f"{type(exc).__name__}: {exc}", False
    if not arrived:
        raise PathBroken(
            Hop.ALERTMANAGER_UNREACHABLE,
            f"Alertmanager unreachable: {why}"
            if why
            else f"Alertmanager at {am} never got {TEST_ALERT} from Prometheus",
            hint="check prometheus.yml's alerting section and Alertmanager's log",
        )
    in_am = since()
    got = receiver.wait_for(lambda r: r.labels.get("gameday_test") == token, timeout)
    if got is None:
        raise PathBroken(
            Hop.RECEIVER_NOT_REACHED,
            f"receiver not reached: Alertmanager at {am} holds {TEST_ALERT}, but nothing "
            f"reached the receiver at {receiver.url} within {timeout:g} s",
            hint="check the webhook url in alertmanager.yml and Alertmanager's log (notify errors)",
        )
    return PathChecked(
        rule_loaded_s=loaded,
        firing_s=firing,
        in_alertmanager_s=in_am,
        delivered_s=since(),
        delivered=got,
        removed=False,
    )
