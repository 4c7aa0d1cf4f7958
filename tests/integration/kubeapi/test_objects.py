"""ConfigMaps, Secrets, ServiceAccounts, Roles and RoleBindings on the stand-in, through the
official client: create, get, list by label, replace, delete, their errors, and namespace
deletion taking them along."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import wait_for

LABELS = {"app.kubernetes.io/managed-by": "gameday"}


@pytest.fixture
def lab(core: client.CoreV1Api) -> client.CoreV1Api:
    core.create_namespace({"metadata": {"name": "lab"}})
    return core


def calls(core: client.CoreV1Api, kind: str) -> dict[str, Callable[..., Any]]:
    if kind in ("role", "role_binding"):
        api: Any = client.RbacAuthorizationV1Api(core.api_client)
    else:
        api = core
    return {
        verb: getattr(api, f"{verb}_namespaced_{kind}")
        for verb in ("create", "read", "list", "replace", "delete")
    }


BODIES = {
    "config_map": {"data": {"a": "1"}},
    "secret": {"stringData": {"token": "s3cret"}},
    "service_account": {},
    "role": {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]},
    "role_binding": {
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "prom", "namespace": "lab"}],
    },
}
PLURAL = {
    "config_map": "configmaps",
    "secret": "secrets",
    "service_account": "serviceaccounts",
    "role": "roles.rbac.authorization.k8s.io",
    "role_binding": "rolebindings.rbac.authorization.k8s.io",
}


@pytest.mark.parametrize("kind", list(BODIES))
def test_crud(lab: client.CoreV1Api, kind: str) -> None:
    f = calls(lab, kind)
    body = {"metadata": {"name": "x", "labels": LABELS}, **BODIES[kind]}
    made = f["create"]("lab", body)
    assert made.metadata.uid and made.metadata.creation_timestamp
    with pytest.raises(ApiException) as dup:
        f["create"]("lab", body)
    assert (dup.value.status, dup.value.reason) == (409, "Conflict")
    assert json.loads(dup.value.body)["message"] == f'{PLURAL[kind]} "x" already exists'
    f["create"]("lab", {"metadata": {"name": "other"}, **BODIES[kind]})
    listed = f["list"]("lab", label_selector="app.kubernetes.io/managed-by=gameday")
    assert [o.metadata.name for o in listed.items] == ["x"]
    got = f["read"]("x", "lab")
    assert got.metadata.resource_version == made.metadata.resource_version
    got.metadata.labels = {"changed": "yes"}
    new = f["replace"]("x", "lab", got)
    assert int(new.metadata.resource_version) > int(made.metadata.resource_version)
    assert (new.metadata.uid, new.metadata.labels) == (made.metadata.uid, {"changed": "yes"})
    with pytest.raises(ApiException) as stale:
        f["replace"]("x", "lab", got)  # got's resourceVersion is the old one
    assert stale.value.status == 409
    f["delete"]("x", "lab")
    with pytest.raises(ApiException) as gone:
        f["read"]("x", "lab")
    assert gone.value.status == 404
    assert json.loads(gone.value.body)["message"] == f'{PLURAL[kind]} "x" not found'


def test_secret_string_data_is_stored_as_data(lab: client.CoreV1Api) -> None:
    lab.create_namespaced_secret(
        "lab", {"metadata": {"name": "s"}, "stringData": {"token": "s3cret"}}
    )
    s = lab.read_namespaced_secret("s", "lab")
    assert (s.data, s.string_data, s.type) == ({"token": "czNjcmV0"}, None, "Opaque")


def test_namespace_deletion_deletes_them(lab: client.CoreV1Api) -> None:
    for kind, body in BODIES.items():
        calls(lab, kind)["create"]("lab", {"metadata": {"name": "x"}, **body})
    lab.delete_namespace("lab")

    def ns_gone() -> bool:
        try:
            lab.read_namespace("lab")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(ns_gone)
    for kind in BODIES:
        assert calls(lab, kind)["list"]("lab").items == []
