"""Trust on shared machines: what another user, a process on the machine or a scenario's own text
must not be able to do (a planted configuration, a step that outlives its runner, a forged
alert, lab traffic through a proxy, HTML in report.md)."""

from __future__ import annotations

import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner
from markdown_it import MarkdownIt

from runner import fsutil
from runner.cli import options
from runner.cli.main import main
from runner.errors import InputError, InventoryError
from runner.labs.common.alertmanager_config import (
    RECEIVER_PATH,
    TOKEN_FILE,
    receiver_token,
    write_alertmanager,
)
from runner.report import markdown
from runner.results.schema import Assertion, Phase, Verdict
from runner.run.receiver import MAX_BODY, WebhookReceiver
from runner.spec.config import builtin_lab, load_config
from runner.spec.inventory_load import load_inventory
from tests.support.results import run_result, scenario_result

# ---- report.md: raw HTML in a scenario's own text ------------------------------------------

PAYLOAD = "<img src=x onerror=alert(1)>"


def test_report_md_escapes_raw_html() -> None:
    """A Markdown viewer renders the HTML Markdown lets through: every free text (the title, a
    step's name, what was observed, a note) reaches report.md as text, never as a tag."""
    sc = scenario_result(
        PAYLOAD,
        id=f"s{PAYLOAD}",
        title=f"t {PAYLOAD}",
        file=f"scenarios/{PAYLOAD}`<b>x</b>.yaml",
        notes=[f"note {PAYLOAD}"],
        runbooks={"restart <script>alert(2)</script>": f"docs/{PAYLOAD}"},
        assertions=[
            Assertion(
                name=f"recover: step {PAYLOAD}",
                phase=Phase.RECOVER,
                verdict=Verdict.FAILED,
                expected=f"<b>{PAYLOAD}</b>",
                observed=f"exit 1; last output: {PAYLOAD}",
            )
        ],
    )
    md = markdown(run_result(sc))
    rendered = MarkdownIt("commonmark").render(md)  # html: on, as GitHub-like viewers allow
    assert "<img" not in rendered and "<script" not in rendered and "<b>" not in rendered
    # what the viewer shows is the text as written
    assert rendered.count("&lt;img src=x onerror=alert(1)&gt;") >= 6


# ---- a planted gameday.toml or inventory ---------------------------------------------------

OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@as_root
def test_a_planted_config_of_another_user_is_refused_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared parent folder (the system's temporary folder) holds another user's gameday.toml
    whose lab would run its own engine command: gameday refuses it, naming it, and exits 2."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    planted = _write(tmp_path / "shared" / "gameday.toml", 'lab = "evil.yaml"\n')
    os.chown(planted, OTHER_UID, OTHER_UID)
    work = tmp_path / "shared" / "work" / "sub"
    work.mkdir(parents=True)
    with pytest.raises(InputError) as err:
        load_config(work, {})
    assert err.value.exit_code == 2 and err.value.file == str(planted)
    assert f"user id {OTHER_UID}" in str(err.value) and "copy it" in str(err.value)
    monkeypatch.chdir(work)
    options.config.cache_clear()  # the CLI reads its configuration once per process
    res = CliRunner().invoke(main, ["list"])
    assert res.exit_code == 2, res.output
    assert str(planted) in res.output and "refused" in res.output
    assert "Traceback" not in res.output


def test_a_config_others_can_write_is_refused(tmp_path: Path) -> None:
    mine = _write(tmp_path / "repo" / "gameday.toml", "builtin = false\n")
    (tmp_path / "repo" / ".git").mkdir()
    mine.chmod(0o666)
    with pytest.raises(InputError, match="anyone can write") as err:
        load_config(tmp_path / "repo", {})
    assert err.value.hint == f"if you trust its content, `chmod go-w {mine}`"
    mine.chmod(0o644)
    assert load_config(tmp_path / "repo", {}).file == mine


def test_group_write_is_refused_unless_the_group_is_the_users_own(tmp_path: Path) -> None:
    """A umask of 0002 (per-user groups: Debian, Ubuntu, Fedora) makes `gameday init`'s files
    0664 in the user's own group, which lets no one else in: accepted, as git does. Group
    write for a group others are in is refused."""
    mine = _write(tmp_path / "repo" / "gameday.toml", "builtin = false\n")
    (tmp_path / "repo" / ".git").mkdir()
    mine.chmod(0o664)
    own = fsutil._own_group(os.getgid())
    if own:
        assert load_config(tmp_path / "repo", {}).file == mine
    if os.getuid() == 0:  # another group: only root can give the file one
        os.chown(mine, -1, OTHER_UID)
        with pytest.raises(InputError, match="its group can write"):
            load_config(tmp_path / "repo", {})
    elif not own:
        with pytest.raises(InputError, match="its group can write"):
            load_config(tmp_path / "repo", {})


def test_the_walk_stops_at_the_repository_root(tmp_path: Path) -> None:
    """A gameday.toml above the repository (a `.git` folder or file) is none of its own."""
    _write(tmp_path / "gameday.toml", 'lab = "above.yaml"\n')
    for git in ("dir", "file"):
        repo = tmp_path / git
        (repo / "src").mkdir(parents=True)
        if git == "dir":
            (repo / ".git").mkdir()
        else:
            _write(repo / ".git", "gitdir: /elsewhere/.git/worktrees/x\n")  # a worktree
        assert load_config(repo / "src", {}).file is None
        own = _write(repo / "gameday.toml", "builtin = false\n")
        assert load_config(repo / "src", {}).file == own


def test_the_walk_stops_at_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "gameday.toml", 'lab = "above.yaml"\n')
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    assert load_config(home / "project", {}).file is None
    own = _write(home / "gameday.toml", "builtin = false\n")
    assert load_config(home / "project", {}).file == own


