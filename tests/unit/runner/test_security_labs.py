"""Hostile input that reaches the labs' tools: Ansible never renders a value gameday passes it,
destructive calls check ownership first, the Kubernetes lab needs an explicit kube context, and
every call into Ansible, Docker or the Kubernetes API that can block has a timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.errors import InventoryError, LabError, ScenarioError
from runner.inventory import load_inventory
from runner.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "name", ["{{ lookup('pipe', 'touch /tmp/x') }}", "../../etc/x", "a/b", "Omniparser", ""]
)
def test_a_process_name_to_stop_is_a_plain_name(tmp_path: Path, name: str) -> None:
    text = (ROOT / "scenarios" / "stray-gpu-process.yaml").read_text()
    old = "{kind: stop_process, node: node1, name: omniparser}"
    assert old in text
    p = tmp_path / "s.yaml"
    p.write_text(
        text.replace(old, "{kind: stop_process, node: node1, name: " + json.dumps(name) + "}")
    )
    with pytest.raises(ScenarioError) as exc:
        load_scenario(p)
    assert exc.value.exit_code == 2 and exc.value.line is not None
    assert exc.value.field is not None and exc.value.field.endswith("name")


KUBE_INVENTORIES = [
    p for p in sorted((ROOT / "inventories").glob("*.yaml")) if "kind: kubernetes" in p.read_text()
]


def test_every_kubernetes_inventory_names_its_context() -> None:
    assert len(KUBE_INVENTORIES) >= 3
    for p in KUBE_INVENTORIES:
        spec = load_inventory(p).lab.kubernetes
        assert spec is not None and spec.context


@pytest.mark.parametrize("source", KUBE_INVENTORIES, ids=lambda p: p.stem)
def test_a_kubernetes_inventory_without_a_context_is_refused(tmp_path: Path, source: Path) -> None:
    lines = source.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if not ln.strip().startswith("context:")]
    assert len(kept) == len(lines) - 1
    p = tmp_path / source.name
    p.write_text("".join(kept))
    with pytest.raises(InventoryError) as exc:
        load_inventory(p)
    err = exc.value
    assert err.exit_code == 2 and err.file == str(p)
    assert err.field == "all.vars.gameday_lab.kubernetes.context"
    assert err.line == 1 + next(i for i, ln in enumerate(kept) if ln.strip() == "kubernetes:")
    assert err.hint is not None and "context" in err.hint


def test_a_kubernetes_lab_without_a_kubernetes_section_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "inv.yaml"
    p.write_text(
        "all:\n  vars:\n    gameday_lab: {name: k, kind: kubernetes}\n"
        "  hosts:\n    serving: {gameday_role: serving, gameday_address: 0.0.0.0,\n"
        "              gameday_engine_args: [m]}\n"
    )
    with pytest.raises(InventoryError, match=r"inv\.yaml:3 \[all\.vars\.gameday_lab\.kubernetes"):
        load_inventory(p)


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
