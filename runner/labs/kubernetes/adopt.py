"""A Deployment or StatefulSet the team already runs, adopted as a one-node lab
(`gameday_lab.adopt.deployment` / `.statefulset`, in `gameday_lab.kubernetes.namespace`).

No manifests: `lab up` applies nothing and `lab down` deletes nothing. The namespace must carry
the lab label `gameday.io/lab=<lab name>` (the mark gameday puts on the namespaces it creates):
without it, nothing is read beyond the namespace and the refusal says how to opt in.

The baseline is the live object's engine container (its args and env, raw) and the pod's
enableServiceLinks, saved in the lab's state directory at adoption. A changed config is written
to the live object (read, changed in the container, replaced with the resourceVersion that was
read: a concurrent write is a 409 on a real API server, never overwritten; the object is then
read again and the change made again on what it holds now, with its checks, as client-go's
retry.RetryOnConflict does: new args, literal env or enableServiceLinks the team gave the engine
container are refused there, while the controller's status updates, which move the
resourceVersion all through a rollout, and the team's edits elsewhere (its image, resources,
labels) are kept, the change written on top); the undo writes the saved spec back verbatim. Pods
are found by the workload's own selector.

Each configuration gameday writes is remembered in the saved record first, and a change away from
the baseline carries its fault lease on the object itself: the annotation `gameday.io/fault-lease`
on the workload's metadata (never on the pod template, so it rolls no pod) holds the deadline, the
change and the baseline to put back, so `gameday cleanup --expired` run by a CronJob in the
cluster, without this machine's state, can undo it (runner.labs.common.adoption says why).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from runner.errors import LabError, LabNotUp
from runner.fsutil import write_private
from runner.labs.base import Capability, Change, ChangeKind, NodeConfig
from runner.labs.common import adoption
from runner.labs.common import helpers as common
from runner.labs.kubernetes import manifests as mf
from runner.labs.kubernetes.api import CONFLICT_RETRIES, Conflict, conflict_pause
from runner.labs.kubernetes.driver import KubernetesLab
from runner.spec.inventory import Inventory

LEASE_ANNOTATION = "gameday.io/fault-lease"


class AdoptedKubernetesLab(KubernetesLab):
    label = "adopted kubernetes workload"

    @property
    def capabilities(self) -> frozenset[Capability]:  # type: ignore[override]
        """A team's own workload: its Services, nothing inside or beside its pods."""
        return frozenset({Capability.SERVICE_LINKS})

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        adopt = inventory.lab.adopt
        workload = adopt.workload if adopt is not None else None
        if adopt is None or workload is None:
            raise LabError(f"{inventory.path}: gameday_lab.adopt names no workload")
        self.workload_kind, self.workload = workload
        self.container_name = adopt.container
        self.node = inventory.nodes[0].name
        self.baseline_path = self.state_dir / "adopted.json"
        self.pods.adopted_node = self.node
        self.lease_s = adopt.lease_s
        self._lease_lock = threading.RLock()  # the runner's renewals beside its writes

    # ---- the namespace's opt-in and the workload ----------------------------------------------

    def guard(self, ns: Any) -> None:
        """LabError (exit 3) for a namespace without the lab label: an adopted workload's
        namespace is opted in by its owners, never by an override."""
        if self._guarded:
            return
        lab = self.inventory.lab.name
        got = (ns.metadata.labels or {}).get(mf.LAB_LABEL)
        if got != lab:
            raise LabError(
                f"namespace {self.ns!r} has not opted in to faults from lab {lab!r} (label "
                f"{mf.LAB_LABEL}={lab} " + (f"is {got!r}" if got else "is missing") + "): "
                f"gameday does not adopt {self.workload_kind} {self.workload} there; "
                "nothing was touched",
                hint=f"kubectl label namespace {self.ns} {mf.LAB_LABEL}={lab}",
            )
        self._guarded = True

    def _api(self) -> tuple[Any, Any]:
        """(read, replace) of the adopted workload's kind."""
        a = self.kube.apps
        if self.workload_kind == "statefulset":
            return a.read_namespaced_stateful_set, a.replace_namespaced_stateful_set
        return a.read_namespaced_deployment, a.replace_namespaced_deployment

    def _read(self) -> dict[str, Any]:
        """The live object, as the API server's JSON."""
        read, _ = self._api()
        obj = self.kube.call(
            f"read {self.workload_kind} {self.workload}", read, self.workload, self.ns
        )
        return dict(self.kube.client.sanitize_for_serialization(obj))

    def _container(self, obj: dict[str, Any]) -> dict[str, Any]:
        containers = obj["spec"]["template"]["spec"]["containers"]
        if self.container_name is None:
            return dict(containers[0])
        for c in containers:
            if c["name"] == self.container_name:
                return dict(c)
        raise LabError(
            f"{self.workload_kind} {self.workload} has no container {self.container_name!r} "
            f"(it has {', '.join(c['name'] for c in containers)})",
            hint="set gameday_lab.adopt.container to the engine's container",
        )

    # ---- lifecycle: adopt and let go ----------------------------------------------------------

    def is_up(self) -> bool:
        ns = self.kube.namespace()
        if ns is None or not self.baseline_path.exists():
            return False
        self.guard(ns)
        read, _ = self._api()
        return self.kube.status_of(read, self.workload, self.ns)[0] == 200

    def up(self) -> None:
        """Adopt the workload: check its namespace's opt-in, save its baseline, watch its pods."""
        ns = self.kube.namespace()
        if ns is None:
            raise LabError(
                f"namespace {self.ns!r} does not exist: gameday adopts a running workload and "
                "creates nothing",
                hint=f"check gameday_lab.kubernetes.namespace in {self.inventory.path}",
            )
        self.guard(ns)
        read, _ = self._api()
        if self.kube.status_of(read, self.workload, self.ns)[0] == 404:
            raise LabError(
                f"no {self.workload_kind} {self.workload!r} in namespace {self.ns}",
                hint=f"kubectl -n {self.ns} get {self.workload_kind}s",
            )
        if not self.baseline_path.exists():  # after a crash the saved one is the baseline
            self._save(self._read())
        elif self.redeployed():
            raise adoption.redeployed_error(
                f"{self.workload_kind} {self.workload}",
                [f"container {self._saved()['container']}"],
                str(self.inventory.path),
            )
        self._sync()

    def _save(self, obj: dict[str, Any]) -> None:
        """The live object's engine container and enableServiceLinks as the baseline."""
        c = self._container(obj)
        pod = obj["spec"]["template"]["spec"]
        saved = {
            "container": c["name"],
            "selector": obj["spec"]["selector"].get("matchLabels") or {},
            "args": c.get("args"),
            "env": c.get("env"),
            "enableServiceLinks": pod.get("enableServiceLinks"),
            "config": self._config_of(obj).model_dump(mode="json"),
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.baseline_path, json.dumps(saved, indent=1))

    def readopt(self) -> None:
        """What the workload runs now becomes the baseline; an old lease on it is dropped."""
        ns = self.kube.namespace()
        if ns is None:
            raise LabError(f"namespace {self.ns!r} does not exist: there is nothing to adopt")
        self.guard(ns)
        with self._lease_lock:

            def adopted(obj: dict[str, Any]) -> dict[str, Any] | None:
                self._save(obj)
                return _without_lease(obj) if self._lease_of(obj) is not None else None

            self._update(adopted)

    def redeployed(self) -> list[str]:
        if not self.baseline_path.exists():
            return []
        saved = self._saved()
        own = adoption.is_own(
            self.config(self.node), self.baseline_config(self.node), saved.get("written", [])
        )
        return [] if own else [self.node]

    def down(self) -> None:
        """Let go of the workload, which keeps running: refused while it differs from the saved
        baseline (`gameday cleanup` puts it back first). Deletes nothing."""
        self.pods.close()
        if not self.baseline_path.exists():
            return
        if self.config(self.node) != self.baseline_config(self.node) and not self.redeployed():
            raise LabError(
                f"{self.workload_kind} {self.workload} differs from the baseline gameday saved; "
                "nothing was changed",
                hint=f"gameday cleanup --lab {self.inventory.path}, then lab down again",
            )
        self.baseline_path.unlink()

    def leftover_objects(self) -> list[str]:
        """What gameday keeps of the adoption: its saved baseline (it created no object)."""
        return [f"adoption record {self.baseline_path}"] if self.baseline_path.exists() else []

    def leftovers(self) -> list[str]:
        return common.leftovers(self, [], config=self.workload_kind)

    def _sync(self) -> None:
        if self.pods.synced:
            return
        saved = self._saved()
        self.pods.selector = ",".join(f"{k}={v}" for k, v in saved["selector"].items())
        self.pods.container = saved["container"]
        super()._sync()

    # ---- configs ------------------------------------------------------------------------------

    def _saved(self) -> dict[str, Any]:
        if not self.baseline_path.exists():
            raise LabNotUp(
                f"{self.workload_kind} {self.workload} is not adopted yet",
                hint=f"gameday lab up --lab {self.inventory.path}",
            )
        return dict(json.loads(self.baseline_path.read_text()))

    def _config_of(self, obj: dict[str, Any]) -> NodeConfig:
        """The engine container's args, its literal env (a variable from a Secret or a field is
        the team's, left as it is) and the pod's enableServiceLinks (default true)."""
        c = self._container(obj)
        env = {e["name"]: e.get("value", "") for e in c.get("env") or [] if "valueFrom" not in e}
        links = obj["spec"]["template"]["spec"].get("enableServiceLinks")
        return NodeConfig(
            args=tuple(c.get("args") or ()), env=env, service_links=True if links is None else links
        )

    def baseline_config(self, node: str) -> NodeConfig:
        return NodeConfig.model_validate(self._saved()["config"])

    def config(self, node: str) -> NodeConfig:
        self._require_lab_namespace()
        return self._config_of(self._read())

    def apply(self, change: Change) -> None:
        if change.kind is not ChangeKind.NODE_CONFIG or not isinstance(change.after, NodeConfig):
            self.current(change)  # raises: not a change this lab makes
            return
        self._sync()
        self.pods.expect_stop_now([change.node])
        pod = self.pods.views[change.node].pod
        self._write(change.after)
        if pod is not None and change.after != change.before:
            self.pods.wait_replacing({change.node: pod.metadata.uid})

    def _write(self, cfg: NodeConfig) -> None:
        """The live object with `cfg` in its engine container; at the baseline, the saved
        container args, env and enableServiceLinks verbatim."""
        with self._lease_lock:
            self._update(lambda obj: self._written(obj, cfg))

    def _written(self, obj: dict[str, Any], cfg: NodeConfig) -> dict[str, Any]:
        """`obj` with `cfg` in its engine container, and the lease that puts it back; refused
        where the team has deployed the container anew since gameday saved or wrote it."""
        saved = self._saved()
        pod = obj["spec"]["template"]["spec"]
        c = next(c for c in pod["containers"] if c["name"] == saved["container"])
        baseline = self.baseline_config(self.node)
        if not adoption.is_own(self._config_of(obj), baseline, saved.get("written", [])):
            raise adoption.redeployed_error(
                f"{self.workload_kind} {self.workload}",
                [f"container {saved['container']}"],
                str(self.inventory.path),
            )
        if cfg == baseline:
            args, env, links = saved["args"], saved["env"], saved["enableServiceLinks"]
        else:
            kept = [e for e in c.get("env") or [] if "valueFrom" in e]
            args = list(cfg.args)
            env = kept + [{"name": k, "value": v} for k, v in cfg.env.items()]
            links = (
                pod.get("enableServiceLinks") if cfg.service_links is None else cfg.service_links
            )
        for key, value in (("args", args), ("env", env)):
            if value is None:
                c.pop(key, None)
            else:
                c[key] = value
        if links is None:
            pod.pop("enableServiceLinks", None)
        else:
            pod["enableServiceLinks"] = links
        # remembered as it will read back (an unset enableServiceLinks reads as the pod's),
        # before it is written
        written = self._config_of(obj)
        saved["written"] = adoption.remember(saved.get("written", []), written)
        write_private(self.baseline_path, json.dumps(saved, indent=1))
        if cfg == baseline:
            return _without_lease(obj)
        self._set_lease(obj, saved, written)
        return obj

    def _update(self, edit: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
        """The live object read, given to `edit` (which changes it, or says None: nothing to
        write) and replaced with the resourceVersion read. Where that meets a 409, something
        wrote the object since the read: it is read again and edited again, `edit`'s checks
        with it, as client-go's retry.RetryOnConflict does."""
        _, replace = self._api()
        for attempt in range(CONFLICT_RETRIES):
            obj = edit(self._read())
            if obj is None:
                return
            try:
                self.kube.call(
                    f"replace {self.workload_kind} {self.workload}",
                    replace,
                    self.workload,
                    self.ns,
                    obj,
                )
                return
            except Conflict:
                if attempt == CONFLICT_RETRIES - 1:
                    raise
                conflict_pause()

    # ---- the fault lease, on the object -------------------------------------------------------

    def _set_lease(
        self, obj: dict[str, Any], saved: dict[str, Any], cfg: NodeConfig | None = None
    ) -> None:
        """The lease annotation on `obj`: a new deadline, the change (`cfg`, else the one the
        lease already names) and the saved baseline of the engine container."""
        old = self._lease_of(obj) or {}
        lease = {
            "lab": self.inventory.lab.name,
            "expires": adoption.deadline(self.lease_s).isoformat(),
            "change": cfg.model_dump(mode="json") if cfg is not None else old.get("change"),
            "baseline": {k: saved[k] for k in ("container", "args", "env", "enableServiceLinks")},
        }
        meta = obj.setdefault("metadata", {})
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            LEASE_ANNOTATION: json.dumps(lease),
        }

    def _lease_of(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """This lab's lease on the object, if it holds one."""
        text = ((obj.get("metadata") or {}).get("annotations") or {}).get(LEASE_ANNOTATION)
        if not text:
            return None
        try:
            lease = json.loads(text)
        except json.JSONDecodeError:
            raise LabError(
                f"{self.workload_kind} {self.workload}: annotation {LEASE_ANNOTATION} is not "
                "gameday's JSON",
                hint=f"kubectl -n {self.ns} annotate {self.workload_kind} {self.workload} "
                f"{LEASE_ANNOTATION}-",
            ) from None
        if not isinstance(lease, dict) or lease.get("lab") != self.inventory.lab.name:
            return None
        return lease

    def _lease_read(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The object and its lease, once the namespace is known to be opted in: a CronJob's
        cleanup has no saved record, only the cluster."""
        ns = self.kube.namespace()
        if ns is None:
            raise LabError(f"namespace {self.ns!r} does not exist")
        self.guard(ns)
        obj = self._read()
        return obj, self._lease_of(obj)

    def lease(self) -> datetime | None:
        _, lease = self._lease_read()
        if lease is None:
            return None
        return adoption.parse_deadline(
            str(lease.get("expires", "")), f"{self.workload_kind} {self.workload}"
        )

    def renew_lease(self) -> None:
        with self._lease_lock:
            self._lease_read()  # the namespace opted in

            def renewed(obj: dict[str, Any]) -> dict[str, Any] | None:
                if self._lease_of(obj) is None or not self.baseline_path.exists():
                    return None
                self._set_lease(obj, self._saved())
                return obj

            self._update(renewed)

    def end_lease(self) -> list[str]:
        """The lease's baseline written back, verbatim, while the object still runs the change
        the lease names; one deployed anew since keeps its spec. The lease is dropped."""
        with self._lease_lock:
            self._lease_read()  # the namespace opted in
            restored: list[str] = []

            def ended(obj: dict[str, Any]) -> dict[str, Any] | None:
                restored.clear()
                lease = self._lease_of(obj)
                if lease is None:
                    return None
                base = lease.get("baseline") or {}
                pod = obj["spec"]["template"]["spec"]
                found = [c for c in pod["containers"] if c["name"] == base.get("container")]
                live = self._config_of(obj).model_dump(mode="json")
                if found and live == lease.get("change"):
                    for key in ("args", "env"):
                        if base.get(key) is None:
                            found[0].pop(key, None)
                        else:
                            found[0][key] = base[key]
                    if base.get("enableServiceLinks") is None:
                        pod.pop("enableServiceLinks", None)
                    else:
                        pod["enableServiceLinks"] = base["enableServiceLinks"]
                    restored.append(self.node)
                return _without_lease(obj)

            self._update(ended)
            return restored

    def restart(self, nodes: Sequence[str]) -> None:
        self._require_lab_namespace()
        super().restart(nodes)


def _without_lease(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(LEASE_ANNOTATION, None)
    meta["annotations"] = annotations
    return obj
