"""`vllm-lab`'s command line, in-process: the subcommands, and the argv the labs use."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from labengine import cli
from runner.spec.actions import GPU_PROCESS_NAMES, PROGRAMS, Program
from runner.spec.inventory import LabSpec
from runner.spec.inventory_load import load_inventory
from vllmfacts import serveflags
from vllmfacts.wording import Era

ROOT = Path(__file__).resolve().parents[3]


def parse(*argv: str, era: Era = Era.V0_19) -> tuple[dict[str, object], list[str]]:
    args, extra = cli.build_parser(era).parse_known_args(cli._normalise(list(argv)))
    return vars(args), extra


def test_compose_commands_are_serve_invocations() -> None:
    """Every engine command in compose/compose.yaml parses as `vllm-lab serve` with nothing
    left over (the compose image runs them as written), and the proxy's as `vllm-lab proxy`."""
    services = yaml.safe_load((ROOT / "compose" / "compose.yaml").read_text())["services"]
    commands = {
        name: s["command"]
        for name, s in services.items()
        if s.get("command", [""])[0] == "vllm-lab"
    }
    proxy = commands.pop("proxy")
    assert len(commands) == 7
    for command in commands.values():
        args, extra = parse(*command[1:])
        assert (args["run"], extra) == (cli._serve, [])
        assert args["model_tag"] == "Qwen/Qwen2.5-14B-Instruct-AWQ"
    args, extra = parse(*proxy[1:])
    assert (args["run"], extra) == (cli._proxy, [])
    assert (args["prefiller_hosts"], args["decoder_hosts"]) == (["prefill"], ["decode"])


def test_inventory_engine_commands_parse() -> None:
    """Each node's engine command (engine_command + its rendered args) parses, in every
    inventory that runs the stand-in (others run the real vLLM)."""
    found = 0
    for path in sorted((ROOT / "inventories").glob("*.yaml")):
        inv = load_inventory(path)
        if inv.lab.engine_command != ("vllm-lab", "serve"):
            continue
        for node in inv.nodes:
            program = node.program(inv.lab.engine_command)
            args, extra = parse(*program[1:], *node.rendered_args())
            want = cli._proxy if program == ("vllm-lab", "proxy") else cli._serve
            assert (args["run"], extra) == (want, []), (path.name, node.name)
            found += 1
    assert found >= 10


def test_the_runners_own_invocations() -> None:
    assert LabSpec.model_fields["engine_command"].default == ("vllm-lab", "serve")
    stray = PROGRAMS[Program.STRAY_GPU_PROCESS]
    assert stray == ("vllm-lab", "stray", "--name", "/omniparser/venv/bin/python")
    args, extra = parse(*stray[1:])
    assert (args["run"], args["name"], args["mib"], extra) == (
        cli._stray,
        GPU_PROCESS_NAMES[Program.STRAY_GPU_PROCESS],  # what the runner looks for in nvidia-smi
        1417,
        [],
    )
    args, extra = parse("smi", "--json")  # the compose driver's gpu_processes
    assert (args["run"], args["json"], extra) == (cli._smi, True, [])


def test_serve_flags_as_vllm_reads_them() -> None:
    args, extra = parse(
        "serve", "M", "--gpu_memory_utilization=0.5", "-tp", "2", "--max-model-len", "16k",
        "--headless", "--served-model-name", "a", "b",
    )  # fmt: skip
    assert extra == []
    assert (args["gpu_memory_utilization"], args["tensor_parallel_size"]) == (0.5, 2)
    assert (args["max_model_len"], args["headless"], args["served_model_name"]) == (
        16000,
        True,
        ["a", "b"],
    )


@pytest.mark.parametrize(("era", "default"), [(Era.V0_19, 0.9), (Era.V0_33, 0.92)])
def test_gpu_memory_utilization_default_by_era(era: Era, default: float) -> None:
    assert parse("serve", era=era)[0]["gpu_memory_utilization"] == default


@pytest.mark.parametrize(
    ("text", "tokens"), [("4096", 4096), ("16k", 16_000), ("1.5K", 1_500), ("1m", 1_000_000)]
)
def test_max_model_len_suffixes(text: str, tokens: int) -> None:
    assert serveflags._max_len(text) == tokens


def test_unknown_flag_is_reported_by_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["smi", "--no-such-flag"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "usage: vllm-lab smi [-h] [--json]\n"
        "vllm-lab smi: error: unrecognized arguments: --no-such-flag\n"
    )


def test_no_subcommand_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "vllm-lab: error: the following arguments are required: {serve,smi,stray,proxy,xid}"
    )


def test_smi_without_a_shared_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GAMEDAY_GPU_STATE", raising=False)
    assert cli.main(["smi", "--json"]) == 2
    assert capsys.readouterr().err == (
        "vllm-lab smi: GAMEDAY_GPU_STATE is not set (no shared GPU here)\n"
    )


def test_smi_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from vllmfacts.gpu import MIB, SharedGpu, gpu_types

    SharedGpu(tmp_path, gpu_types()["l4"]).allocate("VLLM::EngineCore", 20_000 * MIB)
    monkeypatch.setenv("GAMEDAY_GPU_STATE", str(tmp_path))
    monkeypatch.setenv("GAMEDAY_GPU", "l4")
    assert cli.main(["smi", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "gpu": "NVIDIA L4",
        "memory_mib": 23034,
        "used_mib": 20000,
        "processes": [{"pid": os.getpid(), "name": "VLLM::EngineCore", "mib": 20000}],
    }
