"""Every manifest gameday ships or generates validates against Kubernetes 1.30 and the newest
schemas kubernetes-validate carries (strict: unknown fields rejected), the LeaderWorkerSet
included: the LWS object against LWS's own CRD schema, its pod templates as core
PodTemplates. Each check is shown to fail on a bad manifest."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from runner.labs.kubernetes import lab_objects, lws, stray
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import LabKind
from tests.support.cli import ROOT
from tests.unit.runner.test_lws import write

VERSIONS = ["1.30.0", kubernetes_validate.utils.latest_version()]


def check(doc: dict[str, Any], version: str) -> None:
    """Raises on a manifest the API server of `version` would refuse (strict field checks)."""
    if doc["kind"] == "LeaderWorkerSet":
        jsonschema.validate(doc, lws.crd_schema(strict=True))
        for tmpl in lws.pod_templates(doc):
            kubernetes_validate.validate(tmpl, version, strict=True)
        return
    kubernetes_validate.validate(doc, version, strict=True)


def generated(tmp_path: Path) -> list[dict[str, Any]]:
    invs = [
        load_inventory(p)
        for p in sorted((ROOT / "inventories").glob("*.yaml"))
        if load_inventory(p).lab.kind is LabKind.KUBERNETES
    ]
    assert {i.lab.name for i in invs} == {"eks-workshop", "kind", "kube-testserver"}
    (tmp_path / "sts").mkdir()
    invs.append(load_inventory(write(tmp_path, workload="leaderworkerset")))
    invs.append(load_inventory(write(tmp_path / "sts", workload="statefulsets")))
    docs = [doc for inv in invs for doc in lab_objects.all_manifests(inv)]
    # what scenarios apply beside the lab's own objects: a stray GPU pod on the target's node
    docs += [doc for inv in invs for doc in stray.scenario_manifests(inv)]
    return docs


def shipped() -> list[dict[str, Any]]:
    return [
        doc
        for f in sorted((ROOT / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(f.read_text())
        if doc
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_generated_and_shipped_manifest_validates(tmp_path: Path, version: str) -> None:
    docs = generated(tmp_path) + shipped()
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "CronJob",
        "Deployment",
        "LeaderWorkerSet",
        "Namespace",
        "Pod",
        "Role",
        "RoleBinding",
        "Secret",
        "Service",
        "ServiceAccount",
        "StatefulSet",
    ]
    for doc in docs:
        check(doc, version)
    # eks and kind (3 each, their Prometheus's 5 and Alertmanager's 4 with its receiver token's
    # Secret), the test server (its 8 nodes, the two groups' headless Services, its Prometheus's
    # 5, Alertmanager's 4 and the API token's Secret), the LWS lab, the StatefulSet lab, a stray
    # pod each, k8s/ (the eks lab's 3, Prometheus's 5, Alertmanager's 4; the lease CronJob's 7)
    assert len(docs) == 2 * (3 + 5 + 4) + (3 + 5 + 4 + 10) + 4 + 8 + 5 + (3 + 5 + 4) + 7


def test_the_lease_cronjob_runs_cleanup_expired_on_its_configmaps_adopting_inventory(
    tmp_path: Path,
) -> None:
    """k8s/adopted-lease-cronjob.yaml: its ConfigMap holds an inventory that loads as an adopted
    Deployment with a lease and the kubeconfig it names, mounted where the job's command reads
    it; the command is one the CLI takes; its rights reach that Deployment only."""
    from runner.cli.main import cleanup

    docs = {
        d["kind"]: d
        for d in yaml.safe_load_all((ROOT / "k8s" / "adopted-lease-cronjob.yaml").read_text())
        if d
    }
    for name, text in docs["ConfigMap"]["data"].items():
        (tmp_path / name).write_text(text)
    inv = load_inventory(tmp_path / "inventory.yaml")
    assert inv.lab.adopt is not None and inv.lab.adopt.workload == ("deployment", "team-vllm")
    assert inv.lab.kubernetes.kubeconfig == "kubeconfig"
    kubeconfig = yaml.safe_load((tmp_path / "kubeconfig").read_text())
    assert [c["name"] for c in kubeconfig["contexts"]] == [inv.lab.kubernetes.context]
    pod = docs["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    assert container["command"] == [
        "gameday",
        "cleanup",
        "--expired",
        "--lab",
        f"{mount['mountPath']}/inventory.yaml",
    ]
    ctx = cleanup.make_context("cleanup", container["command"][2:])  # the CLI takes it
    assert ctx.params["expired"] is True
    rules = docs["Role"]["rules"]
    assert rules == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["team-vllm"],
            "verbs": ["get", "update"],
        }
    ]
    assert pod["serviceAccountName"] == docs["RoleBinding"]["subjects"][0]["name"]


def lws_doc(tmp_path: Path) -> dict[str, Any]:
    return lws.leaderworkerset(load_inventory(write(tmp_path)), "tp-group")


def test_the_core_schema_check_can_fail(tmp_path: Path) -> None:
    doc = copy.deepcopy(
        next(
            d for d in shipped() if d["kind"] == "Deployment" and d["metadata"]["name"] == "serving"
        )
    )
    doc["spec"]["strategy"]["rollingUpdat"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        check(doc, VERSIONS[0])


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("spec", "leaderWorkerTemplate", "restartPolicy"), "RecreateGroup"),  # not in the enum
        (("spec", "startupPolicy"), "LeaderStarted"),
        (("spec", "leaderWorkerTemplate", "size"), "4"),  # a string
        (("spec", "leaderWorkerTemplate", "sizes"), 4),  # unknown field (strict)
        (("spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "label"), {}),
    ],
)
def test_the_crd_schema_check_can_fail(
    tmp_path: Path, where: tuple[str, ...], value: object
) -> None:
    doc = lws_doc(tmp_path)
    check(doc, VERSIONS[0])
    target = doc
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        check(doc, VERSIONS[0])


def test_a_missing_worker_template_fails_the_crd_check(tmp_path: Path) -> None:
    doc = lws_doc(tmp_path)
    del doc["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    with pytest.raises(jsonschema.ValidationError, match="'workerTemplate' is a required"):
        check(doc, VERSIONS[0])


@pytest.mark.parametrize("key", ["leaderTemplate", "workerTemplate"])
def test_the_pod_template_check_can_fail(tmp_path: Path, key: str) -> None:
    """The CRD schema stored here leaves the pod specs to the core schema: a bad container
    field passes the CRD check and fails the PodTemplate one."""
    doc = lws_doc(tmp_path)
    doc["spec"]["leaderWorkerTemplate"][key]["spec"]["containers"][0]["imagePullPolicy2"] = "x"
    jsonschema.validate(doc, lws.crd_schema(strict=True))
    with pytest.raises(kubernetes_validate.ValidationError):
        check(doc, VERSIONS[0])


def test_strict_is_what_rejects_unknown_fields(tmp_path: Path) -> None:
    doc = lws_doc(tmp_path)
    doc["spec"]["replica"] = 1
    jsonschema.validate(doc, lws.crd_schema(strict=False))
    with pytest.raises(jsonschema.ValidationError, match="'replica' was unexpected"):
        jsonschema.validate(doc, lws.crd_schema(strict=True))
