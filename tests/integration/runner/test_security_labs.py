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
from runner.spec.inventory_load import load_inventory


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


ROOT = Path(__file__).resolve().parents[3]


class SilentWatchServer:
    """An API server on 127.0.0.1 that lists one pod of the lab, and accepts every watch and
    never answers it (a hung API server, or a connection that dropped without a reset)."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.watches = 0
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if "watch=true" in self.path:
                    outer.watches += 1
                    outer.release.wait(60)
                    return
                body = json.dumps(
                    {
                        "kind": "PodList",
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": "5"},
                        "items": [
                            {
                                "metadata": {
                                    "name": "serving-1",
                                    "namespace": "gameday-lab",
                                    "uid": "u1",
                                    "resourceVersion": "5",
                                }
                            }
                        ],
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def silent_kube(tmp_path: Path) -> Any:
    from runner.labs.kubernetes.driver import KubernetesLab

    srv = SilentWatchServer()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": srv.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "silent", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "silent",
            }
        )
    )
    text = (ROOT / "inventories" / "kube-testserver.yaml").read_text()
    for old, new in {
        "kubeconfig: ../build/kubeapi/kubeconfig": f"kubeconfig: {kubeconfig}",
        "context: gameday-testserver": "context: silent\n        request_timeout_s: 1",
    }.items():
        assert old in text
        text = text.replace(old, new)
    inv = tmp_path / "inventory.yaml"
    inv.write_text(text)
    lab = KubernetesLab(load_inventory(inv))
    yield srv, lab
    lab.pods.stop.set()
    srv.close()


def test_a_watch_that_never_answers_ends_in_a_lab_error(silent_kube: Any) -> None:
    srv, lab = silent_kube
    t0 = time.monotonic()
    with pytest.raises(LabError, match="still there after 2 s"):
        lab._wait_pods_gone("gameday.io/lab=kube-testserver", 2)
    assert srv.watches == 1
    assert time.monotonic() - t0 < 15  # the watch's read timeout: 2 s + request_timeout_s


def test_the_pod_watch_is_reopened_when_the_server_stops_answering(silent_kube: Any) -> None:
    import threading

    srv, lab = silent_kube
    threading.Thread(target=lab.pods.loop, args=("5", 1), daemon=True).start()
    deadline = time.monotonic() + 15
    while srv.watches < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert srv.watches >= 2  # the silent watch timed out and was opened again


def test_an_api_call_that_never_answers_is_a_lab_error(silent_kube: Any) -> None:
    _srv, lab = silent_kube
    t0 = time.monotonic()
    with pytest.raises(LabError, match="not reachable"):
        lab.kube.call("watch pods", lab.kube.core.list_namespaced_pod, "gameday-lab", watch=True)
    assert time.monotonic() - t0 < 10
