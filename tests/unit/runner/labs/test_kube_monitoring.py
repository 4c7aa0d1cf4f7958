"""The Kubernetes lab's Prometheus: its manifests (valid for a real cluster, the test server's
variant with an API server and a token), its scrape job, and where the runner finds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runner.errors import LabError
from runner.labs.base import Capability
from runner.labs.kubernetes import lab_objects
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes import monitoring as km
from runner.labs.kubernetes.driver import KubernetesLab
from runner.spec.inventory_load import load_inventory

ROOT = Path(__file__).resolve().parents[4]
TESTSERVER = ROOT / "inventories" / "kube-testserver.yaml"
K8S_VERSION = kubernetes_validate.utils.latest_version()


def variant(tmp_path: Path, old: str, new: str) -> Path:
    text = TESTSERVER.read_text()
    assert old in text
    out = tmp_path / "inventory.yaml"
    out.write_text(text.replace(old, new))
    return out


def test_the_test_servers_manifests_in_order_all_valid() -> None:
    inv = load_inventory(TESTSERVER)
    api = km.ApiServer(url="http://127.0.0.1:16443", token="s3cret")
    docs = km.manifests(inv, api)
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ServiceAccount", "gameday-prometheus"),
        ("Role", "gameday-prometheus"),
        ("RoleBinding", "gameday-prometheus"),
        ("Secret", "gameday-prometheus-api"),
        ("ConfigMap", "gameday-prometheus"),
        ("Secret", "gameday-alertmanager-receiver"),
        ("ConfigMap", "gameday-alertmanager"),
        ("Service", "gameday-alertmanager"),
        ("Deployment", "gameday-alertmanager"),
        ("Deployment", "gameday-prometheus"),
    ]
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        assert d["metadata"]["namespace"] == "gameday-lab"
        assert d["metadata"]["labels"] == {
            "gameday.io/lab": "kube-testserver",
            "app.kubernetes.io/managed-by": "gameday",
            "app.kubernetes.io/name": d["metadata"]["name"]
            .removesuffix("-api")
            .removesuffix("-receiver"),
        }
    assert docs[3]["stringData"] == {"token": "s3cret"}
    sd = yaml.safe_load(docs[4]["data"]["prometheus.yml"])["scrape_configs"][0]
    assert sd["kubernetes_sd_configs"][0]["api_server"] == "http://127.0.0.1:16443"
    # printed (`gameday lab manifests`): the token masked and the server a placeholder, between
    # the Services and the engines
    printed = lab_objects.all_manifests(inv)
    kinds = [d["kind"] for d in printed]
    assert kinds == [
        "Namespace",
        "Service",
        "Service",  # the prefill/decode group's headless Service
        "Service",  # the tensor-parallel group's
        *[d["kind"] for d in docs],
        "Deployment",
        *["StatefulSet"] * 7,  # four ranks; prefill, decode and proxy
    ]
    assert printed[7]["stringData"] == {"token": "<redacted>"}


def test_the_role_lets_prometheus_watch_pods_only() -> None:
    inv = load_inventory(TESTSERVER)
    assert km.role(inv)["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert km.role_binding(inv)["subjects"] == [
        {"kind": "ServiceAccount", "name": "gameday-prometheus", "namespace": "gameday-lab"}
    ]


def test_the_deployment_runs_prometheus_on_its_config_volume() -> None:
    inv = load_inventory(TESTSERVER)
    d = km.deployment(inv, inv.lab.monitoring)  # type: ignore[arg-type]
    pod = d["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == "prom/prometheus:v2.53.1"
    assert c["command"] == ["prometheus"]
    assert c["args"] == [
        "--config.file=/etc/prometheus/prometheus.yml",
        "--storage.tsdb.path=/prometheus",
        "--web.enable-lifecycle",
        "--web.listen-address=0.0.0.0:9090",
        "--rules.alert.resend-delay=600ms",
    ]
    assert c["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "web"}
    assert pod["serviceAccountName"] == "gameday-prometheus"
    assert pod["volumes"] == [
        {
            "name": "config",
            "projected": {
                "sources": [
                    {"configMap": {"name": "gameday-prometheus"}},
                    {
                        "secret": {
                            "name": "gameday-prometheus-api",
                            "items": [{"key": "token", "path": "token"}],
                        }
                    },
                ]
            },
        },
        {"name": "data", "emptyDir": {}},
    ]
    # the pod template carries no node label: the driver's pod watch ignores it
    assert mf.NODE_LABEL not in d["spec"]["template"]["metadata"]["labels"]


def test_on_a_real_cluster_no_api_secret_and_in_cluster_discovery() -> None:
    inv = load_inventory(ROOT / "inventories" / "eks.yaml")
    docs = km.manifests(inv)
    assert [d["kind"] for d in docs] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",  # Alertmanager's receiver token, not an API server's
        "ConfigMap",
        "Service",
        "Deployment",
        "Deployment",
    ]
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    pod = docs[-1]["spec"]["template"]["spec"]
    assert pod["volumes"][0]["projected"]["sources"] == [
        {"configMap": {"name": "gameday-prometheus"}}
    ]
    # tolerates the GPU taint, selects no node: it runs on a GPU-only cluster too
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    assert "nodeSelector" not in pod
    config = yaml.safe_load(docs[3]["data"]["prometheus.yml"])
    assert config["scrape_configs"][0]["kubernetes_sd_configs"] == [
        {
            "role": "pod",
            "namespaces": {"names": ["vllm-gameday"]},
            "selectors": [{"role": "pod", "label": "gameday.io/lab=eks-workshop"}],
        }
    ]


def test_the_scrape_job_keeps_the_serving_and_head_pods_on_the_engine_port() -> None:
    inv = load_inventory(TESTSERVER)
    cm = km.config_map(inv, inv.lab.monitoring)  # type: ignore[arg-type]
    config: dict[str, Any] = yaml.safe_load(cm["data"]["prometheus.yml"])
    assert config["global"] == {
        "scrape_interval": "150ms",
        "evaluation_interval": "150ms",
        "scrape_timeout": "150ms",
        "external_labels": {"gameday_lab": inv.lab.name},  # its alerts say whose they are
    }
    assert config["rule_files"] == ["rules.yml"]
    assert config["scrape_configs"] == [
        {
            "job_name": "vllm",
            "kubernetes_sd_configs": [
                {
                    "api_server": "<the kubeconfig's server>",
                    "authorization": {"type": "Bearer", "credentials_file": "token"},
                    "role": "pod",
                    "namespaces": {"names": ["gameday-lab"]},
                    "selectors": [{"role": "pod", "label": "gameday.io/lab=kube-testserver"}],
                }
            ],
            "relabel_configs": [
                {
                    "source_labels": ["__meta_kubernetes_pod_container_name"],
                    "regex": "vllm",
                    "action": "keep",
                },
                {
                    "source_labels": [
                        "__meta_kubernetes_pod_label_gameday_io_node",
                        "__meta_kubernetes_pod_container_port_number",
                    ],
                    "separator": ";",
                    # the server, the group's head and the two disaggregated engines (their
                    # proxy is no engine)
                    "regex": "serving;8000|node1;8000|prefill;8000|decode;8000",
                    "action": "keep",
                },
                {
                    "source_labels": ["__meta_kubernetes_pod_label_gameday_io_node"],
                    "target_label": "node",
                },
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            ],
        }
    ]
    rules = yaml.safe_load(cm["data"]["rules.yml"])["groups"][0]["rules"]
    serving_down = next(r for r in rules if r["alert"] == "ServingDown")
    assert serving_down["expr"] == 'up{job="vllm"} < 1 or absent(up{job="vllm"})'
    assert serving_down["for"] == "3000ms"  # 300 s at x100


def test_engine_targets_are_pod_ips_and_wait_while_one_has_none() -> None:
    inv = load_inventory(TESTSERVER)
    ips: dict[str, str | None] = {
        "serving": "127.0.90.7",
        "node1": "127.0.91.3",
        "prefill": "127.0.91.6",
        "decode": "127.0.91.7",
        "proxy": "127.0.91.8",  # no engine: no target
    }
    pd = {"http://127.0.91.6:8000/metrics", "http://127.0.91.7:8000/metrics"}
    assert km.engine_targets(inv, ips) == {
        "http://127.0.90.7:8000/metrics",
        "http://127.0.91.3:8000/metrics",
        *pd,
    }
    assert km.engine_targets(inv, ips | {"node1": None}) == {
        "http://127.0.90.7:8000/metrics",
        "node1: no pod IP",
        *pd,
    }


def test_wait_scraped_names_a_prometheus_pod_without_an_ip() -> None:
    with pytest.raises(LabError) as err:
        km.wait_scraped(lambda: None, set, 0, hint="h")
    assert err.value.message == "the lab's Prometheus pod had no IP within 0 s"


def test_the_lab_has_monitoring_exactly_when_the_inventory_does(tmp_path: Path) -> None:
    lab = KubernetesLab(load_inventory(TESTSERVER))
    assert Capability.MONITORING in lab.capabilities
    assert Capability.SERVICE_LINKS in lab.capabilities
    text = TESTSERVER.read_text()
    bare = tmp_path / "bare.yaml"
    cut = text.index("      # Prometheus as a"), text.index("  children:")
    bare.write_text(text[: cut[0]] + text[cut[1] :])
    plain = KubernetesLab(load_inventory(bare))
    assert plain.capabilities == frozenset(
        {
            Capability.SERVICE_LINKS,
            Capability.SIGNALS,
            Capability.GPU_PROCESSES,
            Capability.PROCESSES,
        }
    )
    assert plain.prometheus_url() is None
    assert km.manifests(plain.inventory) == []


def test_a_port_forward_is_where_the_runner_reaches_prometheus(tmp_path: Path) -> None:
    inv = variant(
        tmp_path,
        "        api_server: kubeconfig\n",
        "        api_server: kubeconfig\n        prometheus_url: http://127.0.0.1:19090\n",
    )
    assert KubernetesLab(load_inventory(inv)).prometheus_url() == "http://127.0.0.1:19090"


def test_a_named_api_server_is_printed_as_named(tmp_path: Path) -> None:
    inv = load_inventory(
        variant(tmp_path, "api_server: kubeconfig", "api_server: https://10.0.0.1:6443")
    )
    cm = km.config_map(inv, inv.lab.monitoring)  # type: ignore[arg-type]
    sd = yaml.safe_load(cm["data"]["prometheus.yml"])["scrape_configs"][0]
    assert sd["kubernetes_sd_configs"][0]["api_server"] == "https://10.0.0.1:6443"


def test_prometheus_sends_its_alerts_to_the_alertmanager_service() -> None:
    inv = load_inventory(ROOT / "inventories" / "eks.yaml")
    docs = {(d["kind"], d["metadata"]["name"]): d for d in km.manifests(inv)}
    prom_cm = docs[("ConfigMap", "gameday-prometheus")]
    config = yaml.safe_load(prom_cm["data"]["prometheus.yml"])
    assert config["alerting"] == {
        "alertmanagers": [
            {"static_configs": [{"targets": ["gameday-alertmanager.vllm-gameday.svc:9093"]}]}
        ]
    }
    svc = docs[("Service", "gameday-alertmanager")]
    dep = docs[("Deployment", "gameday-alertmanager")]
    assert svc["spec"]["selector"] == {
        "gameday.io/lab": "eks-workshop",
        "app.kubernetes.io/name": "gameday-alertmanager",
    }
    template = dep["spec"]["template"]
    assert svc["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert svc["spec"]["ports"] == [
        {"name": "web", "port": 9093, "targetPort": "web", "protocol": "TCP"}
    ]
    c = template["spec"]["containers"][0]
    assert (c["image"], c["command"]) == ("prom/alertmanager:v0.27.0", ["alertmanager"])
    assert c["args"] == [
        "--config.file=/etc/alertmanager/alertmanager.yml",
        "--storage.path=/alertmanager",
        "--web.listen-address=0.0.0.0:9093",
        "--cluster.listen-address=",
    ]
    assert template["spec"]["volumes"] == [
        {
            "name": "config",
            "projected": {
                "sources": [
                    {"configMap": {"name": "gameday-alertmanager"}},
                    {
                        "secret": {
                            "name": "gameday-alertmanager-receiver",
                            "items": [{"key": "token", "path": "receiver-token"}],
                        }
                    },
                ]
            },
        },
        {"name": "data", "emptyDir": {}},
    ]
    assert mf.NODE_LABEL not in template["metadata"]["labels"]
    am = yaml.safe_load(docs[("ConfigMap", "gameday-alertmanager")]["data"]["alertmanager.yml"])
    assert am["route"]["receiver"] == "gameday-runner"
    assert am["receivers"][0]["webhook_configs"][0]["send_resolved"] is True


def test_the_test_server_runs_debians_alertmanager() -> None:
    inv = load_inventory(TESTSERVER)
    dep = next(
        d
        for d in km.manifests(inv)
        if (d["kind"], d["metadata"]["name"]) == ("Deployment", "gameday-alertmanager")
    )
    assert dep["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "prometheus-alertmanager"
    ]


def test_alertmanager_presents_the_labs_receiver_token_from_a_secret_never_the_configmap() -> None:
    """The webhook carries the lab's receiver token (a forged alert without it is refused), read
    from a mounted Secret: the ConfigMap, which `lab manifests` prints, holds no secret."""
    from runner.labs.kubernetes import alertmanager as kam

    inv = load_inventory(TESTSERVER)
    docs = {(d["kind"], d["metadata"]["name"]): d for d in km.manifests(inv, None, "tok-123")}
    secret = docs[("Secret", kam.TOKEN_SECRET)]
    assert secret["stringData"] == {"token": "tok-123"}
    config = docs[("ConfigMap", kam.NAME)]["data"]["alertmanager.yml"]
    assert "tok-123" not in config
    webhook = yaml.safe_load(config)["receivers"][0]["webhook_configs"][0]
    assert webhook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": "receiver-token",  # relative: beside alertmanager.yml
    }
    pod = docs[("Deployment", kam.NAME)]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["config"] == kam.CONFIG_DIR
    assert {
        "secret": {"name": kam.TOKEN_SECRET, "items": [{"key": "token", "path": kam.TOKEN_FILE}]}
    } in volumes["config"]["projected"]["sources"]
    # printed: masked
    printed = {(d["kind"], d["metadata"]["name"]): d for d in km.manifests(inv)}
    assert printed[("Secret", kam.TOKEN_SECRET)]["stringData"]["token"] != "tok-123"