def test_an_inventory_of_another_user_or_others_can_write_is_refused(tmp_path: Path) -> None:
    inv = tmp_path / "lab.yaml"
    inv.write_bytes(builtin_lab().read_bytes())
    inv.chmod(0o646)
    with pytest.raises(InventoryError, match="anyone can write this inventory") as err:
        load_inventory(inv)
    assert err.value.exit_code == 2 and err.value.file == str(inv)
    inv.chmod(0o644)
    if os.getuid() == 0:
        os.chown(inv, OTHER_UID, OTHER_UID)
        with pytest.raises(InventoryError, match=f"belongs to user id {OTHER_UID}"):
            load_inventory(inv)
        os.chown(inv, 0, 0)  # root's own files (an installed package's) are trusted
    assert load_inventory(inv).path == inv


# ---- the alert receiver: a secret, and a bounded body --------------------------------------

FIRING = {
    "version": "4",
    "status": "firing",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "ServingDown"},
            "annotations": {},
            "startsAt": "2026-12-03T10:00:00Z",
        }
    ],
}


def _raw_post(receiver: WebhookReceiver, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """A POST written by hand (its headers as given); the status and what else came back."""
    with socket.create_connection((receiver.host, receiver.port), timeout=5) as s:
        s.sendall(f"POST {RECEIVER_PATH} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + body)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1]), answer


def test_a_forged_alert_without_the_labs_token_is_refused() -> None:
    with WebhookReceiver("127.0.0.1", _free_port(), "lab", token="s3cret") as rcv:
        url = rcv.url
        forged = httpx.post(url, json=FIRING, trust_env=False)
        wrong = httpx.post(url, json=FIRING, headers={"Authorization": "Bearer x"}, trust_env=False)
        good = httpx.post(
            url, json=FIRING, headers={"Authorization": "Bearer s3cret"}, trust_env=False
        )
        assert (forged.status_code, wrong.status_code, good.status_code) == (401, 401, 200)
        assert [a.alertname for a in rcv.received()] == ["ServingDown"]
        assert rcv.refused == 2


def test_a_bad_content_length_or_an_oversize_body_is_answered_without_a_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with WebhookReceiver("127.0.0.1", _free_port(), "lab") as rcv:
        assert _raw_post(rcv, "Content-Length: abc\r\n")[0] == 400
        assert _raw_post(rcv, "Content-Length: -5\r\n")[0] == 400
        assert _raw_post(rcv, "")[0] == 400  # none at all
        assert _raw_post(rcv, f"Content-Length: {'9' * 5000}\r\n")[0] == 400
        # refused before a byte of the body is read: a sender cannot make it hold 1 GiB
        assert _raw_post(rcv, f"Content-Length: {1 << 30}\r\n", b"{")[0] == 413
        assert _raw_post(rcv, f"Content-Length: {MAX_BODY + 1}\r\n")[0] == 413
        body = json.dumps(FIRING).encode()
        assert _raw_post(rcv, f"Content-Length: {len(body)}\r\n", body)[0] == 200
        assert len(rcv.received()) == 1
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception" not in err


def test_lab_up_gives_alertmanager_the_labs_token_owner_only(tmp_path: Path) -> None:
    inv = load_inventory(builtin_lab())
    path = write_alertmanager(tmp_path / "state" / "alertmanager", inv, "http://127.0.0.1:9/a")
    token = receiver_token(tmp_path / "state")
    assert token is not None and len(token) >= 32
    assert (tmp_path / "state" / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    hook = yaml.safe_load(path.read_text())["receivers"][0]["webhook_configs"][0]
    assert hook["http_config"] == {"authorization": {"type": "Bearer", "credentials": token}}
    # the next `lab up` keeps it: a receiver started in between still takes the lab's alerts
    write_alertmanager(tmp_path / "state" / "alertmanager", inv, "http://127.0.0.1:9/a")
    assert receiver_token(tmp_path / "state") == token
    assert receiver_token(tmp_path / "other") is None  # a lab without one asks for none


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_suite_that_brings_its_lab_up_asks_for_the_token_lab_up_writes(tmp_path: Path) -> None:
    """The suite's receiver starts before the lab comes up: the lab's token is made first, so
    the receiver asks for the one alertmanager.yml then carries."""
    from runner.labs.fake import FakeLab
    from runner.run import suite
    from tests.support.fakelab import INVENTORY, wrong_flag

    port = _free_port()
    data = yaml.safe_load(yaml.safe_dump(INVENTORY))
    data["all"]["vars"]["gameday_lab"]["monitoring"]["receiver_listen"] = f"127.0.0.1:{port}"
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(data))
    state = tmp_path / "state"
    lab = FakeLab(load_inventory(tmp_path / "inventory.yaml"), wrong_flag(), state_dir=state)
    s = suite._Suite([lab], "run-1", tmp_path / "report", lambda _m: None, tagged=False)
    s.receive = True
    s.setup(0)
    try:
        token = receiver_token(state)
        assert token is not None
        url = f"http://127.0.0.1:{port}{RECEIVER_PATH}"
        assert httpx.post(url, json=FIRING, trust_env=False).status_code == 401
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.post(url, json=FIRING, headers=auth, trust_env=False).status_code == 200
    finally:
        s.teardown(0)


def test_a_request_the_receiver_fails_on_is_kept_as_evidence_a_hang_up_is_not() -> None:
    """A handler's failure is not printed (the library never prints) but kept, so that a run
    that ends "nothing delivered" says why; a client hanging up is its own problem."""
    from runner.run.phases.detect import received_since
    from runner.run.receiver import _QuietServer

    with WebhookReceiver("127.0.0.1", 0, "lab-a", "tok") as receiver:
        server = receiver._server
        assert isinstance(server, _QuietServer)
        for exc in (ConnectionResetError("reset"), ValueError("bad group key")):
            try:
                raise exc
            except Exception:
                server.handle_error(None, ("127.0.0.1", 1))
        assert receiver.failures() == ["ValueError: bad group key"]
        since = datetime.now(UTC)
        assert "failed on: ValueError: bad group key" in received_since(receiver, since)


@as_root
def test_a_planted_scenario_of_another_user_is_refused(tmp_path: Path) -> None:
    """A scenario's command steps run programs: one another user planted in a shared folder is
    refused, as a planted gameday.toml is."""
    from runner.errors import ScenarioError
    from runner.spec.scenario import load_scenario

    planted = _write(tmp_path / "scenarios" / "x.yaml", "apiVersion: gameday/v1\n")
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(ScenarioError, match="belongs to user id 65534"):
        load_scenario(planted)
    planted.chmod(0o666)
    os.chown(planted, os.getuid(), os.getgid())
    with pytest.raises(ScenarioError, match="anyone can write"):
        load_scenario(planted)
