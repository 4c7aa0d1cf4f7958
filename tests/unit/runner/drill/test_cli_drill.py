"""`gameday drill ack|hint|stop`: they find the lab's drill by its server.json and POST there."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli.main import main
from runner.drill.session import DRILL_DIR
from runner.labs import open_lab
from tests.support.fakelab import inventory

Seen = list[tuple[str, str | None]]


@pytest.fixture
def page() -> Iterator[tuple[str, Seen]]:
    seen: Seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append((self.path, self.headers.get("X-Gameday")))
            body = json.dumps({"message": f"done: {self.path}"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def folder_of(inv_path: Path) -> Path:
    from runner.spec.inventory_load import load_inventory

    return open_lab(load_inventory(inv_path)).state_dir / DRILL_DIR


def test_no_drill_running_is_exit_3_with_a_message(tmp_path: Path) -> None:
    inv = inventory(tmp_path).path
    r = CliRunner().invoke(main, ["drill", "ack", "--lab", str(inv)])
    assert r.exit_code == 3
    assert "no drill is running on this lab" in r.output


def test_a_drill_without_a_page_says_so(tmp_path: Path) -> None:
    inv = inventory(tmp_path).path
    folder = folder_of(inv)
    folder.mkdir(parents=True)
    (folder / "server.json").write_text(json.dumps({"url": None, "pid": os.getpid()}))
    r = CliRunner().invoke(main, ["drill", "hint", "--lab", str(inv)])
    assert r.exit_code == 3
    assert "the drill on this lab has no page (--no-page)" in r.output


def test_a_drill_whose_process_is_gone_is_not_running(tmp_path: Path) -> None:
    inv = inventory(tmp_path).path
    folder = folder_of(inv)
    folder.mkdir(parents=True)
    (folder / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": 2**22 + 7}))
    r = CliRunner().invoke(main, ["drill", "stop", "--lab", str(inv)])
    assert r.exit_code == 3
    assert f"pid {2**22 + 7} is gone" in r.output


def test_ack_hint_stop_post_to_the_page_with_the_header(
    tmp_path: Path, page: tuple[str, Seen]
) -> None:
    url, seen = page
    inv = inventory(tmp_path).path
    folder = folder_of(inv)
    folder.mkdir(parents=True)
    # the page server names its root with a trailing slash
    (folder / "server.json").write_text(json.dumps({"url": url + "/", "pid": os.getpid()}))
    outs = [
        CliRunner().invoke(main, ["drill", verb, "--lab", str(inv)])
        for verb in ("ack", "hint", "stop")
    ]
    assert [(r.exit_code, r.output.strip()) for r in outs] == [
        (0, "done: /ack"),
        (0, "done: /hint"),
        (0, "done: /give-up"),
    ]
    assert seen == [("/ack", "1"), ("/hint", "1"), ("/give-up", "1")]


def test_the_served_page_s_tokens_are_in_an_owner_only_server_json_and_ack_carries_them(
    tmp_path: Path,
) -> None:
    """The drill's server.json holds its page's tokens: 0600, in a 0700 folder, even in a state
    directory that is not owner-only. `gameday drill ack` reaches the page with the token; with
    another seat's token in its place, the page refuses."""
    import stat
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from runner.cli.drill import Page, _served
    from runner.drill.bus import DrillBus
    from runner.drill.model import DrillPhase, DrillStatus
    from runner.spec.inventory_load import load_inventory

    inv = inventory(tmp_path).path
    lab = open_lab(load_inventory(inv))
    lab.state_dir.mkdir(parents=True, mode=0o755, exist_ok=True)
    os.chmod(lab.state_dir, 0o755)
    bus = DrillBus(
        DrillStatus(
            scenario="s", title="t", lab="l", phase=DrillPhase.HANDED_OVER,
            started_at=datetime.now(UTC),
        )
    )  # fmt: skip
    acked: list[str] = []
    bus.on_request(lambda req, data: acked.append(req.value) or "acknowledged")
    token = "seat-token-" + "q" * 16
    with _served(SimpleNamespace(lab=lab, bus=bus), Page(token=token), no_page=False):  # type: ignore[arg-type]
        folder = folder_of(inv)
        info = json.loads((folder / "server.json").read_text())
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / "server.json").stat().st_mode) == 0o600
        assert info["token"] == token and info["url"].endswith(f"/responder/{token}/")
        assert info["facilitator_url"] != info["url"] and token not in info["facilitator_url"]
        r = CliRunner().invoke(main, ["drill", "ack", "--lab", str(inv)])
        assert (r.exit_code, r.output.strip()) == (0, "acknowledged")
        assert acked == ["ack"]
        other = info["local_url"].replace(token, "seat-token-" + "w" * 16)
        (folder / "server.json").write_text(json.dumps(info | {"local_url": other}))
        r = CliRunner().invoke(main, ["drill", "hint", "--lab", str(inv)])
        assert r.exit_code == 3
        assert "the drill's page refused: HTTP 401" in r.output
        assert acked == ["ack"]
    assert not (folder / "server.json").exists()


def test_a_token_file_that_holds_no_token_is_refused(tmp_path: Path) -> None:
    from runner.cli.drill import read_token
    from runner.errors import InputError

    f = tmp_path / "seat-1.token"
    f.write_text("abc/../x\n")
    with pytest.raises(InputError, match="letters, digits"):
        read_token(f)
    f.write_text("A" * 24 + "\n")
    assert read_token(f) == "A" * 24
