"""Hostile input that reaches the labs' tools: Ansible never renders a value gameday passes it,
destructive calls check ownership first, the Kubernetes lab needs an explicit kube context, and
every call into Ansible, Docker or the Kubernetes API that can block has a timeout."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import LabError
from runner.labs.compose import hostactions


def evil(marker: Path) -> str:
    """A value that runs a shell command wherever a template engine renders it."""
    return "{{ lookup('pipe', 'touch " + str(marker) + "') }}"


def local_inventory(tmp_path: Path, **host_vars: Any) -> Path:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "gameday_lab": {"name": "unit", "kind": "compose"},
                    },
                    "hosts": {"box": host_vars},
                }
            }
        )
    )
    return inv


ECHO = """
- name: "{{ gameday_node }} echoes its variables"
  hosts: "{{ gameday_node }}"
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'process': gameday_process, 'command': gameday_command,
                      'label': label, 'lab': gameday_lab.name} | to_json }}"
"""


def test_no_value_gameday_passes_to_ansible_is_rendered(tmp_path: Path) -> None:
    """Extra variables (from a scenario) and inventory variables reach the playbook as they are:
    a template in one is text, never evaluated (a real ansible-playbook run on localhost)."""
    marker = tmp_path / "rendered"
    out = tmp_path / "out.json"
    playbook = tmp_path / "echo.yaml"
    playbook.write_text(ECHO)
    inv = local_inventory(tmp_path, label=evil(marker))
    inv.write_text(inv.read_text().replace("name: unit", f"name: {json.dumps(evil(marker))}"))
    hostactions.run_playbook(
        inv,
        playbook,
        "box",
        {
            "gameday_node": "box",
            "gameday_process": evil(marker),
            "gameday_command": ["echo", evil(marker), "30", "yes", "null", ""],
            "out": str(out),
        },
        tmp_path / "ansible",
        f"unit-{os.getpid()}",
    )
    assert not marker.exists()
    assert json.loads(out.read_text()) == {
        "process": evil(marker),
        "command": ["echo", evil(marker), "30", "yes", "null", ""],
        "label": evil(marker),
        "lab": evil(marker),
    }


def test_a_playbook_that_hangs_is_a_lab_error_naming_it(tmp_path: Path) -> None:
    playbook = tmp_path / "hang.yaml"
    playbook.write_text(
        "- hosts: box\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.command: {argv: [sleep, '30']}\n"
    )
    t0 = time.monotonic()
    with pytest.raises(LabError, match=r"hang\.yaml.*(timed out|did not finish)"):
        hostactions.run_playbook(
            local_inventory(tmp_path),
            playbook,
            "box",
            {},
            tmp_path / "ansible",
            f"unit-{os.getpid()}",
            timeout=3,
        )
    assert time.monotonic() - t0 < 25
