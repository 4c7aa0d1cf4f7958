"""Triage of other releases' wordings (per_vllm entries for releases no lab runs), of pastes cut
short, and of PyTorch's c10 prefixes in every month and form."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import re2
from click.testing import CliRunner

from runner.cli.main import main
from runner.errors import ScenarioError
from runner.spec.scenario import Scenario, discover, load_scenario
from runner.triage import triage
from runner.triage.cut import MIN_LITERAL, cut_pattern
from runner.triage.match import Log
from runner.triage.normalise import normalise

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]

V0_KV = (
    "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
    "that can be stored in KV cache (16176). Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine.\n"
)
LOST_ESTIMATE = (
    "ValueError: To serve at least one request with the models's max seq len (16384), (3.00 GiB "
    "KV cache is needed, which is larger than the available KV cache memory (0.18 GiB). Based on "
    "the available memory,  Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine.\n"
)
PRE_18209 = (
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/envs.py", line 217, in <lambda>\n'
    "    lambda: int(os.getenv('VLLM_PORT', '0'))\n"
    "ValueError: invalid literal for int() with base 10: 'tcp://10.43.1.39:8000'\n"
)
CURRENT_019 = (
    "(EngineCore pid=81) ValueError: To serve at least one request with the models's max seq len "
    "(16384), (3.0 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(0.18 GiB). Based on the available memory, the estimated maximum model length is 976. Try "
    "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
    "engine.\n"
)


def one(text: str) -> tuple[str, tuple[str, ...], bool, tuple[str, ...]]:
    [f] = triage(text, SCEN)
    return f.scenario.scenario.metadata.id, f.releases, f.cut, f.advice


def test_each_dated_wording_names_its_releases() -> None:
    assert one(V0_KV)[:3] == ("kv-cache-shortage", ("0.2.7-0.10.2",), False)
    assert one(LOST_ESTIMATE)[:3] == ("kv-cache-shortage", ("0.8.3-0.9.0",), False)
    no_estimate = LOST_ESTIMATE.replace(" Based on the available memory,  Try", " Try")  # 0.8.3
    assert one(no_estimate)[:3] == ("kv-cache-shortage", ("0.8.3-0.9.0",), False)
    in_gb = LOST_ESTIMATE.replace(" GiB", " GB").replace(" Based on the available memory, ", "")
    assert one(in_gb)[:3] == ("kv-cache-shortage", ("0.7.0-0.8.2",), False)
    assert one(PRE_18209)[:3] == ("service-name-collision", ("0.6.0-0.8.5",), False)
    valid_int = "ValueError: VLLM_PORT 'tcp://10.96.211.4:8000' must be a valid integer\n"
    assert one(valid_int)[:3] == ("service-name-collision", ("0.9.0",), False)
    # the wording of the releases the labs run is not dated
    assert one(CURRENT_019)[:3] == ("kv-cache-shortage", (), False)


def test_advice_for_the_release_that_printed_it() -> None:
    # V0 words the shortage in tokens: its own capacity is the length that fits
    assert one(V0_KV)[3] == (
        "--max-model-len 16176 fits the KV cache the V0 engine allocated (the message's own "
        "figure: 16176 tokens)",
        "--max-model-len 32768 needs 2.03x the KV cache it got: give the KV cache that much more "
        "memory (--gpu-memory-utilization)",
    )
    cpu = V0_KV.replace("`gpu_memory_utilization`", "`VLLM_CPU_KVCACHE_SPACE`")
    assert one(cpu)[3][1].endswith("(VLLM_CPU_KVCACHE_SPACE)")
    # 0.8.3-0.9.0 lost the estimate but not the figures: the GiB advice still holds
    assert one(LOST_ESTIMATE)[3][0].startswith("--max-model-len 976 fits the 0.18 GiB")


def test_pythons_own_int_error_alone_is_any_programs() -> None:
    assert triage(PRE_18209.splitlines()[-1] + "\n", SCEN) == []


def test_a_message_cut_part_way_is_named_and_said_cut() -> None:
    cut = CURRENT_019[:150] + "\n"  # "...(3.0 GiB KV cache is needed, which is lar"
    assert one(cut)[:3] == ("kv-cache-shortage", (), True)
    # hard-wrapped, its first line alone
    wrapped = CURRENT_019[:95] + "\n" + CURRENT_019[95:140] + "\n"
    assert one(wrapped)[:3] == ("kv-cache-shortage", (), True)
    # "models's max seq len (16384), (3.0" is enough; "...max seq len (16384)" is too little
    assert one(CURRENT_019[:105] + "\n")[:3] == ("kv-cache-shortage", (), True)
    assert triage(CURRENT_019[:99] + "\n", SCEN) == []


def test_a_traceback_ending_at_the_raise_is_named_and_said_cut() -> None:
    frame = (
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/envs.py", line 449, in '
        "get_vllm_port\n    raise ValueError(\n"
    )
    assert one(frame)[:3] == ("service-name-collision", (), True)
    # the exception after it: not cut, and this line alone is no VLLM_PORT failure
    assert triage(frame + "ValueError: bad\n", SCEN) == []
    # another program's raise
    other = frame.replace("vllm/envs.py", "app/settings.py")
    assert triage(other, SCEN) == []


def test_a_traceback_ending_at_the_call_into_a_check_is_named_and_said_cut() -> None:
    frame = (
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line '
        "1110, in get_kv_cache_config\n"
        "    ok = check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)\n"
    )
    carets = "         " + "^" * 30 + "\n"
    [f] = triage(frame + carets, SCEN)
    assert (f.scenario.scenario.metadata.id, f.cut) == ("kv-cache-shortage", True)
    assert f.sightings[0].cut == "call"
    # the exception after the carets, a KeyboardInterrupt among them: the traceback is whole
    assert triage(frame + carets + "TypeError: unsupported operand\n", SCEN) == []
    assert triage(frame + "KeyboardInterrupt\n", SCEN) == []
    # another library's function of that name
    assert triage(frame.replace("/vllm/", "/kvtools/"), SCEN) == []
    # a call into a function that is no check: the frame inside it could raise anything
    assert triage(frame.replace("check_enough_kv_cache_memory", "get_kv_cache_spec"), SCEN) == []


def test_a_cut_keeps_enough_of_the_message() -> None:
    sc = load_scenario(ROOT / "scenarios" / "service-name-collision.yaml").scenario
    assert sc.expect.signature is not None
    [rx] = [p.regex for p in sc.expect.signature.in_order if p.identifies]
    cut = cut_pattern(rx)
    assert cut is not None
    regex, shortest = cut
    # the named groups opened up: cut inside them too, MIN_LITERAL literal characters kept
    assert shortest == r"(?:VLLM_PORT 'tcp://[^':\s]+:\d+' appe)"
    assert MIN_LITERAL == 24
    ok = "VLLM_PORT 'tcp://10.43.1.39:8000' appears to be a URI. This may be caused by a Kube"
    assert re.search(regex, ok) and re.search(regex, ok[:38])
    assert not re.search(regex, ok[:36])  # "...:8000' app": too little
    assert not re.search(regex, ok + "rnetes service discovery issue")  # the whole is no cut
    assert not re.search(regex, ok + " and then")  # it must end where the paste does
    # or a quotation holds it, in part, inside the writer's own words
    for quoted in (
        f'the log said "{ok[:60]}" and',
        f"\u6709\u201c{ok[:40]}\u201d\u3002",
        f"'{ok[:50]}', ",
    ):
        assert re2.search(regex, quoted), quoted  # on RE2, as triage reads it
    for unquoted in (f"the log said {ok[:60]}' and", f'the log said "{ok[:60]} and"'):
        assert not re2.search(regex, unquoted), unquoted
    # or an ellipsis in its middle, where the writer left words out and went on
    assert re2.search(regex, f"{ok[:40]} ... service discovery issue")
    assert re2.search(regex, f"{ok[:40]}... and so on")
    assert not re2.search(regex, f"{ok[:36]} ... service discovery issue")  # too little
    # a pattern with too little literal text gives none
    assert cut_pattern(r"\d+ [\w.]+") is None


def test_a_quoted_name_is_no_message_cut_short() -> None:
    # a JSON log's target is the pattern's first 24 literal characters, quoted, with no words
    cut = cut_pattern(r"text_generation_launcher: Shard \d+ crashed")
    assert cut is not None
    regex, _ = cut
    logged = '{"fields":{"message":"Shutting down shards"},"target":"text_generation_launcher"}'
    assert not re2.search(regex, logged)
    assert re2.search(regex, 'the launcher said "text_generation_launcher: Shard 0" and')
    assert re2.search(regex, "text_generation_launcher: Shard")  # cut at the paste's end
    # nor in the lines joined with nothing, where every space is optional
    colon = logged.replace('launcher"}', 'launcher:"}')
    assert triage(logged + "\n", SCEN) == [] and triage(colon + "\n", SCEN) == []


def test_the_view_and_json_say_releases_and_cut(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(V0_KV)
    out = CliRunner().invoke(main, ["triage", str(log)]).output
    assert "  wording of vLLM 0.2.7-0.10.2: The V0 engine words the shortage by tokens" in out
    [entry] = json.loads(CliRunner().invoke(main, ["triage", "--json", str(log)]).output)
    [f] = entry["findings"]
    assert (f["releases"], f["cut"]) == (["0.2.7-0.10.2"], False)
    assert f["views"][0]["releases_note"].startswith("The V0 engine words the shortage by tokens")
    log.write_text(CURRENT_019[:150] + "\n")
    out = CliRunner().invoke(main, ["triage", str(log)]).output
    assert "  the paste is cut: the message stops part way" in out
    [entry] = json.loads(CliRunner().invoke(main, ["triage", "--json", str(log)]).output)
    assert entry["findings"][0]["cut"] is True
    assert entry["findings"][0]["views"][0]["cut"] == "message"


@pytest.mark.parametrize(
    "prefix",
    [
        "[rank2]:[W109 08:05:07.983353369 ProcessGroupNCCL.cpp:1826] ",  # January, rank set
        "[rank2]:[W930 22:41:05.114502337 ProcessGroupNCCL.cpp:1826] ",  # September
        "[rank2]:[W1229 13:43:33.738075649 ProcessGroupNCCL.cpp:1826] ",  # December
        "[W604 13:43:33.738075649 ProcessGroupNCCL.cpp:1826] ",  # no rank set
        "[rank2]:[W ProcessGroupNCCL.cpp:1263] ",  # no date
        "[E ProcessGroupNCCL.cpp:563] ",  # neither
    ],
)
def test_every_c10_prefix_names_the_worker(prefix: str) -> None:
    line = (
        f'{prefix}[PG 0 Rank 2] Failed to check the "should dump" flag on TCPStore, (maybe '
        "TCPStore server has shut down too early), with error: Broken pipe\n"
    )
    [f] = triage(line, SCEN)
    assert (f.scenario.scenario.metadata.id, f.sightings[0].view) == (
        "head-only-restart",
        "a worker's",
    )


def test_a_c10_line_starts_a_record_whatever_its_date() -> None:
    # a wrapped line's continuation is joined to it; a c10 line never is
    log = Log(normalise("EngineCore failed\n[W604 13:43:33.738075649 socket.cpp:955] x\n"))
    assert log.ends[0] == 1
    log = Log(normalise("EngineCore failed\n[E ProcessGroupNCCL.cpp:563] x\n"))
    assert log.ends[0] == 1


def test_an_entry_for_releases_no_lab_runs_holds_only_expect(tmp_path: Path) -> None:
    source = (ROOT / "scenarios" / "service-name-collision.yaml").read_text()
    bad = source.replace(
        '  "0.9.0":\n',
        '  "0.9.0":\n    hints: [{text: "read the integer message"}]\n',
    )
    (tmp_path / "s.yaml").write_text(bad)
    with pytest.raises(ScenarioError, match=r"per_vllm\.0\.9\.0 names releases no lab runs"):
        load_scenario(tmp_path / "s.yaml")
    (tmp_path / "s.yaml").write_text(source.replace('  "0.9.0":\n', '  "0.9":\n'))
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path / "s.yaml")  # neither an era a lab runs nor a release


def test_the_schema_offers_eras_and_releases_as_per_vllm_keys() -> None:
    names = Scenario.model_json_schema(by_alias=True)["properties"]["per_vllm"]["propertyNames"]
    enum, pattern = names["anyOf"]
    assert enum == {"enum": ["0.19", "0.33"]}
    assert all(re.fullmatch(pattern["pattern"], k) for k in ("0.9.0", "0.2.7-0.10.2", "0.10.1.1"))
    assert not any(re.fullmatch(pattern["pattern"], k) for k in ("0.9", "0.9.0-", "latest"))
