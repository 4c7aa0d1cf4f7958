"""Triage of a wrong answer pasted as it came back (silent-wrong-output's `triage` entries): the
shapes runner.triage.garbled reads, what it leaves alone, and the finding's own recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from runner.cli.main import main
from runner.spec.expectations import TextCheck, TriageSignature
from runner.spec.scenario import discover, load_scenario
from runner.triage import triage
from runner.triage.garbled import (
    BLOCK_REPEATS,
    ESCAPED_REPEATS,
    GLUED_REPEATS,
    REPEATS,
    find_garbled,
    mixed,
)
from runner.triage.match import Log
from runner.triage.normalise import normalise

ROOT = Path(__file__).resolve().parents[3]
SCEN = [load_scenario(p) for p in discover([ROOT / "scenarios"])]

SOUP = (
    "theuliarтельно wrapper冷 Ahmed สำหรับ הביתHelper jov деятельности坂 NSMutable ведь "
    "ตรง 数据 ישראל"
)


def _log(text: str) -> Log:
    return Log(normalise(text))


def test_token_soup_is_read_and_text_people_write_is_not() -> None:
    assert mixed(SOUP) is not None
    # a list of greetings switches five times; Japanese switches often, between two systems,
    # and a name from another system quoted once does not make soup
    assert (
        mixed("Bonjour, Доброе утро, おはようございます, 좋은 아침, صباح الخير, สวัสดีตอนเช้า") is None
    )
    assert (
        mixed(
            "東京は日本の首都です。Tokyo は大きい都市で、ソウル(서울)と"
            "北京もアジアの首都です。Москва"
        )
        is None
    )
    assert mixed("plain ASCII text " * 20) is None
    # the prolonged-sound and iteration marks are no writing system of their own
    ja = "サーバーのエラーでGPUが止まりました。vLLMのサーバーを再起動してもエラーが出ます。"
    assert mixed(ja * 3) is None
    assert mixed("人々はvLLMでGPUを使い、色々なモデルを試しています。" * 3) is None


def test_three_systems_glued_inside_words_are_soup_and_text_written_without_spaces_is_not() -> None:
    # Latin, Thai and Cyrillic, each switch inside a word: three systems are enough
    glued = "Parisเมื่อwhereпредел Indianaสำหรับ modoсть cabinetsтак rainbowที่ sollteлиз Kellyการ"
    assert mixed(glued) == (3, 10)
    # the same words apart: three systems, none glued, is not soup
    apart = (
        "Paris เมื่อ where предел Indiana สำหรับ modo сть cabinets так rainbow ที่ sollte лиз Kelly การ"
    )
    assert mixed(apart) is None
    # Han, kana and Hangul are written without spaces, Greek is glued to formulas and units
    formulas = "学习率α=0.001，β为0.9，ΔT为10μs，Привет模型，ε为1e-8，λ为0.01，η为3e-4，Δx为1。"
    assert mixed(formulas) is None
    assert mixed("서버가vLLM으로GPU를쓰고ΔT가10μs로" * 3) is None
    # Chinese and Japanese glue a foreign word of any system: greetings in seven languages
    greetings = (
        "翻译结果：俄语Привет，阿拉伯语مرحبا，泰语สวัสดี，希伯来语שלום，希腊语Γειά，英语Hello，"
        "韩语안녕하세요。"
    )
    assert mixed(greetings) is None
    assert mixed("ロシア語Привет、アラビア語مرحبا、タイ語สวัสดี、ヘブライ語שלום、英語Hello。") is None


def test_soup_led_by_latin_pieces_with_han_glued_to_them() -> None:
    soup = "mostly Gardens渐渐 sustain rotation出品 Clause bringing пере quietly安装 Thursday"
    assert mixed(soup) == (3, 3)
    # English with Chinese glued to its words and no third system is someone's note; Chinese with
    # Latin words glued into it is text mostly CJK, or one phrase glued together in English
    assert mixed("model Qwen通义 runs on node A100节点 with port 8000端口 open") is None
    assert mixed("我们用vLLM部署Qwen模型，在A100上跑，Привет是俄语，GPU显存够用。") is None
    for text in (
        "When I send 'Привет' to Qwen the answer is fine, but the Chinese prompt "
        "用vLLM部署Qwen模型 gives a wrong answer every time I try it",
        "['The capital of France is Paris, a city known for its art and food.', "
        "'我用vLLM部署了Qwen模型，效果很好。', 'Столица России - Москва.']",
        '{"prompt": "Explain tensor parallelism on two GPUs", "answer": '
        '"使用vLLM部署时设置tensor_parallel_size为2即可", "ref_ru": "Да"}',
    ):
        assert mixed(text) is None, text
    # the gluings and the third system, but Greek, which formulas glue to anything
    assert mixed("step Δt每步 loss曲线 lr学习率 is 0.001 and beta2 is 0.95 everywhere") is None


def test_soup_led_by_han_pieces_with_latin_glued_in_and_cyrillic_glued_to_latin() -> None:
    soup = (
        "据说明rowsel翻滚深远的计划dulg相关内容wen莺歌tamper平方ракoti温度it的伙伴enso记载ilk"
        "各位方面ogr落地ныйsta潮汐之中ful莱茵河ерpan颇为omb年华etch的流程"
    )
    assert mixed(soup) is not None
    # Chinese with Latin terms glued to it, and a Russian or Thai word it quotes by its own
    for text in (
        "我们在K8s上用vLLM部署Qwen2.5模型，然后用Prometheus抓取GPU指标，用Grafana看dashboard，"
        "日志走Loki，告警走Alertmanager到Slack频道。俄语Привет的意思是你好，泰语สวัสดี也是。",
        # the gluings, and one Cyrillic word glued to a Latin one: not two
        "据说明rowsel翻滚深远的计划dulg相关内容wen莺歌tamper平方ракoti温度it的伙伴enso记载ilk"
        "各位方面ogr落地",
        # Russian endings glued onto Latin terms, in a Chinese note: no Latin after Cyrillic
        "我们在服务器上部署模型，запускаем на GPUшке через vLLMом，然后用Prometheus抓取GPU指标，"
        "用Grafana看dashboard，日志走Loki，告警走Alertmanager到Slack频道，镜像推到Harbor。",
    ):
        assert mixed(text) is None, text


def test_soup_far_apart_on_one_line_is_not_soup() -> None:
    # the same words spread over more than the window: no stretch holds ten switches
    spread = (" " * 60).join(SOUP.split())
    assert mixed(spread) is None


def test_one_word_over_and_over() -> None:
    ev = find_garbled(_log("answer: the " + "the " * (REPEATS - 1) + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "the", "times": str(REPEATS)}
    assert find_garbled(_log("the " * (REPEATS - 1) + "\n"), TextCheck.REPEATED_WORD) is None
    # a word that only starts like the one before is another word; numbers are not words
    assert find_garbled(_log("com " * 3 + "comet " * 3 + "\n"), TextCheck.REPEATED_WORD) is None
    assert find_garbled(_log("0 " * 20 + "\n"), TextCheck.REPEATED_WORD) is None
    assert find_garbled(_log('Output: "chef in ' + "a " * 12 + '"\n'), TextCheck.REPEATED_WORD)
    # capitalised words, hex bytes, one word per line: tables, dumps and loops, not answers
    for text in ("GPU1 NODE NODE NODE NODE NODE NODE SYS\n", "00: " + "ff " * 16 + "\n"):
        assert find_garbled(_log(text), TextCheck.REPEATED_WORD) is None
    assert (
        find_garbled(_log("[ True  True  True  True  True  True]\n"), TextCheck.REPEATED_WORD)
        is None
    )
    assert find_garbled(_log("waiting\n" * 8), TextCheck.REPEATED_WORD) is None


def test_one_token_glued_to_itself_over_and_over() -> None:
    ev = find_garbled(
        _log("generated: 'def hel" + "ry" * GLUED_REPEATS + "'\n"), TextCheck.REPEATED_WORD
    )
    assert ev is not None and ev[0].captures == {"word": "ry", "times": str(GLUED_REPEATS)}
    ev = find_garbled(_log("Mandatory (SIP..." + "-SIP" * 30 + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures["word"] == "-SIP"
    assert find_garbled(_log("ry" * (GLUED_REPEATS - 1) + "\n"), TextCheck.REPEATED_WORD) is None
    # one character over and over, identifiers, base64 and rules are no token loop
    for text in (
        "key: " + "A" * 64,
        "x" * 80,
        "-" * 80,
        "-a" + "-" * 40,
        "CUDACachingAllocatorConfigParserDeviceStats",
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDZxLzgYvWqHkT3pRmNbJcE",
    ):
        assert find_garbled(_log(text + "\n"), TextCheck.REPEATED_WORD) is None, text


def test_a_phrase_over_and_over() -> None:
    said = "Are there going to be parts of things that they can exercise? " + "I think. " * 9
    ev = find_garbled(_log(said + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "I think.", "times": "9"}
    story = "so the story goes on with the cat and the " + "lot pet dealer " * 7
    ev = find_garbled(_log(story + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "lot pet dealer", "times": "7"}
    salad = "What is the best to make of the butter, the sugar, " + "the, " * 16
    ev = find_garbled(_log(salad + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "the", "times": "16"}


@pytest.mark.parametrize(
    "text",
    [
        # a short message printed line after line, without a timestamp to part them
        "Waiting for the engine core to start up now\n" * 12,
        # five times only, and prose that repeats a word here and there
        "so the plan for next week is to finish it and then " + "I think. " * 5 + "we go on\n",
        "the cat and the dog and the bird and the fish went out to see the sea and the sky"
        " and the sun and the moon and the stars and the rain\n",
        # a status line printed with no newline, JSON's and tensors' literals, a dump's bytes,
        # capitals of a topology matrix, a capitalised word with commas
        "start.sh: " + "Waiting for the server to come up... " * 8 + "\n",
        "mask: [" + "true, false, " * 12 + "true] in the config of this model as it was read\n",
        "flags: [" + "True, False, " * 12 + "True] in the config of this model as it was read\n",
        "logits are " + "nan, " * 12 + "and so the sampler picks token zero for every step\n",
        "dump of it: " + "de ad be ef " * 8 + "and more of the same bytes\n",
        "GPU links: " + "PIX PHB " * 8 + "on this node as the matrix shows it\n",
        "names: " + "The, " * 8 + "and so on for every row of the table that was printed\n",
        # numbers, and a message printed line after line inside a JSON string
        "values: " + "0.5 0.25 " * 16 + "\n",
        "GPU memory used per device: " + "0.0 GiB " * 8 + "on every rank of this node\n",
        '{"message": "' + "Waiting for the model server to become ready\\n" * 7 + '"}\n',
        '{"logs": "' + "Connecting to the Ray head node failed, retrying.\\n" * 3 + '"}\n',
        # a sentence twice, and a short one three times
        "the run was fine. The weather today is sunny and warm. The weather today is sunny and"
        " warm. and then we went home to rest and eat and sleep and wake up late\n",
        "so we went on and on that day and the next and "
        + "It was fine. " * 3
        + "and the next day we went home\n",
        # vLLM's request log quotes the user's prompt, not the answer
        "INFO 04-02 10:00:01 [logger.py:39] Received request cmpl-1: prompt: '"
        + "hello world " * 16
        + "', params: SamplingParams(n=1)\n",
    ],
)
def test_text_that_repeats_itself_without_looping(text: str) -> None:
    assert find_garbled(_log(text), TextCheck.REPEATED_WORD) is None


@pytest.mark.parametrize(
    "text",
    [
        "data:\n  config: c2VydmVyOgogICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg\n",
        "IyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMj\n",
        "00000000: ababababababababababababababababababababab\n",
    ],
)
def test_base64_and_hex_of_a_repeated_byte_are_no_token_loop(text: str) -> None:
    assert find_garbled(_log(text), TextCheck.REPEATED_WORD) is None


def test_a_sentence_three_times() -> None:
    text = "Hi there, how was it? " + "I am doing fine, thank you for asking me. " * 3 + "I am\n"
    ev = find_garbled(_log(text), TextCheck.REPEATED_WORD)
    assert ev is not None
    assert ev[0].captures == {"word": "I am doing fine, thank you for asking me.", "times": "3"}


def test_commas_over_and_over_in_text_written_without_spaces() -> None:
    ev = find_garbled(_log("回答：你好，我是，" + "好，" * 8 + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "好，", "times": "8"}
    ev = find_garbled(_log("回答：我" + "，" * 12 + "\n"), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "，", "times": "12"}
    # a list's different words, a comma eleven times, and what people write over and over
    for text in (
        "支持：CUDA、ROCm、CPU、苹果、香蕉、橘子、葡萄、西瓜、桃子\n",
        "我" + "，" * 11 + "\n",
        "客服：对，对，对，对，对，您说得没错，我们马上处理。\n",
        "哈哈，哈哈，哈哈，哈哈，哈哈，太好笑了\n",
        "各型号是否支持FP8：是、是、是、是、是、否。\n",
        "うーん、、、、、、、、、、、、、、どうしようかな\n",
    ):
        assert find_garbled(_log(text), TextCheck.REPEATED_WORD) is None


def test_a_sentence_three_times_in_text_written_without_spaces() -> None:
    text = "很高兴认识你们。很高兴能和你们交流。" + "很高兴你们能在这里。" * 3 + "\n"
    ev = find_garbled(_log(text), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures == {"word": "很高兴你们能在这里", "times": "3"}
    twice = "很高兴能和你们交流。很高兴能和你们交流。我们走吧。\n"
    assert find_garbled(_log(twice), TextCheck.REPEATED_WORD) is None
    assert find_garbled(_log("好。好。好。好。\n"), TextCheck.REPEATED_WORD) is None


REASONING = (
    "Wait, but the question says two baskets, so I should count again.\n"
    "Let me recount: 9 apples minus 4 apples is 5 apples.\n\n"
)


def test_a_block_of_lines_over_and_over() -> None:
    ev = find_garbled(_log("Start.\n" + REASONING * BLOCK_REPEATS), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures["times"] == str(BLOCK_REPEATS)
    assert ev[0].number == 2
    assert ev[0].captures["word"].startswith("Wait, but the question says two baskets")
    # twice is an answer that says a thing again
    assert find_garbled(_log(REASONING * (BLOCK_REPEATS - 1)), TextCheck.REPEATED_WORD) is None


@pytest.mark.parametrize(
    "block",
    [
        # a record's start, a worker's or a rank's prefix
        "INFO 12-06 10:00:01 Waiting for the next request to arrive here\n"
        "INFO 12-06 10:00:01 Nothing to schedule in this step at all\n",
        "(VllmWorkerProcess pid=7) The tokenizer has no pad token set\n"
        "(VllmWorkerProcess pid=7) The tokenizer uses the slow implementation\n",
        # an error named, a C++ scope, a path, a module's dotted name, a quoted list
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  the communicator of this process group is gone now\n",
        "Loading the adapter from the folder that holds it\n  see /data/lora/one for the weights\n",
        "Some weights were not used when initializing the model here\n"
        "  unused keys are listed below: ['lm_head.bias']\n",
        "The class transformers.models.llama is loaded for this model\n"
        "The slow tokenizer is loaded for this model, which is fine\n",
        # a block of one line again and again
        "The tokenizer has no pad token set, the end token is used\n"
        "The tokenizer has no pad token set, the end token is used\n",
        # numbers and markers, no text
        "| 0 | 1 | 2 |\n|---|---|---|\n",
        # labels of a transcript (the same prompt at temperature 0), a status a loop prints
        "Prompt: 'The capital of France is'\nGenerated text: ' Paris, the city of light.'\n",
        "Waiting for the model server to come up\nThe model server is still not up\n",
        "The server at this address refused the call\nIt will be asked once more soon\n",
    ],
)
def test_blocks_a_program_prints_over_and_over(block: str) -> None:
    assert find_garbled(_log(block * 8), TextCheck.REPEATED_WORD) is None


def test_blocks_a_collector_or_a_logger_stamped_are_a_programs() -> None:
    # the normaliser takes the stamps off; the lines as pasted still carry them
    pair = ["The tokenizer of this model has no pad token set here", "The end token is used"]
    stamps = (
        "2025-07-10 08:59:1{n} ",
        "2024-11-14 22:16:1{n},096 - launcher - INFO - ",
        "vllm-{n}  | ",
        "[pod/vllm-{n}/engine] ",
    )
    for stamp in stamps:
        text = "".join(stamp.format(n=n) + line + "\n" for n in range(4) for line in pair)
        assert find_garbled(_log(text), TextCheck.REPEATED_WORD) is None, stamp
    # the same lines with nothing in front of them, or only a chat's quoting, loop
    plain = "".join("> " + line + "\n" for _ in range(4) for line in pair)
    assert find_garbled(_log(plain), TextCheck.REPEATED_WORD) is not None


def test_lines_over_and_over_inside_one_quoted_string() -> None:
    items = "\\n- two cups of rice\\n- one onion\\n- three carrots"
    answer = '{"content": "Here is the list:' + items * ESCAPED_REPEATS + '"}\n'
    ev = find_garbled(_log(answer), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures["times"] == str(ESCAPED_REPEATS)
    assert ev[0].captures["word"] == "- two cups of rice / - one onion / - three carrots"
    short = '{"content": "Here is the list:' + items * (ESCAPED_REPEATS - 1) + '"}\n'
    assert find_garbled(_log(short), TextCheck.REPEATED_WORD) is None
    # one line alone needs as many times as one word, and a label of the answer before it: a
    # program's message over and over in a log's field is no answer
    one = "\\nI am doing well, thank you."
    assert find_garbled(_log('"content": "' + one * REPEATS + '"\n'), TextCheck.REPEATED_WORD)
    less = '"content": "' + one * (REPEATS - 1) + '"\n'
    assert find_garbled(_log(less), TextCheck.REPEATED_WORD) is None
    assert find_garbled(_log('"log": "' + one * 12 + '"\n'), TextCheck.REPEATED_WORD) is None
    # the last key before the loop is no answer's (a log's field), or the line is code
    field = '{"result": "ok", "stdout": "' + one * 12 + '"}\n'
    assert find_garbled(_log(field), TextCheck.REPEATED_WORD) is None
    code = '"content": "' + "\\nmodel.add(Dense(64, activation='relu'))" * 8 + '"\n'
    assert find_garbled(_log(code), TextCheck.REPEATED_WORD) is None
    # a traceback written into a string, and vLLM's request log quoting the user's prompt
    frames = '\\n  File \\"/app/x.py\\", line 3, in f\\n    return f()'
    assert find_garbled(_log('"' + frames * 8 + '"\n'), TextCheck.REPEATED_WORD) is None
    logged = "INFO 12-06 10:00:01 Received request chatcmpl-1: prompt: '" + items * 8 + "'\n"
    assert find_garbled(_log(logged), TextCheck.REPEATED_WORD) is None


def test_the_first_loop_in_the_paste_is_the_evidence() -> None:
    text = "first: " + "ry" * GLUED_REPEATS + "\nthen: " + "go " * REPEATS + "\n"
    ev = find_garbled(_log(text), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures["word"] == "ry" and ev[0].number == 1
    text = "first: " + "go " * REPEATS + "\nthen: " + "ry" * GLUED_REPEATS + "\n"
    ev = find_garbled(_log(text), TextCheck.REPEATED_WORD)
    assert ev is not None and ev[0].captures["word"] == "go"


def test_an_ascii_log_is_no_soup_and_the_line_is_the_evidence() -> None:
    assert find_garbled(_log("INFO ready\n" * 50), TextCheck.MIXED_SCRIPTS) is None
    ev = find_garbled(_log("INFO ready\nДобро пожаловать\n" + SOUP + "\n"), TextCheck.MIXED_SCRIPTS)
    assert ev is not None and ev[0].number == 3


@pytest.mark.parametrize(
    "text",
    [
        '{"choices":[{"message":{"role":"assistant","content":"' + "!" * 40 + '"}}]}',
        "Generated text: '" + "!" * 60 + "'",
        "<|reserved_special_token_247|>" * 6,
        "{'message': {'role': 'assistant', 'content': ''}, 'finish_reason': 'length'}",
        SOUP,
        "com " * 8,
    ],
)
def test_each_shape_is_silent_wrong_output_with_its_own_recovery(text: str) -> None:
    (f,) = triage(text + "\n", SCEN)
    assert f.scenario.scenario.metadata.id == "silent-wrong-output"
    assert f.recovery_source == "lines" and f.fixes
    # the scenario's own steps are about its Jamba build, which these lines do not show
    assert not any("fixed engine build" in x for x in f.fixes)


@pytest.mark.parametrize(
    "text",
    [
        "!!!!!!!!!!!!!!!!!!!!!!!!!! stopping after 1 failures !!!!!!!!!!!!!!!!!!!!!!!!!!!",
        '{"content": "Great!!!", "finish_reason": "stop"}',
        '{"reasoning_content": "Let me think", "content": null, "finish_reason": "length"}',
        "<|reserved_special_token_3|> marks the tool call",
        # a stream's last chunk, and a banner
        '{"choices":[{"delta":{"content":""},"finish_reason":"length"}]}',
        "!" * 80,
    ],
)
def test_answers_that_are_not_broken(text: str) -> None:
    assert triage(text + "\n", SCEN) == []


def test_the_view_and_json_say_whose_recovery(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text('{"content":"' + "!" * 40 + '"}\n')
    out = CliRunner().invoke(main, ["triage", str(log)]).output
    assert "  recovery for what these lines show (in place of the scenario's own steps" in out
    assert "  shortcuts that do not restore service:" in out
    assert "fixed engine build" not in out
    got = json.loads(CliRunner().invoke(main, ["triage", "--json", str(log)]).output)
    finding = got[0]["findings"][0]
    assert finding["recovery_source"] == "lines"
    assert finding["recovery"][0].startswith("Find what overflows or is misread")


def test_a_scenarios_own_recovery_is_said_so(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("ValueError: VLLM_PORT 'tcp://10.96.0.12:8000' appears to be a URI.\n")
    got = json.loads(CliRunner().invoke(main, ["triage", "--json", str(log)]).output)
    assert got[0]["findings"][0]["recovery_source"] == "scenario"


def test_shortcuts_need_recover_steps() -> None:
    with pytest.raises(ValidationError, match="shortcuts need its recover steps"):
        TriageSignature.model_validate(
            {"when": "w", "note": "n", "in_order": [{"regex": "x"}], "shortcuts": ["s"]}
        )
    with pytest.raises(ValidationError, match="one of in_order, stalled_stats, text_check or"):
        TriageSignature.model_validate(
            {"when": "w", "note": "n", "in_order": [{"regex": "x"}], "text_check": "repeated_word"}
        )
    with pytest.raises(ValidationError, match="do not apply to it"):
        TriageSignature.model_validate(
            {"when": "w", "note": "n", "text_check": "repeated_word", "cut_before_cause": True}
        )
    with pytest.raises(ValidationError, match="do not apply to it"):
        TriageSignature.model_validate(
            {
                "when": "w",
                "note": "n",
                "text_check": "repeated_word",
                "stopped_by": {"regex": "Shutting down"},
            }
        )


def test_a_finding_that_shows_the_scenarios_own_cause_keeps_its_recovery() -> None:
    text = (
        "[2025-11-29 02:14:07 TP0] Error fetching prefill parallel info from bootstrap: refused\n"
        "[2025-11-29 02:14:09 TP0] Prefill transfer failed for request rank=0 req.rid='0c1f'\n"
    )
    (f,) = triage(text, SCEN)
    assert len(f.sightings) == 2 and f.recovery_source == "scenario"
    (g,) = triage(text.splitlines(keepends=True)[1], SCEN)
    assert g.recovery_source == "lines"
