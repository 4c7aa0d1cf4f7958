"""Host-level actions as Ansible playbooks (playbooks/), run through ansible-runner against the
lab's own Ansible inventory: inside the compose lab's containers (community.docker.docker_api
connection), or on real nodes over SSH (inventories/example-ssh.yaml). Each run keeps Ansible's
events (job_events/*.json, stdout) in its own directory under `artifacts`."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from typing import Any

from runner.errors import LabError
from runner.programs import resolve_command

RUN_DIR = "/run/gameday"  # where playbooks/process.yaml keeps pid files and command lines


def ansible_bin() -> str:
    """The directory holding ansible-playbook: on PATH, or beside this interpreter."""
    found = resolve_command("ansible-playbook")
    if found:
        return str(Path(found).parent)
    raise LabError(
        "ansible-playbook is not installed (host actions run as Ansible playbooks)",
        hint="pip install ansible ansible-runner (make test and make run install them)",
    )


MARK = "GAMEDAY_HOST_ACTION"  # in each playbook process's environment: the lab's name


def in_flight(lab: str) -> list[int]:
    """Playbook processes of this lab still running (one a killed runner left behind keeps
    going: ansible-runner starts it in a session of its own)."""
    want = f"{MARK}={lab}".encode()
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if want in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def wait_in_flight(lab: str, timeout: float) -> list[int]:
    """Wait for them to finish (a half-done address move is worse than a finished one); return
    the ones still running after `timeout`. Each exit is awaited on a pidfd (no polling)."""
    deadline = time.monotonic() + timeout
    for pid in in_flight(lab):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue  # gone already
        try:
            select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        finally:
            os.close(fd)
    return in_flight(lab)


def run_playbook(
    inventory: Path,
    playbook: Path,
    limit: str,
    extravars: dict[str, Any],
    artifacts: Path,
    lab: str,
) -> None:
    import ansible_runner

    if not playbook.exists():
        raise LabError(f"playbook {playbook} does not exist (gameday_lab.compose.playbooks)")
    artifacts.mkdir(parents=True, exist_ok=True)
    bin_dir = ansible_bin()
    result = ansible_runner.run(
        private_data_dir=str(artifacts),
        playbook=str(playbook),
        inventory=str(inventory.resolve()),
        limit=limit,
        extravars=extravars,
        quiet=True,
        envvars={
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_HOST_KEY_CHECKING": "False",
            "ANSIBLE_RETRY_FILES_ENABLED": "False",
            "ANSIBLE_NOCOLOR": "1",
            MARK: lab,
        },
    )
    if result.status == "successful" and result.rc == 0:
        return
    failed = [
        e for e in result.events if e.get("event") in ("runner_on_failed", "runner_on_unreachable")
    ]
    detail = ""
    if failed:
        res = failed[-1].get("event_data", {}).get("res", {})
        detail = str(res.get("msg") or res.get("stderr") or "")[:300]
    raise LabError(
        f"Ansible playbook {playbook.name} failed on {limit} ({result.status}, rc {result.rc})"
        + (f": {detail}" if detail else ""),
        hint=f"Ansible's events are in {result.config.artifact_dir}",
    )
