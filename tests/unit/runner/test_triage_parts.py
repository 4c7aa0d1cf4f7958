"""Triage's parts: the normaliser, the matcher across wrapped lines, the phase, the advice and
the command's output."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from runner.cli.main import main
from runner.cli.triage_view import fold
from runner.spec.scenario import discover, load_scenario
from runner.triage import normalise, phase_of, triage
from runner.triage.cut import cut_pattern
from runner.triage.match import Log, find, loose
from runner.triage.normalise import Line
from vllmfacts.startup import StartupPhase

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]
KV = next(ls for ls in SCEN if ls.scenario.metadata.id == "kv-cache-shortage")
KV033 = (
    "(EngineCore_DP0 pid=90) ValueError: To serve at least one request with the model's max seq "
    "len ({n}), ({need} GiB KV cache is needed, which is larger than the available KV cache memory "
    "({avail} GiB). Based on the available memory, the estimated maximum model length is 11456. "
    "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) "
    "or decreasing `max_model_len` when initializing the engine."
)


def _texts(pasted: list[str]) -> list[str]:
    """What the signatures read of each pasted line."""
    return [ln.text for ln in normalise("\n".join(pasted))]


def test_prefixes_quotes_and_masks_are_taken_off() -> None:
    pasted = [
        "> - [pod/node2-0/vllm] 2026-11-29T07:00:01Z [rank1]:[W1130 xx:xx:xx.xxx x.cpp:12] a",
        "node1-1  | 2026-11-29T07:00:01.1Z (APIServer pid=1) INFO ok",
        "Nov 30 12:00:01 gpu-host-3 vllm[123]: VLLM_PORT 'tcp://10.100.xxx.xx:8000' b",
        "```",
        "  - ray, set x",
        "| (EngineCore pid=***) ERROR X.X GiB, 4x A10G, 0x8",
        "&gt; 1. quoted\tand numbered",
    ]
    got = [(ln.number, ln.text, ln.node) for ln in normalise("\n".join(pasted))]
    assert got == [
        (1, "[rank1]:[W1130 00:00:00.000 x.cpp:12] a", "node2-0"),
        (2, "(APIServer pid=1) INFO ok", "node1-1"),
        (3, "VLLM_PORT 'tcp://10.100.000.00:8000' b", "gpu-host-3"),
        (4, "", None),
        (5, "ray, set x", None),
        (6, "(EngineCore pid=000) ERROR 0.0 GiB, 4x A10G, 0x8", None),
        (7, "quoted and numbered", None),
    ]
    assert normalise("\n".join(pasted))[0].original == pasted[0]


def test_a_collectors_date_and_time_in_front_of_the_line_is_taken_off() -> None:
    pasted = [
        '2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586]   File "x.py", line 1, in f',
        "2025-07-10 08:59:40,123 UTC (EngineCore_DP0 pid=7) INFO ok",
        "2025-07-10 08:59:40.5+02:00 [rank1]:[W710 08:59:40.1 x.cpp:12] a",
        "2025-07-10 is a date, not a prefix",
        "2024-05-14 08:21:19.504 | ERROR    | server:serve:42 - loguru's own time",
        "2024-05-14 08:21:19,504 - vllm - INFO - Python logging's own time",
        # a wrapper's logger passing on SGLang's lines, a traceback's source line among them
        "2024-11-14 22:16:37,096 - sglang - INFO - [2024-11-14 22:16:37 TP0] Traceback (most",
        "2024-11-14 22:16:37,097 - sglang - INFO -     scheduler.event_loop_normal()",
        "2024-11-14 22:16:37,098 - ERROR - a record without the logger's name",
    ]
    got = _texts(pasted)
    assert got == [
        'ERROR 07-09 17:59:40 [core.py:586]   File "x.py", line 1, in f',
        "(EngineCore_DP0 pid=7) INFO ok",
        "[rank1]:[W710 08:59:40.1 x.cpp:12] a",
        "2025-07-10 is a date, not a prefix",
        "2024-05-14 08:21:19.504 | ERROR    | server:serve:42 - loguru's own time",
        "Python logging's own time",
        "[2024-11-14 22:16:37 TP0] Traceback (most",
        "scheduler.event_loop_normal()",
        "a record without the logger's name",
    ]


def test_a_carriage_return_shown_as_caret_m_ends_the_line() -> None:
    """What `cat -v`, less or vim show for a CRLF file's line end, copied as two characters."""
    pasted = [
        "Scheduler hit an exception: Traceback (most recent call last):^M",
        "    scheduler.event_loop_normal()^M^M",
        "a caret and an M ^M in the middle stay ^Mx",
    ]
    got = _texts(pasted)
    assert got == [
        "Scheduler hit an exception: Traceback (most recent call last):",
        "scheduler.event_loop_normal()",
        "a caret and an M ^M in the middle stay ^Mx",
    ]


