"""What every Ansible run of gameday's shares (the compose lab's host actions, a team's
`playbook` steps): ansible-playbook found beside this interpreter, and YAML that Ansible takes
as data, never as a template.

Ansible renders every string it is given as a Jinja template, and a template can run commands
(`lookup('pipe', ...)`). So nothing gameday hands Ansible is a template: extra variables and
inventories reach it as YAML tagged `!unsafe`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from runner.errors import LabError
from runner.fsutil import write_private
from runner.programs import resolve_command


def ansible_bin() -> str:
    """The directory holding ansible-playbook: beside this interpreter (Ansible is one of its
    packages), or on PATH."""
    found = resolve_command("ansible-playbook")
    if found:
        return str(Path(found).parent)
    raise LabError(
        "ansible-playbook is not installed (host actions run as Ansible playbooks)",
        hint="pip install ansible ansible-runner (make test and make run install them)",
    )


class _Unsafe(dict[str, Any]):
    """A mapping Ansible must take as data, every string in it included: written as `!unsafe`.
    The tag goes on the mapping, not on each string: Ansible resolves a tagged scalar's type
    again as if it were plain, which would turn the string "30" into a number."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


_UnsafeDumper.add_representer(_Unsafe, lambda d, v: d.represent_mapping("!unsafe", dict(v)))


def write_unsafe(path: Path, data: dict[str, Any]) -> None:
    """`data` as YAML Ansible reads as data only (owner-only file, folders 0700)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, yaml.dump(_Unsafe(data), Dumper=_UnsafeDumper, sort_keys=False))
