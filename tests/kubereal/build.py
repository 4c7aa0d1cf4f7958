"""Build a real Kubernetes control plane from Debian's archive, once, into the user's cache.

No registry this project reaches ships a kube-apiserver binary, but Debian's archive has the
Kubernetes source package (with `vendor/`), Go and etcd. This module:

1. downloads, with a private apt configuration (its own sources, lists and cache under the work
   directory, so `/etc/apt` and the system's package state are untouched), the `kubernetes`
   source package, `golang-1.19-go`/`golang-1.19-src` and `etcd-server` as files;
2. unpacks the source (`dpkg-source -x`, Debian's patches applied) and the .debs (`dpkg-deb -x`)
   under the work directory: nothing is installed;
3. generates `pkg/generated/openapi` with the vendored openapi-gen (the source package does not
   carry it; upstream's `make` generates it), then builds kube-apiserver, kube-controller-manager
   and kube-scheduler in GOPATH mode (`GO111MODULE=off`, the tree at
   `$GOPATH/src/k8s.io/kubernetes`), as Debian's own `debian/rules` does;
4. keeps the three binaries and etcd in `<cache>/kube/<version>/bin` and deletes the work
   directory (source, Go, the 1.5 GB Go build cache).

A finished build is marked by a stamp file; with it present `ensure()` returns at once.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# bookworm's kubernetes source package; its upstream version is v1.20.2 (Debian reverted 1.20.5)
SOURCE_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"
UPSTREAM_VERSION = "v1.20.2"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
GO_PACKAGES = ("golang-1.19-go", "golang-1.19-src")
ETCD_PACKAGE = "etcd-server"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
STAMP = "build.json"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


class BuildError(Exception):
    """A step of the download or build failed; the message names the step and its output."""


@dataclass(frozen=True)
class Binaries:
    """The built control plane: each component's executable path and etcd's."""

    root: Path
    version: str

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def path(self, name: str) -> Path:
        return self.bin / name


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/gameday/kube`, `~/.cache/gameday/kube` without it."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".cache")
    return Path(base) / "gameday" / "kube"


def cached(root: Path | None = None, version: str = SOURCE_VERSION) -> Binaries | None:
    """The finished build of `version`, or None when there is none."""
    out = Binaries((root or cache_root()) / version, version)
    if not (out.root / STAMP).is_file():
        return None
    if not all(out.path(n).is_file() for n in (*COMPONENTS, "etcd")):
        return None
    return out


def ensure(
    root: Path | None = None,
    version: str = SOURCE_VERSION,
    log: Callable[[str], None] = lambda _: None,
    keep_work: bool = False,
) -> Binaries:
    """The cached build of `version`, building it first when it is missing."""
    done = cached(root, version)
    if done is not None:
        return done
    out = Binaries((root or cache_root()) / version, version)
    work = out.root / "work"
    if work.exists():
        _rmtree(work)  # an interrupted build: its state is unknown
    work.mkdir(parents=True)
    out.root.chmod(0o700)
    started = time.monotonic()
    apt_conf = _apt_config(work / "apt")
    src = _source(work, apt_conf, version, log)
    debs = _extract_debs(work, apt_conf, log)
    goroot = debs / "usr" / "lib" / "go-1.19"
    tree = _gopath_tree(work, src)
    env = _in_tree(_go_env(work, goroot), tree)
    log("generating pkg/generated/openapi (vendored openapi-gen)")
    _openapi(tree, env, work)
    log(f"building {', '.join(COMPONENTS)} (GOPATH mode; 6 to 11 minutes cold on 2 cores)")
    out.bin.mkdir(exist_ok=True)
    _run(
        [
            str(goroot / "bin" / "go"),
            "build",
            "-trimpath",
            "-ldflags",
            _ldflags(),
            "-o",
            str(out.bin) + "/",
            *(f"k8s.io/kubernetes/cmd/{n}" for n in COMPONENTS),
        ],
        "go build",
        cwd=tree,
        env=env,
    )
    shutil.copy2(debs / "usr" / "bin" / "etcd", out.path("etcd"))
    seconds = round(time.monotonic() - started, 1)
    if not keep_work:
        _rmtree(work)
    stamp = {"version": version, "upstream": UPSTREAM_VERSION, "build_seconds": seconds}
    (out.root / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    log(f"built in {seconds} s: {out.bin}")
    return out


def _apt_config(d: Path) -> Path:
    """An apt configuration of its own: deb and deb-src of Debian main, private lists and cache."""
    for sub in ("sources.list.d", "preferences.d", "lists/partial", "archives/partial"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "status").touch()
    (d / "sources.list.d" / "debian.sources").write_text(
        f"Types: deb deb-src\nURIs: {MIRROR}\nSuites: {SUITE}\nComponents: main\n"
        f"Signed-By: {KEYRING}\n"
    )
    conf = d / "apt.conf"
    conf.write_text(
        "".join(
            f'{k} "{v}";\n'
            for k, v in (
                ("Dir::Etc::sourcelist", "/dev/null"),
                ("Dir::Etc::sourceparts", d / "sources.list.d"),
                ("Dir::Etc::preferencesparts", d / "preferences.d"),
                ("Dir::Etc::parts", d / "apt.conf.d"),
                ("Dir::State::lists", d / "lists"),
                ("Dir::State::status", d / "status"),
                ("Dir::Cache", d),
                ("Dir::Cache::archives", d / "archives"),
                # the files are ours: apt needs not hand the download to its `_apt` user
                ("APT::Sandbox::User", getpass.getuser()),
            )
        )
    )
    return conf


def _apt(conf: Path, argv: list[str], what: str, cwd: Path) -> None:
    env = {**os.environ, "APT_CONFIG": str(conf), "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "-q", *argv], what, cwd=cwd, env=env)


def _source(work: Path, conf: Path, version: str, log: Callable[[str], None]) -> Path:
    log(f"downloading the kubernetes {version} source package ({MIRROR} {SUITE})")
    _apt(conf, ["update"], "apt-get update (private lists)", work)
    dl = work / "source"
    dl.mkdir()
    _apt(conf, ["source", "--download-only", f"kubernetes={version}"], "apt-get source", dl)
    (dsc,) = dl.glob("*.dsc")
    tree = work / "kubernetes"
    _run(["dpkg-source", "--no-check", "-x", str(dsc), str(tree)], "dpkg-source -x", cwd=dl)
    return tree


def _extract_debs(work: Path, conf: Path, log: Callable[[str], None]) -> Path:
    log(f"downloading {', '.join((*GO_PACKAGES, ETCD_PACKAGE))}")
    dl = work / "debs"
    dl.mkdir()
    _apt(conf, ["download", *GO_PACKAGES, ETCD_PACKAGE], "apt-get download", dl)
    root = work / "root"
    root.mkdir()
    for deb in sorted(dl.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(root)], f"dpkg-deb -x {deb.name}", cwd=dl)
    return root


def _go_env(work: Path, goroot: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR", "USER")}
    return {
        **keep,
        "PATH": f"{goroot / 'bin'}:/usr/bin:/bin",
        "GOROOT": str(goroot),
        "GOPATH": str(work / "gopath"),
        "GOCACHE": str(work / "gocache"),
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }


def _gopath_tree(work: Path, src: Path) -> Path:
    """`$GOPATH/src/k8s.io/kubernetes`: where GOPATH mode resolves `k8s.io/kubernetes/...`."""
    link = work / "gopath" / "src" / "k8s.io" / "kubernetes"
    link.parent.mkdir(parents=True)
    link.symlink_to(src, target_is_directory=True)
    return link


def _in_tree(env: dict[str, str], tree: Path) -> dict[str, str]:
    # Go takes the working directory from $PWD when it names the same directory: the GOPATH path
    # of the link, not the resolved one outside GOPATH (vendor/ applies only inside GOPATH)
    return {**env, "PWD": str(tree)}


_TAGGED = re.compile(r"^// *\+k8s:", re.M)


def openapi_dirs(tree: Path) -> list[str]:
    """The packages that ask for OpenAPI definitions, as upstream's Makefile.generated_files finds
    them (KUBE_OPENAPI_TAG_FILES): every Go file with a `// +k8s:` tag that says
    `+k8s:openapi-gen=`, staging/ named as its vendor/ path, code-generator and sample-apiserver
    left out."""
    found: set[str] = set()
    for d, subdirs, files in os.walk(tree, followlinks=False):
        rel = Path(d).relative_to(tree).as_posix()
        subdirs[:] = [
            s
            for s in subdirs
            if not (rel == "." and s == "vendor") and not s.startswith(("_", "."))
        ]
        for f in files:
            if not f.endswith(".go"):
                continue
            text = (Path(d) / f).read_text(errors="replace")
            if "+k8s:openapi-gen=" in text and _TAGGED.search(text):
                found.add(re.sub(r"^staging/src/", "vendor/", rel))
    skip = ("vendor/k8s.io/code-generator/", "vendor/k8s.io/sample-apiserver/")
    return sorted(d for d in found if not (d + "/").startswith(skip))


def _openapi(tree: Path, env: dict[str, str], work: Path) -> None:
    gen = work / "openapi-gen"
    go = str(Path(env["GOROOT"]) / "bin" / "go")
    _run(
        [go, "build", "-o", str(gen), "./vendor/k8s.io/kube-openapi/cmd/openapi-gen"],
        "go build openapi-gen",
        cwd=tree,
        env=env,
    )
    dirs = ",".join(f"k8s.io/kubernetes/{d}" for d in openapi_dirs(tree))
    _run(
        [
            str(gen),
            "--input-dirs",
            dirs,
            "--output-package",
            "k8s.io/kubernetes/pkg/generated/openapi",
            "--output-file-base",
            "zz_generated.openapi",
            "--go-header-file",
            str(tree / "vendor/k8s.io/code-generator/hack/boilerplate.go.txt"),
            "--report-filename",
            str(work / "openapi-violations.report"),
        ],
        "openapi-gen",
        cwd=tree,
        env=env,
    )
    if not (tree / "pkg/generated/openapi/zz_generated.openapi.go").is_file():
        raise BuildError("openapi-gen wrote no pkg/generated/openapi/zz_generated.openapi.go")


def _ldflags() -> str:
    """The version the binaries report (`--version`, the API server's `/version`), in both
    packages upstream's hack/lib/version.sh sets it in."""
    pkgs = [
        f"k8s.io/kubernetes/vendor/k8s.io/{p}"
        for p in ("client-go/pkg/version", "component-base/version")
    ]
    major, minor = UPSTREAM_VERSION.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": UPSTREAM_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "archive",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    xs = [f"-X {pkg}.{k}={v}" for pkg in pkgs for k, v in values.items()]
    return " ".join(["-s", "-w", *xs])


def _run(argv: list[str], what: str, cwd: Path, env: Mapping[str, str] | None = None) -> None:
    try:
        p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except OSError as e:
        raise BuildError(f"{what}: {e}") from e
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-40:])
        raise BuildError(f"{what} exited {p.returncode}:\n{tail}")


def _rmtree(d: Path) -> None:
    # Go's module cache and extracted .debs have read-only directories
    for sub, dirs, _ in os.walk(d):
        for name in dirs:
            p = Path(sub) / name
            if not p.is_symlink():
                p.chmod(0o700)
    shutil.rmtree(d)