def test_a_message_start_ending_a_line_that_a_list_of_the_writers_follows_is_cut() -> None:
    """A note titled with a message's start, its own words listed below: the record runs on
    through the list, so only the title line shows the cut; a line a wrap continues does not."""
    start = "ValueError: The model's max seq len (8192) is larger than the maximum number of tokens"
    titled = triage(f"# {start}\n+ what it means: the cache is too small\n", SCEN)
    got = [(f.scenario.scenario.metadata.id, f.cut) for f in titled]
    assert got == [("kv-cache-shortage", True)]
    assert triage(f"{start}\nthat the writer then explains in words\n", SCEN) == []
    # a plain line before an item is no title; nor is an item in a log of thousands of them
    assert triage(f"checked for: {start}\n+ echo OK\n", SCEN) == []
    trace = "".join(f"+ step {k}\n" for k in range(5000))
    assert triage(f"{trace}+ {start}\n+ what it means\n", SCEN) == []


def test_a_plus_sign_opens_a_list_item_as_a_dash_does() -> None:
    got = _texts(["+ ValueError: x", "+x", "  + indented y"])
    assert got == ["ValueError: x", "+x", "indented y"]


def test_a_number_the_renderer_linked_as_an_issue_reads_as_the_number() -> None:
    """A copy of a rendered GitHub page links "#1" in a C++ stack to issue 1 of the repository."""
    pasted = [
        "frame [#1](https://github.com/o/r/issues/1): c10d::ProcessGroupNCCL::WorkNCCL::check",
        "see [#12](https://github.com/o/r/pull/12) and [docs](https://example.com/x)",
    ]
    got = _texts(pasted)
    assert got == [
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::check",
        "see #12 and [docs](https://example.com/x)",
    ]


def test_typesetting_is_undone_before_matching() -> None:
    pasted = (
        "\ufeff> the model\u2019s max seq len\u00a0(16384)\u202f\u2013max-model-len"
        " 3\u20134 GiB \u201cq\u201d wa\u200bit\u2026"
    )
    [line] = normalise(pasted)
    assert line.text == 'the model\'s max seq len (16384) --max-model-len 3-4 GiB "q" wait...'
    assert line.original == pasted


def test_a_wrapped_message_is_matched_across_its_lines() -> None:
    mid_word = normalise("x\n(EngineCore pid=1) ValueError: VLLM_PO\nRT 'tcp://1.2.3.4:80' appears")
    at_word = normalise("VLLM_PORT 'tcp://1.2.3.4:80' appears to be\n   a URI. This may")
    rx = r"VLLM_PORT '(?P<v>tcp://[0-9.]+:\d+)' appears to be a URI\. This"
    assert find(mid_word, r"VLLM_PORT 'tcp") is not None
    hit = find(mid_word, r"VLLM_PORT '(?P<v>tcp://[0-9.]+:\d+)' appears")
    assert hit is not None and (hit[0], hit[1].number, hit[1].captures) == (
        3,
        2,
        {"v": "tcp://1.2.3.4:80"},
    )
    hit = find(at_word, rx)
    assert hit is not None and [ln.number for ln in hit[1].lines] == [1, 2]
    # a new record, a blank line or another pod's line never continues a message
    for text in (
        "VLLM_PORT 'tcp://1.2.3.4:80' appears to be\n(EngineCore pid=1) a URI. This",
        "VLLM_PORT 'tcp://1.2.3.4:80' appears to be\n\na URI. This",
        "[pod/a/c] VLLM_PORT 'tcp://1.2.3.4:80' appears to be\n[pod/b/c] a URI. This",
        "VLLM_PORT 'tcp://1.2.3.4:80' appears to be\nINFO a URI. This",
    ):
        assert find(normalise(text), rx) is None
    # the match belongs to the line it starts on
    hit = find(normalise("noise\nVLLM_PORT 'tcp://1.2.3.4:80' appears to be a URI. This"), rx)
    assert hit is not None and hit[1].number == 2


