"""A workshop's seats: seat k (1..N) is instance k of the lab (runner.run.parallel), so the lab as
written (instance 0) stays the facilitator's. Everything of a workshop lives in one folder,
`<state>/workshop/<lab name>/`:

    workshop.json       the lab's inventory, the seats and their attendees, where the drill
                        pages listen, the host page's token
    seat-<k>.yaml       the seat's inventory (every command given it reaches that seat only)
    seat-<k>.token      the seat's token: its drill page opens with it and no other
    seat-<k>.md         the seat's card (cards.html: every card, to print)
    seat-<k>.drill.json the drill `workshop start` started there (pid, scenario)
    seat-<k>.drill.out/.err  its output

The seats' drills write their reports, and `down` the workshop's summary, to a folder of their
own in the team's reports folder (`<reports>/workshops/<lab name>-<UTC time of up>/`): one level
deeper than a run's folder, so that `gameday history` of the team's runs leaves them out, and
`gameday history --reports <that folder>` shows them.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pydantic
import yaml

from runner.drill.server import HOST, RESPONDER, new_token
from runner.errors import InputError, LabError
from runner.fsutil import private_dir, read_bytes, write_private
from runner.labs import open_lab, wait_all_ready
from runner.labs.common.helpers import state_dir, state_root
from runner.run.parallel import check_parallel, instance
from runner.spec.inventory import Inventory
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind
from runner.spec.timing import TimeScale

MAX_SEATS = 32
PAGE_BASE = 8700  # seat k's drill page listens on PAGE_BASE + k; the scoreboard on PAGE_BASE
MANIFEST = "workshop.json"
MAX_NAME = 80  # an attendee's name, as cards and the host page show it


class Manifest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    lab: str
    kind: LabKind
    inventory: str  # the lab's own inventory, absolute
    seats: int
    page_base: int = PAGE_BASE
    # where the seats' drills write their reports and `down` the summary (absolute); None in a
    # workshop brought up by a gameday that did not keep one
    reports: str | None = None
    listen: str = HOST  # the address the seats' drill pages listen on
    public_name: str | None = None  # the name attendees reach it by (None: `listen`)
    host_token: str = ""  # the host page's; "" in a workshop brought up without one
    attendees: tuple[str, ...] = ()  # seat k's attendee is attendees[k - 1], when named


def workshop_dir(lab_name: str) -> Path:
    return state_root() / "workshop" / lab_name


def workshop_reports(reports_root: Path, lab_name: str, now: datetime | None = None) -> Path:
    """A workshop's own reports folder in the team's reports folder (see the module's doc)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return (reports_root / "workshops" / f"{lab_name}-{stamp}").resolve()


def check_seats(inventory: Inventory, n: int) -> None:
    """Refuse a number of seats out of 1..MAX_SEATS, or one the lab cannot isolate."""
    if not 1 <= n <= MAX_SEATS:
        raise InputError(f"--seats must be 1..{MAX_SEATS}, not {n}", field="--seats")
    if inventory.lab.adopt is not None:
        raise InputError(
            f"lab {inventory.lab.name!r} adopts a deployment; seats are labs gameday creates",
            file=inventory.path,
            field="gameday_lab.adopt",
        )
    check_parallel(inventory, n + 1)  # instances 1..n beside instance 0


def parse_seats(text: str, seats: int) -> list[int]:
    """`all`, or seat numbers joined by commas (`1,3`): sorted, each once, each a seat."""
    if text.strip() == "all":
        return list(range(1, seats + 1))
    chosen: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise InputError(
                f"--seats takes 'all' or seat numbers like 1,3; not {part!r}", field="--seats"
            )
        k = int(part)
        if not 1 <= k <= seats:
            raise InputError(f"there is no seat {k}: seats are 1..{seats}", field="--seats")
        if k in chosen:
            raise InputError(f"seat {k} is named twice", field="--seats")
        chosen.append(k)
    return sorted(chosen)


def write_seat_inventory(inventory: Inventory, k: int, folder: Path) -> Inventory:
    """Seat k's inventory, written to `seat-<k>.yaml` and loaded from there."""
    inst = instance(inventory, k)
    data = yaml.safe_load(inst.path.read_text())  # every kind writes its instance's own file
    # the seat's state directory, absolute: an attendee's shell has not the facilitator's
    # GAMEDAY_STATE_DIR, and the seat's commands must reach the same lab
    data["all"]["vars"]["gameday_lab"]["state_dir"] = str(state_dir(inst.lab).resolve())
    text = yaml.safe_dump(data, sort_keys=False)
    path = folder / f"seat-{k}.yaml"
    write_private(path, f"# workshop seat {k} of {inventory.path} (written by gameday)\n" + text)
    return load_inventory(path)


@dataclass(frozen=True)
class Workshop:
    folder: Path
    manifest: Manifest
    _seats: dict[int, Inventory] = field(default_factory=dict, compare=False, repr=False)

    @property
    def seats(self) -> list[int]:
        return list(range(1, self.manifest.seats + 1))

    def seat_path(self, k: int) -> Path:
        return self.folder / f"seat-{k}.yaml"

    def seat(self, k: int) -> Inventory:
        """Seat k's inventory, read once (the page's watcher asks for it ten times a second)."""
        if k not in self._seats:
            self._seats[k] = load_inventory(self.seat_path(k))
        return self._seats[k]

    def drill_dir(self, k: int) -> Path:
        """Where seat k's drill keeps its status.json and server.json."""
        return state_dir(self.seat(k).lab) / "drill"

    def token_path(self, k: int) -> Path:
        return self.folder / f"seat-{k}.token"

    def token(self, k: int) -> str:
        """Seat k's token (its drill page opens with it and no other)."""
        return self.token_path(k).read_text(encoding="utf-8").strip()

    def page_url(self, k: int) -> str:
        """Seat k's drill page as its attendee reaches it, its token in the path."""
        name = self.manifest.public_name or self.manifest.listen
        port = self.manifest.page_base + k
        return f"http://{name}:{port}" + RESPONDER.format(token=self.token(k))

    def attendee(self, k: int) -> str | None:
        names = self.manifest.attendees
        return names[k - 1] if k <= len(names) else None


def load_workshop(inventory: Inventory) -> Workshop:
    """The workshop of this lab; LabError (exit 3) when none is up."""
    folder = workshop_dir(inventory.lab.name)
    try:
        manifest = Manifest.model_validate_json((folder / MANIFEST).read_text())
    except FileNotFoundError:
        raise LabError(
            f"no workshop of lab {inventory.lab.name!r} is up",
            hint=f"gameday workshop up --seats N --lab {inventory.path}",
        ) from None
    return Workshop(folder, manifest)


@dataclass(frozen=True)
class Listen:
    """Where the seats' drill pages listen, and the name attendees reach them by."""

    address: str = HOST
    public_name: str | None = None


def check_address(listen: Listen) -> None:
    """Refuse (exit 2) an address this machine does not have, before any seat comes up: the
    seats' drills bind it only when they start."""
    if listen.address == HOST:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((listen.address, 0))
        except OSError as exc:
            raise InputError(
                f"--listen {listen.address}: this machine cannot listen there ({exc.strerror})",
                field="--listen",
                hint="`ip -4 addr` lists this machine's addresses",
            ) from None


def read_attendees(path: Path) -> tuple[str, ...]:
    """Attendees' names, one a line (blank lines and `#` comments skipped): seat k is the
    k-th. InputError (exit 2) for a name with control characters or longer than 80."""
    text = read_bytes(path, 64 * 1024, InputError, "attendees").decode("utf-8", "replace")
    names: list[str] = []
    for no, line in enumerate(text.splitlines(), 1):
        name = " ".join(line.split())
        if not name or name.startswith("#"):
            continue
        if len(name) > MAX_NAME or any(not c.isprintable() for c in name):
            raise InputError(
                f"line {no}: a name is up to {MAX_NAME} printable characters",
                file=path,
                field="--attendees",
            )
        names.append(name)
    if not names:
        raise InputError("no attendee's name in the file", file=path, field="--attendees")
    return tuple(names)


def create_workshop(
    inventory: Inventory,
    n: int,
    page_base: int,
    reports_root: Path | None = None,
    *,
    listen: Listen = Listen(),
    attendees: tuple[str, ...] = (),
) -> Workshop:
    """The workshop's folder, manifest, seat inventories and seat tokens (no lab started yet);
    the seats' reports go to a folder of the workshop's own under `reports_root` (see the
    module's doc). `attendees`: the seats' attendees, seat k the k-th (at most `n`)."""
    check_seats(inventory, n)
    if len(attendees) > n:
        raise InputError(
            f"{len(attendees)} attendees for {n} seat(s)",
            field="--attendees",
            hint="one name a line, one line per seat (or leave --seats out)",
        )
    check_address(listen)
    folder = workshop_dir(inventory.lab.name)
    if (folder / MANIFEST).exists():
        raise InputError(
            f"a workshop of lab {inventory.lab.name!r} is already up ({folder})",
            field="--seats",
            hint=f"gameday workshop down --lab {inventory.path}",
        )
    private_dir(folder)
    manifest = Manifest(
        lab=inventory.lab.name,
        kind=inventory.lab.kind,
        inventory=str(inventory.path.resolve()),
        seats=n,
        page_base=page_base,
        reports=None
        if reports_root is None
        else str(workshop_reports(reports_root, inventory.lab.name)),
        listen=listen.address,
        public_name=listen.public_name,
        host_token=new_token(),
        attendees=attendees,
    )
    write_private(folder / MANIFEST, manifest.model_dump_json(indent=2))
    ws = Workshop(folder, manifest)
    for k in ws.seats:
        write_seat_inventory(inventory, k, folder)
        write_private(ws.token_path(k), new_token() + "\n")
    return ws


def seat_up(inventory: Inventory) -> dict[str, str]:
    """Bring one seat's lab up and wait until every node serves (and its Prometheus has
    scraped); its nodes' URLs (the driver that watched them come up knows them). A seat that
    cannot come up is taken down again."""
    driver = open_lab(inventory)
    driver.up()
    try:
        spec = inventory.lab
        wait_all_ready(driver, TimeScale.of(spec).boot_timeout_lab(spec))
        driver.monitoring_ready(60)
        return {n.name: driver.url(n.name) for n in inventory.nodes}
    except BaseException:
        driver.down()
        raise


def for_each_seat(
    seats: list[int], work: Callable[[int], None], jobs: int
) -> dict[int, BaseException]:
    """`work(k)` for every seat, `jobs` at a time (threads: a seat's work is waiting on its lab's
    processes, containers or pods); the errors by seat."""
    errors: dict[int, BaseException] = {}

    def one(k: int) -> None:
        try:
            work(k)
        except Exception as exc:  # reported by the caller with the seat's number
            errors[k] = exc

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(seats)))) as pool:
        list(pool.map(one, seats))
    return errors


