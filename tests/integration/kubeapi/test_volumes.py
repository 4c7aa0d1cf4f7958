"""Pod volumes on the stand-in: configMap, secret, emptyDir and projected volumes become files
in the pod's directory, mount paths in the command are rewritten to it, listen addresses bind
the pod IP."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.integration.kubeapi.conftest import wait_for
from tests.kubeapi.server import Server
from tests.kubeapi.volumes import rewrite, rewrite_listen

pytestmark = pytest.mark.kube_standin(
    "tests the stand-in's own kubelet features (test_kubelet.py has ours)"
)


@pytest.fixture
def lab(core: client.CoreV1Api) -> client.CoreV1Api:
    core.create_namespace({"metadata": {"name": "lab"}})
    core.create_namespaced_config_map(
        "lab",
        {"metadata": {"name": "conf"}, "data": {"prometheus.yml": "a: 1\n", "rules.yml": "r\n"}},
    )
    core.create_namespaced_secret(
        "lab", {"metadata": {"name": "tok"}, "stringData": {"token": "s3cret"}}
    )
    return core


def finished_log(core: client.CoreV1Api, name: str) -> str:
    wait_for(lambda: core.read_namespaced_pod(name, "lab").status.phase == "Succeeded")
    return str(core.read_namespaced_pod_log(name, "lab"))


def test_volumes_are_files_at_the_rewritten_mount_paths(
    server: Server, lab: client.CoreV1Api
) -> None:
    volumes: list[dict[str, Any]] = [
        {"name": "conf", "configMap": {"name": "conf", "defaultMode": 0o600}},
        {
            "name": "one",
            "configMap": {"name": "conf", "items": [{"key": "rules.yml", "path": "r/x.yml"}]},
        },
        {"name": "tok", "secret": {"secretName": "tok", "defaultMode": 0o400}},
        {"name": "scratch", "emptyDir": {}},
        {
            "name": "both",
            "projected": {
                "sources": [
                    {"configMap": {"name": "conf", "items": [{"key": "rules.yml", "path": "r"}]}},
                    {"secret": {"name": "tok"}},
                ]
            },
        },
    ]
    mounts = [
        {"name": "conf", "mountPath": "/etc/prometheus"},
        {"name": "one", "mountPath": "/etc/one"},
        {"name": "tok", "mountPath": "/var/run/secrets/tok"},
        {"name": "scratch", "mountPath": "/data"},
        {"name": "both", "mountPath": "/etc/both"},
    ]
    script = 'cat "$1" "$2" "$3" "$5/r" "$5/token"; ls "$4"; touch "$4/made"; stat -c %a "$1" "$3"'
    lab.create_namespaced_pod(
        "lab",
        {
            "metadata": {"name": "reader"},
            "spec": {
                "restartPolicy": "Never",
                "volumes": volumes,
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox",
                        "command": ["sh", "-c", script, "sh"],
                        "args": [
                            "/etc/prometheus/prometheus.yml",
                            "/etc/one/r/x.yml",
                            "/var/run/secrets/tok/token",
                            "/data",
                            "/etc/both",
                        ],
                        "volumeMounts": mounts,
                    }
                ],
            },
        },
    )
    uid = lab.read_namespaced_pod("reader", "lab").metadata.uid
    assert finished_log(lab, "reader") == "a: 1\nr\ns3cretr\ns3cret600\n400\n"
    made = server.cluster.state_dir / "pods" / uid / "volumes" / "scratch" / "made"
    assert made.exists()
    lab.delete_namespaced_pod("reader", "lab")
    wait_for(lambda: not made.exists())


def test_a_missing_config_map_holds_the_pod_with_failed_mount(lab: client.CoreV1Api) -> None:
    lab.create_namespaced_pod(
        "lab",
        {
            "metadata": {"name": "waits"},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "c", "configMap": {"name": "later"}}],
                "containers": [
                    {
                        "name": "app",
                        "image": "busybox",
                        "command": ["cat", "/cfg/k"],
                        "volumeMounts": [{"name": "c", "mountPath": "/cfg"}],
                    }
                ],
            },
        },
    )
    ev = wait_for(
        lambda: lab.list_namespaced_event("lab", field_selector="reason=FailedMount").items
    )
    assert ev[0].message == 'MountVolume.SetUp failed for volume "c" : configmap "later" not found'
    assert lab.read_namespaced_pod("waits", "lab").status.phase == "Pending"
    lab.create_namespaced_config_map("lab", {"metadata": {"name": "later"}, "data": {"k": "v"}})
    assert finished_log(lab, "waits") == "v\n"


def test_rewrites() -> None:
    m = {"/etc/prometheus": "/s/p/conf", "/etc/prometheus/rules": "/s/p/rules"}
    assert rewrite(
        [
            "--config.file=/etc/prometheus/prometheus.yml",
            "/etc/prometheus/rules/a.yml",
            "/etc/prometheus",
            "/etc/prometheus2/x",
            "--x=/etc/prometheusx",
        ],
        m,
    ) == [
        "--config.file=/s/p/conf/prometheus.yml",
        "/s/p/rules/a.yml",
        "/s/p/conf",
        "/etc/prometheus2/x",
        "--x=/etc/prometheusx",
    ]
    assert rewrite_listen(
        [
            "--web.listen-address=0.0.0.0:9090",
            "--web.listen-address=:9091",
            "--web.listen-address",
            ":9092",
            "--web.listen-address=127.0.0.1:9093",
        ],
        "127.0.90.7",
    ) == [
        "--web.listen-address=127.0.90.7:9090",
        "--web.listen-address=127.0.90.7:9091",
        "--web.listen-address",
        "127.0.90.7:9092",
        "--web.listen-address=127.0.0.1:9093",
    ]


def test_mode_bits_are_the_files(tmp_path: Path) -> None:
    from tests.kubeapi.volumes import materialise

    dirs = materialise(
        [
            {
                "name": "c",
                "configMap": {"name": "x", "items": [{"key": "k", "path": "p", "mode": 0o755}]},
            }
        ],
        tmp_path,
        lambda res, name: {"data": {"k": "v"}},
    )
    assert stat.S_IMODE((dirs["c"] / "p").stat().st_mode) == 0o755


def test_a_relative_kubeconfig_path_still_gives_containers_their_volumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m tests.kubeapi` by hand: the default kubeconfig is the relative
    build/kubeapi/kubeconfig, from the folder the server is started in."""
    monkeypatch.chdir(tmp_path)
    srv = Server(0, Path("build/kubeapi/kubeconfig"), time_scale=100).start()
    try:
        assert srv.cluster.state_dir == tmp_path / "build" / "kubeapi" / "state"
        core = client.CoreV1Api(config.new_client_from_config("build/kubeapi/kubeconfig"))
        core.create_namespace({"metadata": {"name": "lab"}})
        core.create_namespaced_config_map(
            "lab", {"metadata": {"name": "conf"}, "data": {"prometheus.yml": "a: 1\n"}}
        )
        core.create_namespaced_pod(
            "lab",
            {
                "metadata": {"name": "reader"},
                "spec": {
                    "restartPolicy": "Never",
                    "volumes": [{"name": "conf", "configMap": {"name": "conf"}}],
                    "containers": [
                        {
                            "name": "app",
                            "image": "busybox",
                            "command": ["cat", "/etc/prometheus/prometheus.yml"],
                            "volumeMounts": [{"name": "conf", "mountPath": "/etc/prometheus"}],
                        }
                    ],
                },
            },
        )
        assert finished_log(core, "reader") == "a: 1\n"
    finally:
        srv.stop()