def test_a_hard_wrapped_message_reads_whole_where_it_broke_mid_word_and_at_a_space() -> None:
    # a fixed column breaks mid-number and at a space the copy dropped: neither joining alone
    wrapped = normalise("VLLM_PORT 'tcp://1.2.3.\n4:80' appears to be a\nURI. This")
    rx = r"VLLM_PORT '(?P<v>tcp://[0-9.]+:\d+)' appears to be a URI\. This"
    hit = find(wrapped, rx)
    assert hit is not None and (hit[1].number, hit[1].captures) == (1, {"v": "tcp://1.2.3.4:80"})
    assert loose(r"a b +c\s*d\s[ ]e {2}f") == r"a ?b *c\s*d\s?[ ]e *f"
    # a collector's prefix on the first line only: the lines after it continue it
    prefixed = normalise(
        "[pod/a/c] VLLM_PORT 'tcp://1.2.3.\n4:80' appears to be a\nURI. This\n[pod/b/c] x"
    )
    hit = find(prefixed, rx)
    assert hit is not None and [ln.number for ln in hit[1].lines] == [1, 2, 3]
    assert (
        find(
            normalise(
                "[pod/a/c] VLLM_PORT 'tcp://1.2.3.4:80' appears to be a\n[pod/b/c] URI. This"
            ),
            rx,
        )
        is None
    )
    # the words must still be there, in order
    assert find(normalise("VLLM_PORT 'tcp://1.2.3.\n4:80' appears to\nURI. This"), rx) is None


def test_an_indexed_pattern_is_searched_only_where_its_required_strings_occur() -> None:
    rx = r"VLLM_PORT '(?P<v>tcp://[0-9.]+:\d+)' appears to be a URI\. This"
    other = r"EngineCore hit an exception"
    alone = r"\d+"  # no string it requires: always searched
    texts = {
        "whole": "VLLM_PORT 'tcp://1.2.3.4:80' appears to be a URI. This",
        "wrapped": "VLLM_PORT 'tcp://1.2.3.\n4:80' appears to be a\nURI. This",
        "mid-word": (
            "x\n(EngineCore pid=1) ValueError: VLLM_PO\nRT 'tcp://1.2.3.4:80' appears"
            " to b\ne a URI. This"
        ),
    }
    for name, text in texts.items():
        log = Log(normalise(text))
        log.index([rx, other, alone, r"(?:a"])  # a regex RE2 refuses is left out
        assert (log.may_match(rx), log.may_match(other), log.may_match(alone)) == (
            True,
            False,
            True,
        ), name
        assert log.may_match(r"(?:a") and log.may_match("never indexed")
        hit = find(log, rx)
        assert hit is not None and hit[1].captures == {"v": "tcp://1.2.3.4:80"}, name
        assert find(log, other) is None
    # a required string's absence is enough, whichever of an alternation's branches it is in
    log = Log(normalise("Scheduler hit an exception: boom"))
    log.index([r"(?:Scheduler|Detokenizer) hit an exception", r"(?:Tokenizer|Detokenizer) hit"])
    assert log.may_match(r"(?:Scheduler|Detokenizer) hit an exception")
    assert not log.may_match(r"(?:Tokenizer|Detokenizer) hit")


def test_a_message_cut_inside_a_quoted_value_is_found_by_its_start() -> None:
    head = "a transfer failed in the handshake, id: "
    rx, _ = cut_pattern(head + r"(None|'[^']+'), engine: '[^']+'") or ("", "")
    assert re.fullmatch(rx, head + "'cm") and re.fullmatch(rx, head + "None, engi")
    assert not re.fullmatch(rx, head + "Nx")


def test_a_traceback_frame_is_never_read_cut() -> None:
    # the function a frame names is what it says: a frame cut before it is no frame
    frame = r'vllm/v1/worker/gpu_worker\.py", line \d+, in execute_model\s*$'
    assert cut_pattern(frame) is None
    # a message beside it in one alternation keeps its own cut form
    rx, _ = cut_pattern(frame + "|EngineCore encountered a fatal error in its loop") or ("", "")
    assert re.search(rx, "EngineCore encountered a fatal error ...")
    assert not re.search(rx, 'File "vllm/v1/worker/gpu_worker.py", line 71, in ...')


