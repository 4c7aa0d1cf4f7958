"""A node's address is checked where it is read: `gameday validate` refuses one that is neither
an IP address nor a host name (by its form on every lab; on the local lab, whose nodes listen on
this machine, one this machine cannot resolve), naming file, line and field; and a bind that
fails says what the OS said: a taken address is "taken", a name that resolves to nothing is "not
an address", never one for the other."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli.main import main
from runner.errors import InventoryError, LabError
from runner.labs.common.network import ensure_free
from runner.spec.inventory import is_address
from runner.spec.inventory_load import load_inventory
from tests.support.cli import ROOT, variant

LOCAL = ROOT / "inventories" / "local.yaml"
COMPOSE = ROOT / "inventories" / "compose.yaml"


def _line(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_validate_refuses_a_local_node_address_that_is_not_one(tmp_path: Path) -> None:
    inv = variant(LOCAL, tmp_path, {"gameday_address: 127.0.77.10": "gameday_address: 2001-02-30"})
    got = CliRunner().invoke(main, ["validate", str(inv)])
    assert got.exit_code == 2
    line = _line(inv, "gameday_address: 2001-02-30")
    want = (
        f"{inv}:{line} [serving.gameday_address]: '2001-02-30' is neither an IP address nor a "
        "host name this machine resolves (Name or service not known)"
    )
    assert want in " ".join(got.stderr.split()), got.stderr
    assert "taken" not in got.stderr


def test_a_host_name_this_machine_resolves_is_a_local_nodes_address(tmp_path: Path) -> None:
    inv = variant(LOCAL, tmp_path, {"gameday_address: 127.0.77.10": "gameday_address: localhost"})
    assert load_inventory(inv).node("serving").address == "localhost"


@pytest.mark.parametrize("bad", ["10.0.0.300", "node one", "-node", "a..b", "x" * 64])
def test_an_address_of_no_form_is_refused_on_every_lab(tmp_path: Path, bad: str) -> None:
    inv = variant(COMPOSE, tmp_path, {"gameday_address: 172.30.81.2": f"gameday_address: '{bad}'"})
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    assert err.value.field == "node2.gameday_address"
    assert err.value.line == _line(inv, f"gameday_address: '{bad}'")
    assert "is neither an IP address nor a host name" in err.value.message


def test_what_an_address_may_be() -> None:
    for ok in ("127.0.0.1", "::1", "0.0.0.0", "node-1", "gpu1.lab.example.com", "x.example."):
        assert is_address(ok), ok
    assert is_address("2001-02-30")  # a name by its form: only resolving it tells
    for bad in ("", "1.2.3.256", "a_b", "node..1", "-a", "a-"):
        assert not is_address(bad), bad


def test_a_taken_address_is_taken() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(LabError) as err:
            ensure_free("127.0.0.1", port, "node serving cannot listen on")
    assert err.value.message.startswith(
        f"node serving cannot listen on 127.0.0.1:{port}, which is taken ("
    )
    assert "another program uses that address" in (err.value.hint or "")


def test_a_name_that_resolves_to_nothing_is_not_an_address_and_not_taken() -> None:
    with pytest.raises(LabError) as err:
        ensure_free("2001-02-30", 8000, "node serving cannot listen on")
    assert err.value.message == (
        "node serving cannot listen on 2001-02-30:8000: '2001-02-30' is not an address "
        "(Name or service not known)"
    )
    assert "taken" not in str(err.value) and "another program" not in str(err.value)


def test_an_address_of_another_machine_is_not_this_machines() -> None:
    with pytest.raises(LabError) as err:
        ensure_free("192.0.2.1", 8000, "node serving cannot listen on")
    assert "192.0.2.1 is not an address of this machine" in err.value.message
    assert "taken" not in str(err.value)
