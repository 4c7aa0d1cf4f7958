"""A seat card: what one attendee needs to reach their lab, the commands preset to it, and their
drill page's address and token. Plain Markdown (`seat-<k>.md`), printed as it is written, and
every card on one page to print (`cards.html`, a card a sheet), where each card carries its page's
address as a QR code too, for an attendee to open on a phone or scan from the printout."""

from __future__ import annotations

from dataclasses import dataclass

import segno

from runner.report.templating import ENV
from runner.results.printable import printable
from runner.spec.inventory import Inventory


@dataclass(frozen=True)
class Seat:
    k: int
    inventory: Inventory
    inventory_file: str  # absolute: the card works from any folder
    urls: dict[str, str]  # node -> its API URL
    page_url: str  # where the seat's drill page is once a drill runs, its token in the path
    token: str = ""  # the seat's token, to type at the page's root
    attendee: str | None = None


def restart_group(inventory: Inventory) -> str | None:
    """The largest group of several nodes (the tensor-parallel group), to restart together."""
    groups = {g for n in inventory.nodes for g in n.groups}
    sized = sorted((-len(inventory.resolve(g)), g) for g in groups if len(inventory.resolve(g)) > 1)
    return sized[0][1] if sized else None


def seat_card(seat: Seat) -> str:
    inv = seat.inventory
    first = inv.nodes[0].name
    group = restart_group(inv)
    width = max(len(n) for n in seat.urls)
    lines = [
        f"# Seat {seat.k}: lab {inv.lab.name} ({inv.lab.kind.value})",
        "",
        *([f"Attendee: {printable(seat.attendee)}", ""] if seat.attendee else []),
        "Your lab's nodes:",
        "",
        *(f"    {n:<{width}}  {url}" for n, url in seat.urls.items()),
        "",
        "In your terminal, first:",
        "",
        f"    export GAMEDAY_LAB={seat.inventory_file}",
        "",
        "Then, to look and to act:",
        "",
        "    gameday lab ps                      # every node's state",
        f"    gameday lab logs {first:<18} # a node's log (--previous, -f)",
        f"    gameday lab restart {first:<15} # one node",
    ]
    if group is not None:
        lines.append(f"    gameday lab restart {group:<15} # a group, together")
    lines += [
        f"    gameday lab stop {first} / gameday lab start {first}",
        "    gameday drill ack                   # you are on it",
        "    gameday drill hint                  # the next hint",
        "",
        f"Your drill's page, once the drill runs: {seat.page_url}",
        "",
    ]
    if seat.token:
        root = seat.page_url.split("/responder/", 1)[0] + "/"
        lines += [
            f"Or open {root} and type your seat's token: {seat.token}",
            "",
            "Keep the token to yourself: whoever holds it acts on your drill.",
            "",
        ]
    return "\n".join(lines)


def qr_code(url: str) -> str:
    """The QR code of `url` as an SVG data URI (error correction M: a creased or smudged
    printout still scans), embedded so the page stays self-contained."""
    return str(segno.make(url, error="m").svg_data_uri(scale=4))


def cards_page(seats: list[Seat], lab: str) -> str:
    """Every seat's card on one self-contained page, a card a printed sheet."""
    cards = [(s, seat_card(s), qr_code(s.page_url)) for s in seats]
    return ENV.get_template("seat_cards.html.j2").render(lab=lab, cards=cards)
