"""The compose lab's Compose project and Docker objects: the Compose CLI (v2 `docker compose`
when present, else v1 `docker-compose`) with the compose file's variables, a timed exec in a
container, the checks of the compose file against the inventory, and which objects of the
project are (or are not) the lab's."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from runner.errors import LabError
from runner.labs.common.alertmanager_config import alertmanager_listen, resend_delay
from runner.labs.common.network import ensure_free
from runner.spec.inventory import ERA_ENV, ComposeSpec, Inventory

LABEL = "gameday.lab"
PROJECT_LABEL = "com.docker.compose.project"
# an exec is a quick look (a pid file, `vllm-lab smi`): longer is a stuck node
EXEC_TIMEOUT_S = 30.0
# What ships with gameday (in a checkout, links to compose/ and playbooks/): the image's
# Dockerfile, the lab's compose file and the host actions' playbooks.
PACKAGED = Path(__file__).resolve().parent
PACKAGED_COMPOSE_FILE = PACKAGED / "data" / "compose.yaml"
PACKAGED_DOCKERFILE = PACKAGED / "data" / "Dockerfile"
PACKAGED_PLAYBOOKS = PACKAGED / "playbooks"


def compose_file(inventory: Inventory, spec: ComposeSpec) -> Path:
    """The lab's compose file: the inventory's `compose.file` (relative to it), else the packaged
    one, so an installed gameday brings up a lab whose inventory names no file."""
    if spec.file is None:
        return PACKAGED_COMPOSE_FILE.resolve()
    return (inventory.path.parent / spec.file).resolve()


def playbooks_dir(inventory: Inventory, spec: ComposeSpec) -> Path:
    """The host actions' playbooks: the inventory's `compose.playbooks`, else the packaged ones."""
    if spec.playbooks is None:
        return PACKAGED_PLAYBOOKS.resolve()
    return (inventory.path.parent / spec.playbooks).resolve()


def compose_command() -> list[str]:
    """Compose v2 (`docker compose`) when the docker CLI has it, else v1 (`docker-compose`)."""
    docker = shutil.which("docker")
    if docker:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            v2 = subprocess.run(
                [docker, "compose", "version"], capture_output=True, timeout=20, check=False
            )
            if v2.returncode == 0:
                return [docker, "compose"]
    v1 = shutil.which("docker-compose")
    if v1:
        return [v1]
    raise LabError(
        "neither Compose v2 (`docker compose`) nor v1 (`docker-compose`) is installed",
        hint="apt-get install -y docker-compose, or install the Docker Compose plugin",
    )


def compose_env(inventory: Inventory, spec: ComposeSpec, state_dir: Path) -> dict[str, str]:
    """The compose file's variables, from the inventory (its header lists them)."""
    env = {
        "GAMEDAY_PROJECT": spec.project,
        "GAMEDAY_LAB": inventory.lab.name,
        "GAMEDAY_IMAGE": spec.image,
        "GAMEDAY_TIME_SCALE": f"{inventory.lab.time_scale:g}",
        ERA_ENV: inventory.lab.vllm_version.value,
        "GAMEDAY_PROMETHEUS_DIR": str(state_dir / "prometheus"),
    }
    for role, subnet in spec.subnets.items():
        env[f"GAMEDAY_NET_{_var(role)}"] = subnet.rsplit(".", 1)[0]
    for n in inventory.nodes:
        if n.published:
            env[f"GAMEDAY_PUBLISH_{_var(n.name)}"] = n.published
    mon = inventory.lab.monitoring
    if mon is not None:
        env["GAMEDAY_PUBLISH_PROMETHEUS"] = mon.prometheus_listen
        env["GAMEDAY_PUBLISH_ALERTMANAGER"] = alertmanager_listen(mon)
        env["GAMEDAY_ALERTMANAGER_DIR"] = str(state_dir / "alertmanager")
        env["GAMEDAY_ALERT_RESEND_DELAY"] = resend_delay(inventory)
    return os.environ | env


def run_compose(
    files: list[Path], project: str, args: tuple[str, ...], env: dict[str, str], timeout: float
) -> str:
    """`compose -p PROJECT -f FILE... ARGS`: its output, or LabError with its last error line."""
    cmd = [*compose_command(), "-p", project]
    for f in files:
        cmd += ["-f", str(f)]
    cmd += args
    try:
        proc = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"`{' '.join(cmd[-len(args) :])}` took over {timeout:.0f} s") from exc
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        lines = [ln for ln in lines if ln.lower().startswith("error")] or lines
        raise LabError(
            f"compose {' '.join(args)} failed: " + (lines[-1] if lines else "(no output)"),
            hint=f"compose file {files[0]}; project {project}",
        )
    return proc.stdout


def exec_in(container: Any, cmd: list[str]) -> tuple[int, str]:
    """Run `cmd` in the container: (exit code, output). LabError when it takes over
    EXEC_TIMEOUT_S: coreutils `timeout` ends the command in the container, and the wait for
    Docker's answer ends a little later whatever Docker does."""
    limit = EXEC_TIMEOUT_S
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["res"] = container.exec_run(
                ["timeout", "--kill-after=1", f"{limit:g}", *cmd], demux=False
            )
        except BaseException as exc:
            box["exc"] = exc

    worker = threading.Thread(target=run, name="docker-exec", daemon=True)
    began = time.monotonic()
    worker.start()
    worker.join(limit + 5)
    if "exc" in box:
        raise box["exc"]
    res = box.get("res")
    # 124: `timeout` ended it (137 when it had to kill); a 137 before the limit is a kill
    # from elsewhere (the container stopping), and the command's own result
    timed_out = res is not None and res.exit_code in (124, 137)
    if res is None or (timed_out and time.monotonic() - began >= limit):
        raise LabError(
            f"`{' '.join(cmd)}` in container {container.name} did not finish in {limit:g} s",
            hint=f"docker exec -it {container.name} sh  (is the node stuck?)",
        )
    return int(res.exit_code), (res.output or b"").decode(errors="replace")