def test_phase_from_the_evidence() -> None:
    served = normalise(
        "(APIServer pid=1) INFO:     Application startup complete.\n"
        "RuntimeError: Triton Error [CUDA]: operation not permitted\n"
    )
    assert phase_of(served, 2, None) == (StartupPhase.SERVING, "log")
    assert phase_of(served[1:], 1, None) == (None, "none")
    assert phase_of(served[1:], 1, StartupPhase.KV_CACHE_CHECK) == (
        StartupPhase.KV_CACHE_CHECK,
        "scenario",
    )
    # the DeepGEMM crash write-up's CUDA 800 crash after 18 hours: serving, not config validation
    [f] = [f for f in triage(served[0].original + "\n" + served[1].original, SCEN)]
    assert (f.scenario.scenario.metadata.id, f.phase) == ("stray-gpu-process", StartupPhase.SERVING)


def test_kv_advice_by_proportion() -> None:
    # 32768 tokens, 6.0 GiB needed, 2.1 GiB available; no model, no GPU named
    [f] = triage(KV033.format(n=32768, need="6.0", avail="2.1"), [KV])
    assert f.advice == (
        "--max-model-len 11456 fits the 2.1 GiB of KV cache available (by proportion from the "
        "message's own figures; the log names no model gameday knows)",
        "--max-model-len 32768 needs 6.00 GiB: 3.90 GiB more KV budget",
        "--gpu-memory-utilization: raise it by 3.90 GiB / the GPU's memory (the log names "
        "neither the GPU nor its total memory)",
    )
    # the same failure with other figures gets other advice
    log = KV033.format(n=8192, need="4.0", avail="1.0")
    log += (
        "\nMemory profiling takes 20 s: total_gpu_memory (40.0GiB) x gpu_memory_utilization (0.80)"
    )
    [g] = triage(log, [KV])
    assert g.advice == (
        "--max-model-len 2048 fits the 1 GiB of KV cache available (by proportion from the "
        "message's own figures; the log names no model gameday knows)",
        "--max-model-len 8192 needs 4.00 GiB: 3.00 GiB more KV budget",
        "--gpu-memory-utilization 0.88 fits --max-model-len 8192 (now 0.80; GPU from the log's "
        "total GPU memory)",
    )


def test_kv_advice_by_the_lab_engines_arithmetic() -> None:
    # Qwen2.5-14B-Instruct-AWQ: 48 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 192 KiB a
    # token; 0.18 GiB holds 61 blocks of 16 = 976 tokens; 16384 tokens take 3 GiB; an A10G has
    # 22838 MiB, so the 2.82 GiB missing is 0.127 of it: 0.5 + 0.13
    text = (ROOT / "tests/data/triage/kv-019-markdown-fence-model.md").read_text()
    [f] = triage(text, [KV])
    assert f.advice == (
        "--max-model-len 976 fits the 0.18 GiB of KV cache available (by the lab engine's "
        "arithmetic for Qwen/Qwen2.5-14B-Instruct-AWQ)",
        "--max-model-len 16384 needs 3.00 GiB: 2.82 GiB more KV budget",
        "--gpu-memory-utilization 0.63 fits --max-model-len 16384 (now 0.5; GPU from the NVIDIA "
        "A10G the log names)",
    )
    # Qwen2.5-7B in 0.33 wording: 28 x 4 x 128 x 2 x 2 = 56 KiB a token; 0.33 holds one block
    # of 0.45 GiB back: 525 blocks = 8400 tokens
    text = (ROOT / "tests/data/triage/kv-033-with-model-config.log").read_text()
    [g] = triage(text, [KV])
    assert g.advice[:2] == (
        "--max-model-len 8400 fits the 0.45 GiB of KV cache available (by the lab engine's "
        "arithmetic for Qwen/Qwen2.5-7B-Instruct)",
        "--max-model-len 32768 needs 1.75 GiB: 1.30 GiB more KV budget",
    )


def test_masked_figures_give_no_numbers() -> None:
    [f] = triage(KV033.format(n=32768, need="X.X", avail="X.XX"), [KV])
    assert f.advice == ()


