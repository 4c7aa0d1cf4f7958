"""The control-plane build's cache and its OpenAPI package list, without building."""

from __future__ import annotations

import json
from pathlib import Path

from tests.kubereal import build


def test_the_cache_is_under_xdg_cache_home_or_home() -> None:
    assert build.cache_root({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path("/c/gameday/kube")
    assert build.cache_root({"HOME": "/h"}) == Path("/h/.cache/gameday/kube")
    assert build.cache_root({"XDG_CACHE_HOME": "", "HOME": "/h"}) == Path("/h/.cache/gameday/kube")


def _fake_build(root: Path, version: str, stamp: bool, names: tuple[str, ...]) -> None:
    b = root / version / "bin"
    b.mkdir(parents=True)
    for n in names:
        (b / n).write_text("")
    if stamp:
        (root / version / build.STAMP).write_text(json.dumps({"version": version}))


def test_a_finished_build_is_found_by_its_version(tmp_path: Path) -> None:
    _fake_build(tmp_path, "9.9", True, (*build.COMPONENTS, "etcd"))
    got = build.cached(tmp_path, "9.9")
    assert got is not None and got.path("kube-apiserver") == tmp_path / "9.9/bin/kube-apiserver"
    assert build.cached(tmp_path, "9.8") is None
    # once found, ensure() builds nothing: no network, no Go
    assert build.ensure(tmp_path, "9.9") == got


def test_an_unfinished_build_is_not_taken(tmp_path: Path) -> None:
    _fake_build(tmp_path, "no-stamp", False, (*build.COMPONENTS, "etcd"))
    _fake_build(tmp_path, "no-etcd", True, build.COMPONENTS)
    assert build.cached(tmp_path, "no-stamp") is None
    assert build.cached(tmp_path, "no-etcd") is None


def test_openapi_packages_as_upstreams_makefile_finds_them(tmp_path: Path) -> None:
    def go(rel: str, text: str) -> None:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)

    tagged = "// +k8s:openapi-gen=true\npackage v1\n"
    go("pkg/apis/core/v1/doc.go", tagged)
    go("staging/src/k8s.io/api/apps/v1/doc.go", tagged)
    go("staging/src/k8s.io/code-generator/x/doc.go", tagged)
    go("staging/src/k8s.io/sample-apiserver/y/doc.go", tagged)
    go("vendor/github.com/z/doc.go", tagged)  # vendor/ is read through staging/ only
    go("_output/w/doc.go", tagged)
    go("pkg/untagged/doc.go", "package untagged\n")
    go("pkg/indented/doc.go", "  // +k8s:openapi-gen=true\npackage indented\n")
    assert build.openapi_dirs(tmp_path) == ["pkg/apis/core/v1", "vendor/k8s.io/api/apps/v1"]
