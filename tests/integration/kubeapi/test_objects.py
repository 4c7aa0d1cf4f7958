"""ConfigMaps, Secrets, ServiceAccounts, Roles and RoleBindings through the official client:
create, get, list by label, replace, delete, their errors, and namespace deletion taking them
along; on the stand-in and on the real kube-apiserver (v1.20, tests/kubereal), the same tests,
where they differ said in the test."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.integration.kubeapi.conftest import wait_for
from tests.kubeapi.server import Server

LABELS = {"app.kubernetes.io/managed-by": "gameday"}
_names = itertools.count()


@dataclass(frozen=True)
class Lab:
    core: client.CoreV1Api
    ns: str
    # v1.20's token controller (kube-controller-manager) gives every new ServiceAccount a token
    # Secret and so writes it a second time; clusters from 1.24 (LegacyServiceAccountToken-
    # NoAutoGeneration) and the stand-in do not
    sa_token_secrets: bool


@pytest.fixture(params=["stand-in", "kube-apiserver"])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lab]:
    if request.param == "stand-in":
        srv = Server(0, tmp_path / "kube" / "kubeconfig", time_scale=100).start()
        try:
            api = config.new_client_from_config(str(tmp_path / "kube" / "kubeconfig"))
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "lab"}})
            yield Lab(core, "lab", sa_token_secrets=False)
        finally:
            srv.stop()
        return
    # one control plane for the session: a namespace of its own per test, as deleting one on a
    # real cluster finishes in the background
    cp = request.getfixturevalue("real_control_plane")
    core = client.CoreV1Api(config.new_client_from_config(str(cp.kubeconfig)))
    ns = f"lab-{next(_names)}"
    core.create_namespace({"metadata": {"name": ns}})
    yield Lab(core, ns, sa_token_secrets=True)


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
def test_crud(lab: Lab, kind: str) -> None:
    f, ns = calls(lab.core, kind), lab.ns
    body = {"metadata": {"name": "x", "labels": LABELS}, **BODIES[kind]}
    made = f["create"](ns, body)
    assert made.metadata.uid and made.metadata.creation_timestamp
    with pytest.raises(ApiException) as dup:
        f["create"](ns, body)
    assert (dup.value.status, dup.value.reason) == (409, "Conflict")
    assert json.loads(dup.value.body)["message"] == f'{PLURAL[kind]} "x" already exists'
    f["create"](ns, {"metadata": {"name": "other"}, **BODIES[kind]})
    listed = f["list"](ns, label_selector="app.kubernetes.io/managed-by=gameday")
    assert [o.metadata.name for o in listed.items] == ["x"]
    if kind == "service_account" and lab.sa_token_secrets:
        # the token controller's write: a token Secret named after the account, and a new
        # resourceVersion, which is the one a client reading it next holds
        with_token = wait_for(lambda: (o := f["read"]("x", ns)).secrets and o)
        assert next(s.name for s in with_token.secrets).startswith("x-token-")
        assert int(with_token.metadata.resource_version) > int(made.metadata.resource_version)
        made = with_token
    got = f["read"]("x", ns)
    assert got.metadata.resource_version == made.metadata.resource_version
    got.metadata.labels = {"changed": "yes"}
    new = f["replace"]("x", ns, got)
    assert int(new.metadata.resource_version) > int(made.metadata.resource_version)
    assert (new.metadata.uid, new.metadata.labels) == (made.metadata.uid, {"changed": "yes"})
    with pytest.raises(ApiException) as stale:
        f["replace"]("x", ns, got)  # got's resourceVersion is the old one
    assert stale.value.status == 409
    f["delete"]("x", ns)
    with pytest.raises(ApiException) as gone:
        f["read"]("x", ns)
    assert gone.value.status == 404
    assert json.loads(gone.value.body)["message"] == f'{PLURAL[kind]} "x" not found'


def test_secret_string_data_is_stored_as_data(lab: Lab) -> None:
    lab.core.create_namespaced_secret(
        lab.ns, {"metadata": {"name": "s"}, "stringData": {"token": "s3cret"}}
    )
    s = lab.core.read_namespaced_secret("s", lab.ns)
    assert (s.data, s.string_data, s.type) == ({"token": "czNjcmV0"}, None, "Opaque")


def test_namespace_deletion_deletes_them(lab: Lab) -> None:
    for kind, body in BODIES.items():
        calls(lab.core, kind)["create"](lab.ns, {"metadata": {"name": "x"}, **body})
    lab.core.delete_namespace(lab.ns)

    def ns_gone() -> bool:
        try:
            lab.core.read_namespace(lab.ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(ns_gone)
    for kind in BODIES:
        assert calls(lab.core, kind)["list"](lab.ns).items == []
