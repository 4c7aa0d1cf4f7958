"""Recreating a container with another command or environment, through the docker SDK: a new
container from the old one's own configuration (image, labels, host config, networks and their
aliases), with the same name, and with the old container's anonymous volumes (a `-v /data`, an
image's `VOLUME`) mounted again by name, as Compose does when it recreates a container: a new
container would otherwise get new, empty ones and leave the old ones orphaned. Nothing is read
from a compose file: the container as it runs is
the whole truth, so a project whose compose file, `.env` or working folder gameday never saw is
recreated exactly, and Compose still counts the new container as its service's (same labels).

The old container is stopped and renamed aside, the new one created and started, then the old
one removed; any failure on the way removes the new one and puts the old one back, started.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from typing import Any

from runner.errors import LabError

PARKED_SUFFIX = "-gameday-replaced"  # the old container's name while its successor starts


def recreate(
    docker: Any, old: Any, command: Sequence[str], env: Sequence[str], stop_timeout: int
) -> Any:
    """The new container (started) that replaces `old` with `command` and `env` (KEY=VALUE)."""
    import docker as docker_sdk

    attrs = old.attrs
    # a container set aside by a recreate that was interrupted is recreated under its own name
    parked = attrs["Name"].lstrip("/")
    name = parked.removesuffix(PARKED_SUFFIX)
    config = copy.deepcopy(attrs["Config"])
    config["Cmd"] = list(command)
    config["Env"] = list(env)
    config["Image"] = _image(docker, attrs)
    config["HostConfig"] = inherit_anonymous_volumes(attrs)
    endpoints = [
        (net, _endpoint(ep, old.id))
        for net, ep in (attrs["NetworkSettings"].get("Networks") or {}).items()
    ]
    shared = str(attrs["HostConfig"].get("NetworkMode", "")).startswith(("container:", "host"))
    if endpoints and not shared:  # one network at create (API < 1.44), the rest connected
        config["NetworkingConfig"] = {"EndpointsConfig": dict(endpoints[:1])}
    old.stop(timeout=stop_timeout)
    if parked == name:
        old.rename(name + PARKED_SUFFIX)
    new_id: str | None = None
    try:
        new_id = docker.api.create_container_from_config(config, name=name)["Id"]
        if not shared:
            for net, ep in endpoints[1:]:
                docker.api.connect_container_to_network(
                    new_id,
                    net,
                    aliases=ep.get("Aliases"),
                    ipv4_address=(ep.get("IPAMConfig") or {}).get("IPv4Address"),
                )
        docker.api.start(new_id)
    except docker_sdk.errors.DockerException as exc:
        if new_id is not None:
            with contextlib.suppress(docker_sdk.errors.DockerException):
                docker.api.remove_container(new_id, force=True)
        old.rename(name)
        old.start()
        raise LabError(
            f"docker could not recreate container {name}: {exc}; the old one is back",
            hint=f"docker inspect {name}",
        ) from None
    with contextlib.suppress(docker_sdk.errors.NotFound):
        old.remove(force=True)
    return docker.containers.get(new_id)


def inherit_anonymous_volumes(attrs: dict[str, Any]) -> dict[str, Any]:
    """The old container's host config, with each of its anonymous volumes (a volume mount no
    bind or mount of the host config names: from `-v /data`, a `volumes: [/data]` of Compose or
    an image's VOLUME) mounted by its name at the same place, read-only where it was."""
    host: dict[str, Any] = copy.deepcopy(attrs["HostConfig"])
    mounts: list[dict[str, Any]] = list(host.get("Mounts") or [])
    named = {_bind_target(b) for b in host.get("Binds") or []}
    named |= {str(m.get("Target")) for m in mounts if m.get("Source")}
    for m in attrs.get("Mounts") or []:
        target = m.get("Destination")
        if m.get("Type") != "volume" or not m.get("Name") or target in named:
            continue
        mounts = [x for x in mounts if x.get("Target") != target]  # its unnamed spec, if any
        mounts.append(
            {"Type": "volume", "Source": m["Name"], "Target": target, "ReadOnly": not m["RW"]}
        )
    if mounts:
        host["Mounts"] = mounts
    return host


def _bind_target(bind: str) -> str:
    """Where a `Binds` entry (SOURCE:TARGET[:OPTIONS]) mounts."""
    parts = bind.split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _image(docker: Any, attrs: dict[str, Any]) -> str:
    """The image the old container runs: by its name while the name still means that image
    (so the new container's Config.Image reads the same), else by its id."""
    import docker as docker_sdk

    name = str(attrs["Config"].get("Image") or "")
    with contextlib.suppress(docker_sdk.errors.ImageNotFound):
        if name and docker.images.get(name).id == attrs["Image"]:
            return name
    return str(attrs["Image"])


def _endpoint(ep: dict[str, Any], old_id: str) -> dict[str, Any]:
    """A network endpoint's settings for the new container: its aliases (without the short
    id Docker adds for the old container), its fixed addresses, links and driver options."""
    out: dict[str, Any] = {
        "Aliases": [a for a in ep.get("Aliases") or [] if a != old_id[:12]] or None,
    }
    for key in ("IPAMConfig", "Links", "DriverOpts"):
        if ep.get(key):
            out[key] = ep[key]
    return out