def check_project(docker: Any, spec: ComposeSpec, inventory: Inventory) -> None:
    """The lab's image is built, and its Compose project holds nothing of another lab's."""
    import docker as docker_sdk

    try:
        docker.images.get(spec.image)
    except docker_sdk.errors.ImageNotFound:
        raise LabError(
            f"the lab image {spec.image} is not built",
            hint=f"gameday lab build --lab {inventory.path}",
        ) from None
    clash = [
        c.name
        for c in docker.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={spec.project}"}
        )
        if c.labels.get(LABEL) != inventory.lab.name
    ]
    if clash:
        raise LabError(
            f"compose project {spec.project!r} already exists and is not this lab's "
            f"(containers {', '.join(sorted(clash)[:4])})",
            hint="set gameday_lab.compose.project to another name, or remove that project",
        )


def check_services(inventory: Inventory, compose_file: Path, services: dict[str, Any]) -> None:
    """The compose file (resolved: `compose config`) and the inventory describe the same
    engines; ports are free."""
    for n in inventory.nodes:
        svc = services.get(n.name)
        if svc is None:
            raise LabError(
                f"{compose_file}: no service {n.name!r} for inventory host {n.name}",
                hint="inventory hosts are the compose file's engine services",
            )
        want = [*n.program(inventory.lab.engine_command), *n.rendered_args()]
        if list(svc.get("command") or []) != want:
            raise LabError(
                f"{compose_file}: service {n.name}'s command differs from "
                f"{inventory.path} ({n.name}.gameday_engine_args)",
                hint=f"compose: {svc.get('command')}; inventory: {want}",
            )
    for svc_name, svc in services.items():
        for port in svc.get("ports") or []:
            host_ip, host_port = _published(port)
            if host_port is None:
                continue
            ensure_free(host_ip, host_port, f"{compose_file}: {svc_name} publishes")


def foreign_objects(docker: Any, project: str, net_names: set[str], lab: str) -> list[str]:
    """What `compose down --volumes --remove-orphans` could remove that lab `lab` did not
    create: the Compose project's objects, and objects named as its networks and volumes,
    that lack the lab's label."""
    import docker as docker_sdk

    try:
        containers = docker.containers.list(
            all=True, filters={"label": f"{PROJECT_LABEL}={project}"}
        )
        # Docker's name filters match parts of names: exact names are picked here
        nets = [
            n
            for n in docker.networks.list()
            if n.name in net_names or (n.attrs.get("Labels") or {}).get(PROJECT_LABEL) == project
        ]
        vols = [
            v
            for v in docker.volumes.list()
            if v.name.startswith(f"{project}_")
            or (v.attrs.get("Labels") or {}).get(PROJECT_LABEL) == project
        ]
    except docker_sdk.errors.DockerException as exc:
        raise LabError(f"Docker: cannot list compose project {project!r}: {exc}") from None
    found = (
        [("container", c.name, c.labels or {}) for c in containers]
        + [("network", n.name, n.attrs.get("Labels") or {}) for n in nets]
        + [("volume", v.name, v.attrs.get("Labels") or {}) for v in vols]
    )
    return [
        f"{kind} {name}" + (f" (of lab {other!r})" if (other := labels.get(LABEL)) else "")
        for kind, name, labels in found
        if labels.get(LABEL) != lab
    ]


def remove_labelled(docker: Any, labels: list[str]) -> None:
    """Remove the containers, networks and volumes carrying all of `labels`, as far as Docker
    lets it."""
    mine = {"label": labels}
    for c in docker.containers.list(all=True, filters=mine):
        with contextlib.suppress(Exception):
            c.remove(force=True, v=True)
    for net in docker.networks.list(filters=mine):
        with contextlib.suppress(Exception):
            net.remove()
    for vol in docker.volumes.list(filters=mine):
        with contextlib.suppress(Exception):
            vol.remove(force=True)


def labelled_objects(docker: Any, label: str) -> list[str]:
    """Containers, networks and volumes carrying `label` that exist now."""
    labels = {"label": [label]}
    return (
        [f"container {c.name}" for c in docker.containers.list(all=True, filters=labels)]
        + [f"network {n.name}" for n in docker.networks.list(filters=labels)]
        + [f"volume {v.name}" for v in docker.volumes.list(filters=labels)]
    )


def _var(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _published(port: Any) -> tuple[str, int | None]:
    """(host ip, host port) of a compose `ports` entry in either syntax."""
    if isinstance(port, dict):
        published = port.get("published")
        return str(port.get("host_ip") or "0.0.0.0"), int(published) if published else None
    parts = str(port).split(":")
    if len(parts) == 3:
        return parts[0], int(parts[1])
    if len(parts) == 2:
        return "0.0.0.0", int(parts[0])
    return "0.0.0.0", None
