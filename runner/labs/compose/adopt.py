"""A Compose project the team already runs, adopted as a lab (`gameday_lab.adopt.project`).

gameday neither creates nor removes it: `lab up` checks that each inventory host's service
(`gameday_service`, default the host's name) has a running container and adopts it; `lab down`
lets go and leaves it running. Every container of an adopted service must carry the opt-in
label `gameday.io/allow-faults: "<lab name>"`: without it, nothing is touched (no stop, no
recreate, no exec).

The baseline is read from the live containers at adoption (their command and environment, raw
and as a NodeConfig) and saved in the lab's state directory, so `gameday cleanup` after a crash
returns them to it. A changed command or environment recreates the service's container from
its own configuration (runner.labs.compose.recreate says why the docker SDK, not Compose);
restart, signals, logs and events work as on gameday's own compose lab.

Each configuration gameday writes is remembered in that record first, and a change away from the
baseline records its fault lease (`lease.json` beside it, pushed forward by a running runner):
runner.labs.common.adoption says what both are for.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from runner.errors import LabError, LabNotUp
from runner.fsutil import write_private
from runner.labs.base import Capability, Change, ChangeKind, NodeConfig, ProcessState, Value
from runner.labs.common import adoption
from runner.labs.common import helpers as common
from runner.labs.compose.configs import config_of
from runner.labs.compose.driver import STOP_TIMEOUT_S, ComposeLab
from runner.labs.compose.project import PROJECT_LABEL
from runner.labs.compose.recreate import PARKED_SUFFIX, recreate
from runner.labs.compose.watch import DockerWatch
from runner.spec.actions import EngineProcess, SignalName
from runner.spec.inventory import Inventory

ALLOW_LABEL = "gameday.io/allow-faults"
SERVICE_LABEL = "com.docker.compose.service"


class AdoptedComposeLab(ComposeLab):
    label = "adopted compose project"

    def __init__(self, inventory: Inventory) -> None:
        super().__init__(inventory)
        adopt = inventory.lab.adopt
        if adopt is None or adopt.project is None:
            raise LabError(f"{inventory.path}: gameday_lab.adopt.project is not set")
        self.adopted = adopt.project
        self.lease_s = adopt.lease_s
        # signals go to the engine in the container; programs, addresses and GPU lists need
        # the lab's own host containers and tools
        self.capabilities = frozenset({Capability.SIGNALS})
        self.services = {n.name: n.service or n.name for n in inventory.nodes}
        nodes = {svc: node for node, svc in self.services.items()}
        self.baseline_path = self.state_dir / "adopted.json"
        self.lease_path = self.state_dir / "lease.json"
        self._lease_lock = threading.Lock()  # the runner's renewals beside its changes
        self.watch = DockerWatch(
            inventory,
            docker=lambda: self.docker,
            engine=self.engine,
            generation=self.files.generation,
            labels=[f"{PROJECT_LABEL}={self.adopted}"],
            node_of=lambda labels: nodes.get(labels.get(SERVICE_LABEL, "")),
        )
        self.feed = self.watch.feed

    @property
    def project(self) -> str:
        return self.adopted

    # ---- the adopted containers -------------------------------------------------------------

    def _containers(self, role: str | None = None, node: str | None = None) -> list[Any]:
        labels = [f"{PROJECT_LABEL}={self.adopted}"]
        if node:
            labels.append(f"{SERVICE_LABEL}={self.services[node]}")
        found = self.docker.containers.list(all=True, filters={"label": labels})
        return [c for c in found if c.labels.get(SERVICE_LABEL) in self.services.values()]

    def _engines(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for node in self.services:
            found = self._containers(node=node)
            if found:
                out[node] = max(found, key=lambda c: c.attrs["Created"])
        return out

    def engine(self, node: str) -> Any:
        found = self._containers(node=node)
        if not found:
            raise LabNotUp(
                f"compose project {self.adopted!r} has no container of service "
                f"{self.services[node]!r} (host {node})",
                hint=f"gameday does not start an adopted project: docker compose -p "
                f"{self.adopted} up -d",
            )
        return max(found, key=lambda c: c.attrs["Created"])

    def host(self, node: str) -> Any:
        return self.engine(node)

    def check_opt_in(self) -> None:
        """LabError unless every container of an adopted service carries the opt-in label
        with this lab's name; it reads labels only."""
        lab = self.inventory.lab.name
        missing = [c.name for c in self._containers() if c.labels.get(ALLOW_LABEL) != lab]
        if missing:
            raise LabError(
                f"compose project {self.adopted!r} has not opted in to faults from lab "
                f"{lab!r}: container(s) {', '.join(sorted(missing))} lack the label "
                f'{ALLOW_LABEL}: "{lab}"; nothing was touched',
                hint=f"add to each adopted service in your compose file\n"
                f"    labels:\n"
                f'      {ALLOW_LABEL}: "{lab}"\n'
                f"then recreate them (docker compose -p {self.adopted} up -d)",
            )

    # ---- lifecycle: adopt and let go --------------------------------------------------------

    def is_up(self) -> bool:
        if not self.baseline_path.exists():
            return False
        try:
            return len(self._engines()) == len(self.services)
        except LabError:
            return False

    def up(self) -> None:
        """Adopt the running project: check it runs and has opted in, save its baseline."""
        engines = {node: self.engine(node) for node in self.services}
        stopped = [c.name for c in engines.values() if c.attrs["State"]["Status"] != "running"]
        if stopped:
            raise LabError(
                f"compose project {self.adopted!r} is not running: {', '.join(stopped)}",
                hint=f"gameday does not start an adopted project: docker compose -p "
                f"{self.adopted} up -d",
            )
        self.check_opt_in()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if not self.baseline_path.exists():  # after a crash the saved one is the baseline
            self._save(engines)
        elif redeployed := self.redeployed():
            raise adoption.redeployed_error(
                f"compose project {self.adopted!r}",
                [f"service {self.services[n]}" for n in redeployed],
                str(self.inventory.path),
            )
        self.watch.sync()

    def _save(self, engines: dict[str, Any]) -> None:
        """The live containers' command and environment as the baseline."""
        saved = {
            node: {
                "container": c.name,
                "cmd": list(c.attrs["Config"]["Cmd"] or []),
                "env": list(c.attrs["Config"].get("Env") or []),
                "config": self._config_of(c).model_dump(mode="json"),
            }
            for node, c in engines.items()
        }
        write_private(self.baseline_path, json.dumps(saved, indent=1))

    def readopt(self) -> None:
        """What the project runs now becomes the baseline; an old lease is dropped with it."""
        engines = {node: self.engine(node) for node in self.services}
        self.check_opt_in()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._save(engines)
        self.lease_path.unlink(missing_ok=True)

    def redeployed(self) -> list[str]:
        if not self.baseline_path.exists():
            return []
        saved = self._saved()
        engines = self._engines()
        return [
            n
            for n in self.services
            if n in engines
            and not adoption.is_own(
                self._config_of(engines[n]), self.baseline_config(n), saved[n].get("written", [])
            )
        ]

    def down(self) -> None:
        """Let go of the project, which keeps running: refused while a container differs from
        the saved baseline (`gameday cleanup` puts it back first)."""
        self.watch.close()
        if not self.baseline_path.exists():
            return
        redeployed = self.redeployed()  # the team's: let go with the rest
        drift = [
            n
            for n in self.services
            if n in self._engines()
            and n not in redeployed
            and self.config(n) != self.baseline_config(n)
        ]
        if drift:
            raise LabError(
                f"adopted service(s) {', '.join(self.services[n] for n in drift)} differ from "
                "the baseline gameday saved; nothing was changed",
                hint=f"gameday cleanup --lab {self.inventory.path}, then lab down again",
            )
        self.baseline_path.unlink()
        self.lease_path.unlink(missing_ok=True)
        self.files.remove()

    def leftover_objects(self) -> list[str]:
        """What gameday keeps of the adoption: its saved baseline, and a container it set
        aside while recreating one."""
        parked = [
            f"container {c.name}"
            for c in self.docker.containers.list(
                all=True, filters={"label": f"{PROJECT_LABEL}={self.adopted}"}
            )
            if c.name.endswith(PARKED_SUFFIX)
        ]
        saved = [f"adoption record {self.baseline_path}"] if self.baseline_path.exists() else []
        lease = [f"fault lease {self.lease_path}"] if self.lease_path.exists() else []
        return saved + lease + parked

    def leftovers(self) -> list[str]:
        return common.leftovers(self, [o for o in self.leftover_objects() if "container" in o])

    # ---- configs ------------------------------------------------------------------------------

    def _saved(self) -> dict[str, Any]:
        if not self.baseline_path.exists():
            raise LabNotUp(
                f"compose project {self.adopted!r} is not adopted yet",
                hint=f"gameday lab up --lab {self.inventory.path}",
            )
        return dict(json.loads(self.baseline_path.read_text()))

    def baseline_config(self, node: str) -> NodeConfig:
        return NodeConfig.model_validate(self._saved()[node]["config"])

    def _config_of(self, c: Any) -> NodeConfig:
        image = self.docker.images.get(c.attrs["Image"])
        env = image.attrs["Config"].get("Env") or []
        return config_of(c, self.inventory.lab.engine_command, dict(e.split("=", 1) for e in env))

    def config(self, node: str) -> NodeConfig:
        return self._config_of(self.engine(node))

    def current(self, change: Change) -> NodeConfig | ProcessState | Value:
        if change.kind is ChangeKind.NODE_CONFIG:
            return self.config(change.node)
        raise LabError(f"an adopted compose project has no {change.kind.value} changes")

    def apply(self, change: Change) -> None:
        if change.kind is ChangeKind.NODE_CONFIG and isinstance(change.after, NodeConfig):
            self._reapply(change.node, change.after)
            return
        self.current(change)  # raises: not a change this lab makes

    def _reapply(self, node: str, cfg: NodeConfig) -> None:
        """Recreate the service's container with `cfg`; at the baseline, with the command and
        environment it had at adoption, exactly."""
        self.check_opt_in()
        record = self._saved()
        saved = record[node]
        old = self.engine(node)
        baseline = self.baseline_config(node)
        if not adoption.is_own(self._config_of(old), baseline, saved.get("written", [])):
            raise adoption.redeployed_error(
                f"compose project {self.adopted!r}",
                [f"service {self.services[node]}"],
                str(self.inventory.path),
            )
        with self._lease_lock:  # the change's record and its lease before the change
            saved["written"] = adoption.remember(saved.get("written", []), cfg)
            write_private(self.baseline_path, json.dumps(record, indent=1))
            if cfg != baseline:
                self._write_lease()
        if cfg == baseline:
            cmd, env = list(saved["cmd"]), list(saved["env"])
        else:
            prefix = list(self.inventory.lab.engine_command)
            cmd = (prefix if saved["cmd"][: len(prefix)] == prefix else []) + list(cfg.args)
            visible = self._config_of(old).env  # what a scenario sees and sets
            env = [
                e for e in old.attrs["Config"].get("Env") or [] if e.split("=", 1)[0] not in visible
            ]
            env += [f"{k}={v}" for k, v in cfg.env.items()]
        self.files.bump_generation([node])
        self.watch.stopping[old.id] = math.inf
        try:
            recreate(self.docker, old, cmd, env, STOP_TIMEOUT_S)
        except BaseException:
            self.watch.stopping[old.id] = time.time()  # back as it was: its exits are its own
            raise
        self.watch.stopping[old.id] = time.time()
        with self._lease_lock:  # also as it reads back (Docker may fold the image's env in)
            saved["written"] = adoption.remember(saved["written"], self.config(node))
            write_private(self.baseline_path, json.dumps(record, indent=1))
        if cfg == baseline and all(
            self.config(n) == self.baseline_config(n) for n in self.services if n != node
        ):
            with self._lease_lock:
                self.lease_path.unlink(missing_ok=True)

    # ---- the fault lease --------------------------------------------------------------------

    def _write_lease(self) -> None:
        lease = {
            "lab": self.inventory.lab.name,
            "project": self.adopted,
            "expires": adoption.deadline(self.lease_s).isoformat(),
        }
        write_private(self.lease_path, json.dumps(lease, indent=1))

    def lease(self) -> datetime | None:
        if not self.lease_path.exists():
            return None
        text = json.loads(self.lease_path.read_text()).get("expires", "")
        return adoption.parse_deadline(text, str(self.lease_path))

    def renew_lease(self) -> None:
        with self._lease_lock:
            if self.lease_path.exists():
                self._write_lease()

    def end_lease(self) -> list[str]:
        """Every node still running a change of gameday's gets its baseline back; one the team
        deployed anew is left as it is."""
        if self.lease_path.exists() and self.baseline_path.exists():
            redeployed = self.redeployed()
            back = [
                n
                for n in self.services
                if n not in redeployed and self.config(n) != self.baseline_config(n)
            ]
            for n in back:
                self._reapply(n, self.baseline_config(n))
        else:
            back = []
        self.lease_path.unlink(missing_ok=True)
        return back

    def restart(self, nodes: Sequence[str]) -> None:
        self.check_opt_in()
        super().restart(nodes)

    def signal(self, node: str, process: EngineProcess, signal: SignalName) -> None:
        self.check_opt_in()
        super().signal(node, process, signal)
