"""Host-level actions as Ansible playbooks (playbooks/), run through ansible-runner against the
lab's own Ansible inventory: inside the compose lab's containers (community.docker.docker_api
connection), or on real nodes over SSH (inventories/example-ssh.yaml). Each run keeps Ansible's
events (job_events/*.json, stdout) in its own directory under `artifacts`.

Ansible renders every string it is given as a Jinja template, and a template can run commands
(`lookup('pipe', ...)`). So nothing gameday hands Ansible is a template: the extra variables
(values from scenarios) and the inventory's variables reach it as YAML tagged `!unsafe`, which
Ansible takes as plain data. The inventory Ansible reads is a copy of the lab's with every string
so tagged (group_vars/ and host_vars/ directories beside an inventory are not read: gameday's own
loader does not read them either)."""

from __future__ import annotations

import os
import select
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from runner.errors import LabError
from runner.labs.common.ansible import ansible_bin, write_unsafe

RUN_DIR = "/run/gameday"  # where playbooks/process.yaml keeps pid files and command lines
PLAYBOOK_TIMEOUT_S = 300  # a host action is seconds of work; a hung one must not hang the run


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
    timeout: int = PLAYBOOK_TIMEOUT_S,
) -> None:
    """Run `playbook` on the hosts `limit` names; LabError when it fails or takes over
    `timeout` seconds. Its inputs live in a private directory removed afterwards (they copy the
    inventory, environment values included); its events stay in `artifacts`."""
    import ansible_runner

    if not playbook.exists():
        raise LabError(f"playbook {playbook} does not exist (gameday_lab.compose.playbooks)")
    artifacts.mkdir(parents=True, exist_ok=True)
    bin_dir = ansible_bin()
    with tempfile.TemporaryDirectory(prefix="gameday-ansible-") as private:
        # ansible-runner passes env/extravars to ansible-playbook as `-e @file`, which Ansible
        # reads with its own YAML loader: the `!unsafe` tags hold
        write_unsafe(Path(private) / "env" / "extravars", extravars)
        hosts = Path(private) / "inventory.yaml"
        write_unsafe(hosts, yaml.safe_load(inventory.read_text()))
        result = ansible_runner.run(
            private_data_dir=private,
            artifact_dir=str(artifacts / "artifacts"),
            playbook=str(playbook),
            inventory=str(hosts),
            limit=limit,
            quiet=True,
            timeout=timeout,
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
    if result.status == "timeout":
        raise LabError(
            f"Ansible playbook {playbook.name} did not finish on {limit} in {timeout} s "
            "(timed out, stopped)",
            hint=f"Ansible's events are in {result.config.artifact_dir}",
        )
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