def test_cli_json_and_exit_codes(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text(
        '[pod/node2-0/vllm] 2026-11-29T07:00:01Z [rank1] Failed to check the "should dump" '
        "flag on TCPStore,\n[pod/node2-0/vllm]   (maybe TCPStore server has shut down too "
        "early), with error: Broken pipe\n"
    )
    res = CliRunner().invoke(main, ["triage", "--json", str(log)])
    assert res.exit_code == 0, res.output
    [entry] = json.loads(res.output)
    [finding] = entry["findings"]
    assert (finding["scenario"], finding["phase"], finding["phase_source"]) == (
        "head-only-restart",
        None,
        "none",
    )
    assert finding["views"] == [
        {
            "view": "a worker's",
            "node": "node2",
            "pod": "node2-0",
            "releases": None,  # the wording of the releases the labs run
            "releases_note": None,
            "when": None,  # the run's own signature, not a triage entry's
            "when_note": None,
            "cut": None,  # the message is whole
            "cut_before": None,  # nor cut before a line the run's signature quotes
            "names_cause": False,  # nor a line naming another cause of the run's lines
            "evidence": [
                {
                    "line": 1,
                    "text": log.read_text().rstrip("\n"),
                    "description": "only PyTorch's heartbeat monitor speaks on the worker",
                    "captures": {},
                }
            ],
        }
    ]
    res = CliRunner().invoke(main, ["triage", str(log)])
    lines = res.output.splitlines()
    assert lines[1:4] == [
        "  phase reached: unknown (the log shows no start-up marker)",
        "  view: a worker's (node2 in the scenario; node2-0 from the line prefix)",
        "  matched line 1: [pod/node2-0/vllm] 2026-11-29T07:00:01Z [rank1] Failed to check the "
        '"should dump" flag on TCPStore,',
    ]
    healthy = tmp_path / "ok.log"
    healthy.write_text("(APIServer pid=1) INFO:     Application startup complete.\n")
    res = CliRunner().invoke(main, ["triage", str(healthy)])
    assert (res.exit_code, res.output) == (1, f"{healthy}: no known failure\n")


def _kv(n: str, need: str, avail: str, *extra: str) -> tuple[str, ...]:
    [f] = triage("\n".join([KV033.format(n=n, need=need, avail=avail), *extra]), [KV])
    return f.advice


def test_figures_no_vllm_could_show_give_no_numbers_and_say_why() -> None:
    qwen14 = "Starting to load model Qwen/Qwen2.5-14B-Instruct-AWQ..."
    assert _kv("8192", "4.0", "1.0", "total_gpu_memory (0 GiB) gpu_memory_utilization=0.9") == (
        "--max-model-len 2048 fits the 1 GiB of KV cache available (by proportion from the "
        "message's own figures; the log names no model gameday knows)",
        "--max-model-len 8192 needs 4.00 GiB: 3.00 GiB more KV budget",
        "--gpu-memory-utilization: no figure (the log's total GPU memory reads 0 GiB)",
    )
    assert _kv("8192", "4.0", "1.0", "total_gpu_memory (40 GiB) gpu_memory_utilization=0")[2] == (
        "--gpu-memory-utilization: no figure (the log's 0 is not in (0, 1])"
    )
    assert _kv("9" * 400, "4.0", "1.0") == (
        "no numeric advice: the log's max seq len (99999999999999999999...) is not a finite number",
    )
    assert _kv("8192", "4.0", "1.0", qwen14, "tensor_parallel_size=0") == (
        "no numeric advice: tensor_parallel_size=0 is not a size vLLM runs with (at least 1)",
    )
    assert _kv("8192", "4.0", "1.0", qwen14, "tensor_parallel_size=7") == (
        "no numeric advice: tensor_parallel_size=7 does not divide "
        "Qwen/Qwen2.5-14B-Instruct-AWQ's 40 attention heads and 8 KV heads as vLLM requires",
    )
    assert _kv("8192", "1.0", "4.0") == (
        "no numeric advice: the log's 1 GiB needed is not more than its 4 GiB",
    )
    # 1e300 GiB available is past a float once counted in bytes
    assert _kv("16384", "1" + "0" * 301, "1" + "0" * 300, qwen14) == (
        "no numeric advice: the log's figures cannot be computed with (cannot convert float "
        "infinity to integer)",
    )


def test_a_model_whose_settings_differ_from_the_log_gives_way_to_the_message() -> None:
    # Qwen2.5-14B-AWQ needs 192 KiB a token: 8192 tokens take 1.50 GiB, not the 4.0 the log says
    qwen14 = "Starting to load model Qwen/Qwen2.5-14B-Instruct-AWQ..."
    assert _kv("8192", "4.0", "1.0", qwen14) == (
        "--max-model-len 2048 fits the 1 GiB of KV cache available (by proportion from the "
        "message's own figures: the lab engine's arithmetic for Qwen/Qwen2.5-14B-Instruct-AWQ "
        "needs 1.50 GiB for 8192 tokens, so the log's settings differ from the ones gameday "
        "knows)",
        "--max-model-len 8192 needs 4.00 GiB: 3.00 GiB more KV budget",
        "--gpu-memory-utilization: raise it by 3.00 GiB / the GPU's memory (the log names "
        "neither the GPU nor its total memory)",
    )
    # within 5 %: 1.55 GiB stated, 1.50 computed, the model arithmetic stands
    assert _kv("8192", "1.55", "1.0", qwen14)[:2] == (
        "--max-model-len 5440 fits the 1 GiB of KV cache available (by the lab engine's "
        "arithmetic for Qwen/Qwen2.5-14B-Instruct-AWQ)",
        "--max-model-len 8192 needs 1.50 GiB: 0.50 GiB more KV budget",
    )


def test_the_cli_shows_the_figures_it_read_and_folds_only_very_long_lines(tmp_path: Path) -> None:
    log = tmp_path / "kv.log"
    message = KV033.format(n=32768, need="6.0", avail="2.1")
    # a collector that glued a config dump to the message: one matched line of 1,454 characters
    log.write_text(message + " (EngineCore_DP0 pid=90) config:" + " key=value" * 100 + "\n")
    res = CliRunner().invoke(main, ["triage", str(log)])
    assert res.exit_code == 0, res.output
    read = [ln.strip() for ln in res.output.splitlines() if ln.strip().startswith("read: ")]
    assert "read: available=2.1 estimate=11456 max_len=32768 needed=6.0" in read, res.output
    # the message whole, as pasted; the glued dump folded at a word, saying how much is left
    [shown] = [ln for ln in res.output.splitlines() if "matched line 1: " in ln]
    assert message in shown
    assert shown.endswith(" key=value \u2026 (+460 characters; --json has the whole line)")
    assert fold("word " * 300, 1000).endswith(
        "word \u2026 (+501 characters; --json has the whole line)"
    )
    assert (
        fold("a" * 1200, 1000)
        == "a" * 1000 + " \u2026 (+200 characters; --json has the whole line)"
    )
    assert "shortcuts that did not restore service in the scenario's lab:" in res.output
    res = CliRunner().invoke(main, ["triage", "--json", str(log)])
    [entry] = json.loads(res.output)
    [finding] = entry["findings"]
    captures = [e["captures"] for v in finding["views"] for e in v["evidence"]]
    assert {
        "max_len": "32768",
        "needed": "6.0",
        "available": "2.1",
        "estimate": "11456",
    } in captures


def test_find_skips_a_match_whose_captures_the_check_refuses() -> None:
    lines = [
        Line(1, "peer a=1 b=1", "peer a=1 b=1"),
        Line(2, "peer a=1 b=2", "peer a=1 b=2"),
    ]
    rx = r"peer a=(?P<a>\d) b=(?P<b>\d)"
    hit = find(lines, rx, accept=lambda caps: caps["a"] != caps["b"])
    assert hit is not None and hit[1].number == 2
    assert find(lines[:1], rx, accept=lambda caps: caps["a"] != caps["b"]) is None


def test_a_viewer_panes_borders_are_taken_off_and_an_ascii_tables_are_not() -> None:
    pane = "\u2502     scheduler.event_loop_overlap()" + " " * 40 + "\u2502"
    table = "| N/A   41C    P0    26W /  70W |  10457MiB / 15360MiB |"
    texts = [ln.text for ln in normalise(pane + "\n" + table + "\n")]
    assert texts[0] == "scheduler.event_loop_overlap()"
    assert texts[1].endswith("15360MiB |")  # nvidia-smi's ASCII borders stay
