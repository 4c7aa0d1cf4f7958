"""A recreated container keeps its anonymous volumes: each is mounted again by name, as Compose
does, whichever way it was declared (`docker run -v /data`, Compose v1's container volumes,
Compose v2's unnamed mounts, an image's VOLUME); named volumes and binds stay as they were."""

from __future__ import annotations

from typing import Any

from runner.labs.compose.recreate import inherit_anonymous_volumes

ANON = "3f1c0ffee3f1c0ffee3f1c0ffee3f1c0ffee3f1c0ffee3f1c0ffee3f1c0ffee1"


def mount(kind: str, name: str, dest: str, rw: bool = True) -> dict[str, Any]:
    return {
        "Type": kind,
        "Name": name if kind == "volume" else "",
        "Source": f"/var/lib/docker/volumes/{name}/_data" if kind == "volume" else name,
        "Destination": dest,
        "Driver": "local" if kind == "volume" else "",
        "Mode": "",
        "RW": rw,
        "Propagation": "",
    }


def test_docker_run_v_data_is_mounted_again_by_name() -> None:
    attrs = {
        "HostConfig": {"Binds": None, "NetworkMode": "default"},
        "Mounts": [mount("volume", ANON, "/data")],
    }
    host = inherit_anonymous_volumes(attrs)
    assert host["Mounts"] == [
        {"Type": "volume", "Source": ANON, "Target": "/data", "ReadOnly": False}
    ]
    assert host["NetworkMode"] == "default"
    assert "Mounts" not in attrs["HostConfig"]  # the old container's attributes are not changed


def test_compose_v1_named_binds_stay_and_container_volumes_are_inherited() -> None:
    attrs = {
        "HostConfig": {"Binds": ["proj_gpu:/var/lib/gameday/gpu:rw", "/srv/models:/models:ro"]},
        "Mounts": [
            mount("volume", "proj_gpu", "/var/lib/gameday/gpu"),
            mount("bind", "/srv/models", "/models", rw=False),
            mount("volume", ANON, "/cache", rw=False),
        ],
    }
    host = inherit_anonymous_volumes(attrs)
    assert host["Binds"] == attrs["HostConfig"]["Binds"]
    assert host["Mounts"] == [
        {"Type": "volume", "Source": ANON, "Target": "/cache", "ReadOnly": True}
    ]


def test_compose_v2_unnamed_mounts_are_given_the_old_volume() -> None:
    attrs = {
        "HostConfig": {
            "Binds": None,
            "Mounts": [
                {"Type": "volume", "Source": "proj_gpu", "Target": "/var/lib/gameday/gpu"},
                {"Type": "volume", "Target": "/data", "VolumeOptions": {}},
                {"Type": "tmpfs", "Target": "/tmp"},
            ],
        },
        "Mounts": [
            mount("volume", "proj_gpu", "/var/lib/gameday/gpu"),
            mount("volume", ANON, "/data"),
        ],
    }
    host = inherit_anonymous_volumes(attrs)
    assert host["Mounts"] == [
        {"Type": "volume", "Source": "proj_gpu", "Target": "/var/lib/gameday/gpu"},
        {"Type": "tmpfs", "Target": "/tmp"},
        {"Type": "volume", "Source": ANON, "Target": "/data", "ReadOnly": False},
    ]


def test_a_container_without_volumes_keeps_its_host_config() -> None:
    attrs = {"HostConfig": {"Binds": None, "PortBindings": {}}, "Mounts": []}
    assert inherit_anonymous_volumes(attrs) == attrs["HostConfig"]
