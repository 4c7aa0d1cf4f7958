"""The scenario format (`apiVersion: gameday/v1`, `kind: Scenario`).

A scenario says: on these labs, with service at baseline (after an optional setup), inject this;
expect this failure signature, exit code, state and phase within this time; expect these alerts;
then walk these recovery steps (each expected to restore service, or expected NOT to: the tempting
shortcut) and verify service is back, health *and* a real inference, within this time.

Windows are in real-world seconds: what the failure takes on real GPUs. A lab that runs faster
converts them with its time scale (see runner.spec.timing).

`gameday schema` exports these models as JSON Schema for editors.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import pydantic
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from runner.errors import ScenarioError
from runner.spec.actions import Action, Rollback, ScrapeTargets
from runner.spec.expectations import Detection, Expectation, RecoveryStep, TriageSignature
from runner.spec.kinds import (
    API_VERSION,
    MAX_WINDOW_S,
    LabKind,
    Metadata,
    Model,
    Outcome,
    RestartPolicy,
    Window,
)
from runner.spec.probes import AnyProbe, Probe, PromQLProbe, TargetsProbe
from runner.spec.usersteps import check_files
from runner.spec.workload import Load
from runner.spec.yamlsrc import load
from vllmfacts.wording import Era, Platform

# vLLM releases no lab engine speaks, as per_vllm names them to date a wording: one release
# (`0.9.0`) or a range, both ends included (`0.2.7-0.10.2`), each end a release whose source was
# read, so a range claims no more than was seen
RELEASES = r"^\d+\.\d+\.\d+(?:\.\d+)?(?:-\d+\.\d+\.\d+(?:\.\d+)?)?$"


def _vllm_key(v: Any) -> Era | str:
    v = version_text(v)
    if isinstance(v, str):
        if v in set(Era):
            return Era(v)
        if re.fullmatch(RELEASES, v):
            return v
    raise ValueError(
        f"Input should be {' or '.join(repr(e.value) for e in Era)} (a version the labs run), "
        "or vLLM releases no lab runs ('0.9.0', '0.2.7-0.10.2')"
    )


VllmKey = Annotated[Era | str, BeforeValidator(_vllm_key)]


def _setup_action(action: Any) -> Any:
    if isinstance(action, Rollback):
        raise ValueError(
            "rollback in baseline.setup has nothing to roll back: setup brings the target from "
            "the lab's baseline to the scenario's starting configuration"
        )
    return action


SetupAction = Annotated[Action, AfterValidator(_setup_action)]


class Baseline(Model):
    """The steady state before the injection. `setup` brings the target from the lab's own
    baseline to the scenario's starting configuration (another model, another build) first:
    its changes are journalled and undone at cleanup like the injection's, and the probes then
    judge that configuration, so a reference recorded here (the correctness probe's) is the
    healthy answer of what the scenario breaks."""

    setup: list[SetupAction] = Field(
        default=[],
        description="Actions (the kinds inject takes, rollback excepted) applied before the "
        "baseline probes; journalled and undone at cleanup like the injection.",
    )
    probes: Annotated[list[Probe], Field(min_length=1)]


class Verification(Model):
    probes: Annotated[list[Probe], Field(min_length=1)]
    time_to_recover: Window


class Hint(Model):
    """A hint a drill gives the people recovering the lab (`gameday drill`)."""

    text: Annotated[str, Field(min_length=1, max_length=2000)]
    after_s: Annotated[float | None, Field(ge=0, le=MAX_WINDOW_S)] = Field(
        default=None,
        description="Wall-clock seconds after the hand-over when the drill releases it; "
        "null: only when someone asks for a hint.",
    )


# the sections a variant (per_lab, per_vllm, per_platform) may replace, whole
SECTIONS = frozenset(
    ("target", "baseline", "inject", "expect", "detect", "recover", "verify", "hints")
)


class LabVariant(Model):
    """What differs on one kind of lab, in the same file (`per_lab: {kubernetes: {...}}`): each
    section given here replaces the scenario's own section of that name, whole, on that lab kind;
    the sections not given are shared. Whole sections, never a deep merge: what a lab runs is
    always readable in one place."""

    EMPTY: ClassVar[str] = (
        "a per_lab entry replaces at least one section: target, baseline, inject, expect, "
        "detect, recover, verify or hints"
    )

    target: str | None = None
    baseline: Baseline | None = None
    inject: Annotated[list[Action] | None, Field(min_length=1)] = None
    expect: Expectation | None = None
    detect: Detection | None = None
    recover: Annotated[list[RecoveryStep] | None, Field(min_length=1)] = None
    verify: Verification | None = None
    hints: list[Hint] | None = None

    @model_validator(mode="after")
    def _some(self) -> LabVariant:
        if self._replaces_nothing():
            raise ValueError(self.EMPTY)
        if self.recover is not None and not any(
            s.outcome is Outcome.RESTORES for s in self.recover
        ):
            raise ValueError("recover needs at least one step with outcome: restores")
        return self

    def _replaces_nothing(self) -> bool:
        return not self.sections()

    def sections(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in sorted(self.model_fields_set) if k in SECTIONS}


class VllmVariant(LabVariant):
    """What differs on a lab whose engine is another vLLM version (`per_vllm: {"0.33": {...}}`,
    the inventory's `gameday_lab.vllm_version`): the same whole-section rules as per_lab, plus a
    `note` that says what that vLLM really prints and where in its source, since an expectation
    changed for one version is a claim about vLLM that a reader must be able to check."""

    EMPTY: ClassVar[str] = (
        "a per_vllm entry replaces at least one section (target, baseline, inject, expect, "
        "detect, recover, verify or hints) or has a per_lab"
    )

    note: Annotated[str, Field(min_length=1, max_length=4000)] = Field(
        description="What this vLLM version prints instead, and why (its source file and "
        "function): shown in the plan and the report."
    )
    per_lab: dict[LabKind, LabVariant] = Field(
        default={},
        description="Sections that differ on one kind of lab running this vLLM version: the "
        "most specific replacement, over this entry's own sections and the scenario's per_lab.",
    )

    def _replaces_nothing(self) -> bool:
        return not self.sections() and not self.per_lab


class PlatformVariant(LabVariant):
    """What differs on a lab whose vLLM runs on another platform (`per_platform: {cpu: {...}}`,
    the inventory's `gameday_lab.platform`): the same whole-section rules, plus a `note` citing
    the vLLM source of each difference, since the platform's own classes print other lines for
    the same failure (vllm/platforms/cpu.py, vllm/v1/worker/cpu_worker.py)."""

    EMPTY: ClassVar[str] = (
        "a per_platform entry replaces at least one section: target, baseline, inject, expect, "
        "detect, recover, verify or hints"
    )

    note: Annotated[str, Field(min_length=1, max_length=4000)] = Field(
        description="What vLLM on this platform prints instead, and where in its source: "
        "shown in the plan and the report."
    )


class Resolved(Model):
    """Where each replaced section of a scenario came from, for one lab kind, vLLM version and
    platform: section -> `per_lab.<kind>`, `per_vllm.<version>` or `per_platform.<platform>`."""

    origins: dict[str, str] = {}
    note: str | None = None  # the per_vllm entry's note, when one applies
    platform_note: str | None = None  # the per_platform entry's, when one applies


def version_text(v: Any) -> Any:
    """A vLLM version as YAML reads it unquoted (0.33 is a float) -> its text, "0.33"."""
    return repr(v) if isinstance(v, float) else v


def reads_prometheus(probes: Sequence[AnyProbe], actions: Sequence[Action]) -> bool:
    """Whether these probes or actions read or change Prometheus (a PromQL or targets probe, a
    scrape-config change)."""
    return any(isinstance(p, TargetsProbe | PromQLProbe) for p in probes) or any(
        isinstance(a, ScrapeTargets) for a in actions
    )


class Scenario(Model):
    api_version: Literal["gameday/v1"] = Field(alias="apiVersion")
    kind: Literal["Scenario"]
    metadata: Metadata
    labs: Annotated[list[LabKind], Field(min_length=1)]
    lab_notes: dict[LabKind, str] = {}
    target: str = "serving"
    target_restart: list[RestartPolicy] = Field(
        default=[],
        description="The restart policies of the target this scenario is about (empty: any). "
        "On a lab whose target restarts otherwise the scenario is not run: `not on this lab`.",
    )
    baseline: Baseline
    inject: Annotated[list[Action], Field(min_length=1)]
    expect: Expectation
    detect: Detection = Detection()
    recover: Annotated[list[RecoveryStep], Field(min_length=1)]
    verify: Verification
    hints: list[Hint] = Field(
        default=[], description="Hints for a drill, in the order they are given (gameday drill)."
    )
    load: Load | None = Field(
        default=None,
        description="Users' traffic from the baseline through verify, and the impact it may "
        "show per phase (runner.spec.workload).",
    )
    per_lab: dict[LabKind, LabVariant] = Field(
        default={},
        description="Sections that differ on one kind of lab (e.g. a restart policy that "
        "behaves otherwise on Kubernetes), each replacing the shared section whole.",
    )

    per_vllm: dict[VllmKey, VllmVariant] = Field(
        default={},
        description="Sections that differ on a lab whose engine is another vLLM version (the "
        "inventory's gameday_lab.vllm_version), each replacing the shared section whole, with a "
        "note on what that vLLM prints. Over per_lab where both replace a section. A key that "
        "names releases no lab runs (`0.2.7-0.10.2`, `0.9.0`) holds only an `expect`: those "
        "releases' wording of the failure, for `gameday triage`, which names the releases.",
        json_schema_extra={
            "propertyNames": {"anyOf": [{"enum": list(Era)}, {"pattern": RELEASES}]}
        },
    )
    triage: list[TriageSignature] = Field(
        default=[],
        description="The same fault as logs outside the scenario's run show it, for `gameday "
        "triage` only: each with when it shows so and a note citing the vLLM source.",
    )
    per_platform: dict[Platform, PlatformVariant] = Field(
        default={},
        description="Sections that differ on a lab whose vLLM runs on another platform (the "
        "inventory's gameday_lab.platform: gpu or cpu), each replacing the shared section whole, "
        "with a note citing the vLLM source. The most specific: over per_vllm and per_lab.",
    )

    @field_validator("load", mode="before")
    @classmethod
    def _load_given(cls, v: Any) -> Any:
        """`load:` with nothing under it is a section cut short or left unfinished, not "no
        load": leaving the key out says that."""
        if v is None:
            raise ValueError("empty: give its rate or concurrency, or leave the section out")
        return v

    @field_validator("per_vllm", mode="before")
    @classmethod
    def _yaml_number_keys(cls, v: Any) -> Any:
        return {version_text(k): e for k, e in v.items()} if isinstance(v, dict) else v

    @field_validator("per_vllm")
    @classmethod
    def _wordings_only_expect(cls, v: dict[Era | str, VllmVariant]) -> dict[Era | str, VllmVariant]:
        """An entry for releases no lab runs is never run: it says how those releases word
        the failure, and nothing a run would do."""
        for key, entry in v.items():
            if isinstance(key, Era):
                continue
            if set(entry.sections()) != {"expect"} or entry.per_lab:
                raise ValueError(
                    f"per_vllm.{key} names releases no lab runs: it holds a note and an expect "
                    "(those releases' wording of the failure, for triage), nothing else"
                )
        return v

    def wordings(self) -> dict[str, VllmVariant]:
        """The per_vllm entries for releases no lab runs (triage reads their signatures)."""
        return {str(k): e for k, e in self.per_vllm.items() if not isinstance(k, Era)}

    def for_lab(
        self, kind: LabKind, vllm: Era = Era.V0_19, platform: Platform = Platform.GPU
    ) -> Scenario:
        """The scenario as it runs on a lab of this kind whose engine is this vLLM version: its
        per_lab sections for the kind, then its per_vllm sections for the version, in place of
        the shared ones, then the version's own per_lab sections for the kind. The more specific
        wins a section several replace: per_vllm over per_lab, since it is written against the
        words the engine prints, which a per_lab section written for another version would
        assert wrongly; a section that must differ on both axes goes in
        per_vllm.<version>.per_lab.<kind>. Last, per_platform.<platform>: a platform prints its
        own lines whatever the lab kind, so it wins over both."""
        update = self._variant_sections(kind, vllm, platform)
        return self.model_copy(update=update) if update else self

    def _variants(
        self, kind: LabKind, vllm: Era, platform: Platform = Platform.GPU
    ) -> list[tuple[str, LabVariant]]:
        """The variants that apply, least specific first: per_lab.<kind>, per_vllm.<version>,
        per_vllm.<version>.per_lab.<kind>, per_platform.<platform>."""
        out: list[tuple[str, LabVariant]] = []
        if (lab_variant := self.per_lab.get(kind)) is not None:
            out.append((f"per_lab.{kind.value}", lab_variant))
        if (vllm_variant := self.per_vllm.get(vllm)) is not None:
            out.append((f"per_vllm.{vllm.value}", vllm_variant))
            if (both := vllm_variant.per_lab.get(kind)) is not None:
                out.append((f"per_vllm.{vllm.value}.per_lab.{kind.value}", both))
        if (on_platform := self.per_platform.get(platform)) is not None:
            out.append((f"per_platform.{platform.value}", on_platform))
        return out

    def _variant_sections(
        self, kind: LabKind, vllm: Era, platform: Platform = Platform.GPU
    ) -> dict[str, Any]:
        update: dict[str, Any] = {}
        for _, variant in self._variants(kind, vllm, platform):
            update |= variant.sections()
        return update

    def resolved(
        self, kind: LabKind, vllm: Era = Era.V0_19, platform: Platform = Platform.GPU
    ) -> Resolved:
        """Which sections a lab of this kind running this vLLM on this platform takes from which
        variant."""
        origins: dict[str, str] = {}
        for origin, variant in self._variants(kind, vllm, platform):
            origins |= dict.fromkeys(variant.sections(), origin)
        vllm_variant = self.per_vllm.get(vllm)
        on_platform = self.per_platform.get(platform)
        return Resolved(
            origins=dict(sorted(origins.items())),
            note=" ".join(vllm_variant.note.split()) if vllm_variant is not None else None,
            platform_note=" ".join(on_platform.note.split()) if on_platform else None,
        )

    @model_validator(mode="after")
    def _masks_needs_probes(self) -> Scenario:
        if any(s.outcome is Outcome.MASKS for s in self.recover) and not self.expect.probes:
            raise ValueError(
                "a step that `masks` shows the fault back with the expectation's probes: "
                "expect.probes must not be empty"
            )
        return self

    @model_validator(mode="after")
    def _rollback_keeps_setup(self) -> Scenario:
        """A `rollback` puts back every change of the run, the baseline's setup included: the
        target would leave the scenario's starting configuration (another model, another build)
        and every later probe would judge that instead."""
        for kind, vllm, platform in itertools.product(self.labs, Era, Platform):
            sc = self.for_lab(kind, vllm, platform)
            if not sc.baseline.setup:
                continue
            for i, step in enumerate(sc.recover):
                if any(isinstance(a, Rollback) for a in (*step.actions, *step.reveal)):
                    where = "".join(sc_origin(self, kind, vllm, "recover", platform))
                    raise ValueError(
                        f"recover[{i}] ({step.name!r}{where}) rolls back, which also undoes "
                        "baseline.setup: put back what inject changed with set_args / "
                        "set_env (or a restart) instead"
                    )
        return self

    def replaced_on(
        self, kind: LabKind, vllm: Era = Era.V0_19, platform: Platform = Platform.GPU
    ) -> list[str]:
        """The sections a lab of this kind running this vLLM on this platform takes from
        per_lab, per_vllm or per_platform."""
        return list(self.resolved(kind, vllm, platform).origins)

    @property
    def uses_monitoring(self) -> bool:
        """Whether the scenario reads or changes Prometheus (alerts, PromQL or target probes,
        a scrape-config change): the lab's monitoring must be scraping before its injection
        (before its baseline, where the baseline itself reads it)."""
        probes = [
            *self.baseline.probes,
            *self.expect.probes,
            *self.verify.probes,
        ]
        actions = [
            *self.baseline.setup,
            *self.inject,
            *(a for step in self.recover for a in (*step.actions, *step.reveal)),
        ]
        return bool(self.detect.alerts) or reads_prometheus(probes, actions)

    @model_validator(mode="after")
    def _recovers(self) -> Scenario:
        if not any(s.outcome is Outcome.RESTORES for s in self.recover):
            raise ValueError("recover needs at least one step with outcome: restores")
        kinds = [("per_lab", kind) for kind in self.per_lab]
        kinds += [
            (f"per_vllm.{v}.per_lab", kind)
            for v, variant in self.per_vllm.items()
            for kind in variant.per_lab
        ]
        for where, kind in kinds:
            if kind not in self.labs:
                raise ValueError(
                    f"{where} names {kind.value}, which is not in labs "
                    f"({', '.join(k.value for k in self.labs)}): add it to labs or remove the "
                    "entry"
                )
        return self


def sc_origin(
    sc: Scenario, kind: LabKind, vllm: Era, section: str, platform: Platform = Platform.GPU
) -> list[str]:
    """The origin of `section` on this lab ("per_lab.<kind>", "per_vllm.<v>",
    "per_platform.<p>"), if a variant."""
    origin = sc.resolved(kind, vllm, platform).origins.get(section)
    return [f" from {origin}"] if origin else []


def variant_notes(
    sc: Scenario, kind: LabKind, vllm: Era, platform: Platform = Platform.GPU
) -> list[str]:
    """The report's lines on which sections the lab runs from per_lab, per_vllm and
    per_platform, and those entries' notes on what that vLLM prints."""
    resolved = sc.resolved(kind, vllm, platform)
    by_origin: dict[str, list[str]] = {}
    for section, origin in resolved.origins.items():
        by_origin.setdefault(origin, []).append(section)
    notes = []
    for origin, sections in by_origin.items():
        who = f"{kind.value} lab" if origin.startswith("per_lab.") else f"vLLM {vllm.value} lab"
        if origin.count("per_lab.") and origin.startswith("per_vllm."):
            who = f"{kind.value} lab on vLLM {vllm.value}"
        if origin.startswith("per_platform."):
            who = f"vLLM on {platform.value.upper()}"
        notes.append(f"{who}: runs its own {', '.join(sections)} ({origin})")
    if resolved.note and any(o.startswith("per_vllm.") for o in by_origin):
        notes.append(f"per_vllm.{vllm.value} note: {resolved.note}")
    if resolved.platform_note and any(o.startswith("per_platform.") for o in by_origin):
        notes.append(f"per_platform.{platform.value} note: {resolved.platform_note}")
    return notes


class LoadedScenario(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    path: Path
    scenario: Scenario

    def for_lab(
        self, kind: LabKind, vllm: Era = Era.V0_19, platform: Platform = Platform.GPU
    ) -> LoadedScenario:
        """The scenario as a lab of this kind running this vLLM on this platform runs it
        (Scenario.for_lab)."""
        sc = self.scenario.for_lab(kind, vllm, platform)
        return self if sc is self.scenario else self.model_copy(update={"scenario": sc})


HINT = "see docs/scenario-format.md 'Scenario format' or run `gameday schema` for the full format"


def load_scenario(path: Path) -> LoadedScenario:
    # a scenario names programs too (command and playbook steps): another user's, or one others
    # can write, is refused as a planted configuration is
    src = load(path, ScenarioError, "scenario", trusted=True)
    if not isinstance(src.data, dict):
        raise ScenarioError(
            "a scenario is a mapping with apiVersion, kind, metadata, ...",
            file=path,
            line=1,
            hint=HINT,
        )
    if src.data.get("apiVersion") != API_VERSION:
        raise ScenarioError(
            f"apiVersion must be {API_VERSION!r} (got {src.data.get('apiVersion')!r})",
            file=path,
            line=src.line_of(("apiVersion",)),
            field="apiVersion",
            hint=HINT,
        )
    try:
        sc = Scenario.model_validate(src.data)
    except pydantic.ValidationError as exc:
        raise src.validation_error(exc, ScenarioError, HINT) from None
    check_files(src, path, sc)
    return LoadedScenario(path=path, scenario=sc)


def discover(paths: list[Path]) -> list[Path]:
    """Scenario files named on the command line; a directory means its *.yaml files."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(q for q in p.glob("*.y*ml") if q.suffix in (".yaml", ".yml"))
        else:
            out.append(p)
    return out


def json_schema() -> dict[str, Any]:
    schema = Scenario.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://gameday.dev/schema/scenario-v1.json"
    return schema
