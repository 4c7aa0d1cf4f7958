"""User-written steps: a team's own `command`, `playbook` and `http` steps, usable wherever a
built-in action is (baseline setup, inject, a recovery step's actions).

Nothing from a scenario reaches a shell or a template engine: a command is an argv list, a
playbook's extra variables reach Ansible tagged `!unsafe`, and an HTTP step's URL is a node's URL
and a path. runner.run.stepexec carries them out; these are the models and the checks that need
only the scenario file.

An injected (or baseline setup) user step may carry `undo:` (a user step without an undo of its
own), run at cleanup and journalled before the step runs. Without one, cleanup re-applies the
lab's baseline where a node's configuration differs from it.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from runner.errors import ScenarioError
from runner.spec.patterns import compile_user
from runner.spec.yamlsrc import Source

MAX_TIMEOUT_S = 3600.0
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


def _regex(v: str) -> str:
    compile_user(v)  # RE2, as every scenario regex
    return v


class CommandStep(_Model):
    """Run a program (an argv list, no shell) in the scenario's folder, with the lab's facts in
    its environment (GAMEDAY_NODE_<NAME>_URL, ...). `timeout_s` is real seconds, not scaled."""

    kind: Literal["command"]
    name: str = ""
    argv: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = 60.0
    expect_exit: int = 0
    expect_output: list[
        Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(_regex)]
    ] = Field(default=[], description="RE2 regexes that must each match stdout+stderr.")
    env: dict[Annotated[str, Field(pattern=ENV_NAME)], str] = {}

    @field_validator("argv", mode="before")
    @classmethod
    def _a_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            raise ValueError("argv is a list: [prog, arg, ...]; no shell")
        return v


class PlaybookStep(_Model):
    """Run the team's Ansible playbook (relative to the scenario's folder) through ansible-runner
    against the lab's inventory. Extra variables are data, never templates."""

    kind: Literal["playbook"]
    name: str = ""
    playbook: Annotated[str, Field(min_length=1)]
    limit: str = ""
    tags: list[Annotated[str, Field(min_length=1)]] = []
    skip_tags: list[Annotated[str, Field(min_length=1)]] = []
    extra_vars: dict[str, Any] = {}
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = 600.0


class HttpMethod(enum.StrEnum):
    GET = "GET"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


class HttpStep(_Model):
    """An HTTP request to a node's API (its URL + `path`), e.g. an admin endpoint."""

    kind: Literal["http"]
    name: str = ""
    method: HttpMethod = HttpMethod.GET
    node: str | None = None  # default: the scenario's target
    path: Annotated[str, Field(pattern=r"^/")]
    json_body: Any = Field(default=None, alias="json")
    headers: dict[str, str] = {}
    expect_status: int = 200
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = 30.0


UndoStep = Annotated[CommandStep | PlaybookStep | HttpStep, Field(discriminator="kind")]
AnyUndoStep = CommandStep | PlaybookStep | HttpStep


class Command(CommandStep):
    undo: UndoStep | None = Field(
        default=None,
        description="In inject or baseline.setup: run at cleanup to undo this step.",
    )


class Playbook(PlaybookStep):
    undo: UndoStep | None = Field(
        default=None,
        description="In inject or baseline.setup: run at cleanup to undo this step.",
    )


class Http(HttpStep):
    undo: UndoStep | None = Field(
        default=None,
        description="In inject or baseline.setup: run at cleanup to undo this step.",
    )


UserStep = Command | Playbook | Http
AnyUserStep = UserStep | AnyUndoStep
USER_STEP_KINDS = ("command", "playbook")  # "http" is already a registered tag (a probe's)


def describe_user_step(step: AnyUserStep) -> str:
    """One line: `command ./fix.sh --node serving (timeout 60 s)`."""
    label = f"{step.name}: " if step.name else ""
    if isinstance(step, CommandStep):
        what = "command " + " ".join(step.argv)
    elif isinstance(step, PlaybookStep):
        what = f"playbook {step.playbook}"
        what += f" --limit {step.limit}" if step.limit else ""
        what += f" --tags {','.join(step.tags)}" if step.tags else ""
        what += f" --skip-tags {','.join(step.skip_tags)}" if step.skip_tags else ""
    else:
        what = f"http {step.method.value} {step.node or 'target'}{step.path}"
        what += f" (expect {step.expect_status}"
        return f"{label}{what}, timeout {step.timeout_s:g} s)"
    return f"{label}{what} (timeout {step.timeout_s:g} s)"


def is_url(ref: str) -> bool:
    return urlparse(ref).scheme in ("http", "https")


def check_files(src: Source, path: Path, data: Any) -> None:
    """ScenarioError (file:line, field) for a playbook or a relative `runbook:` path that does not
    exist beside the scenario (`..` allowed: a team's runbooks live elsewhere in its repository).
    `data` is the validated Scenario; read duck-typed to keep this module below
    runner.spec.scenario."""
    folder = path.parent
    refs = _section_refs((), data)
    for kind, lab_variant in data.per_lab.items():
        refs += _section_refs(("per_lab", kind.value), lab_variant)
    for era, vllm_variant in data.per_vllm.items():
        refs += _section_refs(("per_vllm", str(era)), vllm_variant)
        for kind, both in vllm_variant.per_lab.items():
            refs += _section_refs(("per_vllm", str(era), "per_lab", kind.value), both)
    for platform, on_platform in data.per_platform.items():
        refs += _section_refs(("per_platform", platform.value), on_platform)
    for loc, ref, what in refs:
        file = folder / ref.split("#", 1)[0]  # a runbook's section: runbooks/kv.md#raise
        if not file.exists():
            raise ScenarioError(
                f"{what} {ref!r} does not exist (looked for {file.resolve()})",
                file=path,
                line=src.line_of(loc),
                field=".".join(map(str, loc)),
                hint=f"a {what} path is relative to the scenario's folder",
            )


def _section_refs(prefix: tuple[Any, ...], sections: Any) -> list[tuple[tuple[Any, ...], str, str]]:
    """The files named in one set of sections: the scenario's own, or a per_lab/per_vllm entry's
    (where a section not replaced is None)."""
    refs: list[tuple[tuple[Any, ...], str, str]] = []
    if sections.baseline is not None:
        for i, action in enumerate(sections.baseline.setup):
            refs += _playbooks((*prefix, "baseline", "setup", i), action)
    for i, action in enumerate(sections.inject or []):
        refs += _playbooks((*prefix, "inject", i), action)
    for i, step in enumerate(sections.recover or []):
        if step.runbook and not is_url(step.runbook):
            refs.append(((*prefix, "recover", i, "runbook"), step.runbook, "runbook"))
        for j, action in enumerate(step.actions):
            refs += _playbooks((*prefix, "recover", i, "actions", j), action)
        for j, action in enumerate(step.reveal):
            refs += _playbooks((*prefix, "recover", i, "reveal", j), action)
    return refs


def _playbooks(loc: tuple[Any, ...], action: Any) -> list[tuple[tuple[Any, ...], str, str]]:
    out = []
    if isinstance(action, PlaybookStep):
        out.append(((*loc, "playbook"), action.playbook, "playbook"))
    undo = getattr(action, "undo", None)
    if isinstance(undo, PlaybookStep):
        out.append(((*loc, "undo", "playbook"), undo.playbook, "playbook"))
    return out
