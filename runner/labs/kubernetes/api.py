"""The Kubernetes API as the lab uses it, on the official `kubernetes` client: the client
from the inventory's kubeconfig and context, one call at a time with the inventory's request
timeout, failures mapped to LabError naming the call and the server."""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from urllib3.util.retry import Retry

from runner.errors import InventoryError, LabError
from runner.labs.kubernetes import manifests as mf
from runner.spec.inventory import Inventory, KubernetesSpec, Node

T = TypeVar("T")
# attempts at a write that meets 409s, each on a new read, and the pause between them:
# client-go's retry.DefaultRetry (5 steps, 10 ms, jitter 0.1); during a rollout the controller
# writes status a few times a second at most
CONFLICT_RETRIES = 5
CONFLICT_PAUSE_S = 0.01


def conflict_pause() -> None:
    time.sleep(CONFLICT_PAUSE_S * (1 + 0.1 * random.random()))


class Conflict(LabError):
    """409: the object's resourceVersion moved on since it was read (a write from someone else,
    or the controller's own status update), or it already exists."""


@dataclass(frozen=True)
class Calls:
    kind: str
    read: Callable[..., Any]
    create: Callable[..., Any]
    replace: Callable[..., Any]


class KubeApi:
    """The lab's API client, its namespace (`ns`) and the calls the driver makes."""

    def __init__(self, inventory: Inventory, spec: KubernetesSpec) -> None:
        self.inventory = inventory
        self.spec = spec
        self.ns = spec.namespace
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from kubernetes import config
            from kubernetes.config.config_exception import ConfigException

            cfg_file = None
            if self.spec.kubeconfig:
                cfg_file = str((self.inventory.path.parent / self.spec.kubeconfig).resolve())
                if not Path(cfg_file).exists():
                    raise InventoryError(
                        f"kubeconfig {cfg_file} does not exist",
                        file=self.inventory.path,
                        field="all.vars.gameday_lab.kubernetes.kubeconfig",
                        hint="point it at your cluster's kubeconfig (aws eks update-kubeconfig "
                        "writes one), or leave it out to use $KUBECONFIG / ~/.kube/config",
                    )
            from kubernetes import client

            try:
                cfg = client.Configuration()
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=cfg_file,
                    context=self.spec.context,
                    client_configuration=cfg,
                    persist_config=False,
                )
                # urllib3's default of three retries, but none for a read that timed out:
                # three more tries would make every timeout four times as long
                cfg.retries = Retry(total=3, read=0)
                self._client = client.ApiClient(cfg)
            except (ConfigException, OSError, TypeError) as exc:
                raise InventoryError(
                    f"cannot load the kubeconfig: {exc}",
                    file=self.inventory.path,
                    field="all.vars.gameday_lab.kubernetes",
                    hint="check kubeconfig and context in the inventory",
                ) from None
        return self._client

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.client)

    @property
    def apps(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.client)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One API call, its failures mapped to LabError naming the call and the server."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.spec.request_timeout_s)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            error = Conflict if exc.status == 409 else LabError
            raise error(
                f"Kubernetes API: {what} failed: {exc.status} {exc.reason}: {_api_message(exc)}",
                hint=f"namespace {self.ns}; context {self.spec.context or '(current)'}",
            ) from None
        except HTTPError as exc:
            raise LabError(
                f"the Kubernetes API server is not reachable ({what}): {type(exc).__name__}",
                hint=f"is the cluster up? server {self.client.configuration.host}",
            ) from None

    def watch_timeout(self, server_s: float) -> tuple[float, float]:
        """(connect, read) timeouts of a watch the server ends after `server_s`: a server that
        stops answering (a dropped connection, a hung API server) ends it a little later."""
        return (self.spec.request_timeout_s, server_s + self.spec.request_timeout_s)

    def status_of(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
        """(HTTP status, object): 200 with the object, or the error status with None."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        kwargs.setdefault("_request_timeout", self.spec.request_timeout_s)
        try:
            return 200, fn(*args, **kwargs)
        except ApiException as exc:
            return int(exc.status or 0), None
        except HTTPError as exc:
            raise LabError(
                f"the Kubernetes API server is not reachable: {type(exc).__name__}",
                hint=f"is the cluster up? server {self.client.configuration.host}",
            ) from None

    def namespace(self) -> Any | None:
        status, ns = self.status_of(self.core.read_namespace, self.ns)
        if status == 404:
            return None
        if status != 200:
            self.call("read namespace", self.core.read_namespace, self.ns)
        return ns

    def wait_namespace_gone(self, timeout_s: float) -> None:
        """Until the namespace is gone: a deleted namespace stays, Terminating, while the
        namespace controller deletes what is in it, and nothing can be created in it."""
        deadline = time.monotonic() + timeout_s
        while self.namespace() is not None:
            if time.monotonic() > deadline:
                raise LabError(
                    f"namespace {self.ns} is still terminating after {timeout_s:g} s",
                    hint=f"kubectl get namespace {self.ns} -o yaml (its status says what is left)",
                )
            time.sleep(0.25)

    def calls(self, node: Node) -> Calls:
        """The API calls of the node's workload: a Deployment, or a StatefulSet (a group's rank,
        a server its peers address by name)."""
        a = self.apps
        if mf.is_stateful(self.inventory, node):
            return Calls(
                "statefulset",
                a.read_namespaced_stateful_set,
                a.create_namespaced_stateful_set,
                a.replace_namespaced_stateful_set,
            )
        return Calls(
            "deployment",
            a.read_namespaced_deployment,
            a.create_namespaced_deployment,
            a.replace_namespaced_deployment,
        )

    def delete(self, fn: Callable[..., Any], name: str, namespaced: bool = True) -> None:
        args = (name, self.ns) if namespaced else (name,)
        # the answer (the object, or a Status, by kind and server version) is not needed
        opts = {"propagation_policy": "Background", "_preload_content": False}
        status, _ = self.status_of(fn, *args, **opts)
        if status not in (200, 202, 404):
            self.call(f"delete {name}", fn, *args, **opts)


def _api_message(exc: Any) -> str:
    with contextlib.suppress(ValueError, TypeError):
        return str(json.loads(exc.body).get("message", ""))[:300]
    return str(exc.body or "")[:300]