def bring_up(ws: Workshop, jobs: int) -> tuple[float, dict[int, dict[str, str]]]:
    """Every seat up, `jobs` at a time; the wall seconds it took, and each seat's nodes' URLs.
    When a seat fails, every seat is taken down again and the folder removed: a workshop is up
    whole or not at all."""
    t0 = time.monotonic()
    urls: dict[int, dict[str, str]] = {}

    def up(k: int) -> None:
        urls[k] = seat_up(ws.seat(k))

    try:
        errors = for_each_seat(ws.seats, up, jobs)
    except BaseException:
        take_down(ws, jobs)
        raise
    if errors:
        left = take_down(ws, jobs)
        first = min(errors)
        raise LabError(
            "workshop not started: "
            + "; ".join(f"seat {k}: {str(e).splitlines()[0]}" for k, e in sorted(errors.items()))
            + (f"; and taking the seats down again left: {'; '.join(left)}" if left else ""),
            hint=getattr(errors[first], "hint", None),
        )
    return time.monotonic() - t0, urls


def take_down(ws: Workshop, jobs: int) -> list[str]:
    """Every seat down, its drill folder removed, then the workshop's folder; what is still
    there afterwards (empty when nothing is), in which case the folder stays for another try."""

    def down(k: int) -> None:
        inv = ws.seat(k)
        open_lab(inv).down()
        shutil.rmtree(state_dir(inv.lab) / "drill", ignore_errors=True)

    errors = for_each_seat(ws.seats, down, jobs)
    left = [f"seat {k}: {str(e).splitlines()[0]}" for k, e in sorted(errors.items())]
    left += remaining(ws)
    if not left:
        shutil.rmtree(ws.folder)
    return left


def remaining(ws: Workshop, wait_s: float = 30.0) -> list[str]:
    """What of the seats' labs still exists (processes, containers, namespaces), after waiting
    up to `wait_s` for what is on its way out (a namespace being deleted)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [f"seat {k}: {o}" for k in ws.seats for o in open_lab(ws.seat(k)).leftover_objects()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
