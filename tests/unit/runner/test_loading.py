"""Scenario and inventory loading: every mistake is one message with file, line and field."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from runner.errors import InventoryError, ScenarioError
from runner.spec.inventory import Role
from runner.spec.inventory_load import load_inventory
from runner.spec.kinds import RestartPolicy
from runner.spec.scenario import discover, json_schema, load_scenario

GOOD = Path(__file__).resolve().parents[3] / "scenarios" / "context-window-overflow.yaml"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def mutate(tmp_path: Path, old: str, new: str) -> Path:
    text = GOOD.read_text()
    assert old in text
    return write(tmp_path, text.replace(old, new, 1))


def test_shipped_scenarios_load(root: Path) -> None:
    files = discover([root / "scenarios"])
    assert {f.stem for f in files} >= {
        "context-window-overflow",
        "kv-cache-shortage",
        "tp-mismatch",
        "service-name-collision",
    }
    for f in files:
        load_scenario(f)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    p = write(tmp_path, "apiVersion: gameday/v1\nkind: Scenario\nmetadata: [oops\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.line is not None and e.value.line >= 3
    assert str(p) in str(e.value) and "invalid YAML" in str(e.value)


def test_unknown_key_points_at_itself(tmp_path: Path) -> None:
    p = mutate(tmp_path, "  exit_code: 1\n", "  exit_code: 1\n  exit_kode: 2\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    lines = p.read_text().splitlines()
    assert e.value.field == "expect.exit_kode"
    assert lines[e.value.line - 1].strip().startswith("exit_kode")  # type: ignore[operator]
    assert "unknown key" in str(e.value)


def test_regex_that_does_not_compile(tmp_path: Path) -> None:
    p = mutate(
        tmp_path,
        "'ValidationError: 1 validation error for ModelConfig'",
        "'ValidationError: (unclosed'",
    )
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert "regex does not compile" in str(e.value)
    assert e.value.field is not None and e.value.field.startswith("expect.signature.in_order.0")


def test_capture_must_be_a_group(tmp_path: Path) -> None:
    p = mutate(
        tmp_path,
        "          requested: {eq: 131072}\n",
        "          requested: {eq: 131072}\n          nosuch: {eq: 1}\n",
    )
    with pytest.raises(ScenarioError, match="not a named group"):
        load_scenario(p)


def test_duplicate_key(tmp_path: Path) -> None:
    p = mutate(tmp_path, "  exit_code: 1\n", "  exit_code: 1\n  exit_code: 0\n")
    with pytest.raises(ScenarioError, match="duplicate key"):
        load_scenario(p)


def test_wrong_api_version(tmp_path: Path) -> None:
    p = mutate(tmp_path, "apiVersion: gameday/v1", "apiVersion: gameday/v9")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert e.value.line == 1 and e.value.field == "apiVersion"


def test_window_order(tmp_path: Path) -> None:
    p = mutate(tmp_path, "time_to_fail: {max_s: 30}", "time_to_fail: {min_s: 40, max_s: 30}")
    with pytest.raises(ScenarioError, match="larger than max_s"):
        load_scenario(p)


def test_needs_a_restoring_step(tmp_path: Path) -> None:
    p = mutate(tmp_path, "    outcome: restores\n", "    outcome: does_not_restore\n")
    with pytest.raises(ScenarioError, match="outcome: restores"):
        load_scenario(p)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")
    with pytest.raises(ScenarioError, match="empty"):
        load_scenario(write(tmp_path, ""))


def test_json_schema_is_complete() -> None:
    s = json_schema()
    assert s["$schema"].startswith("https://json-schema.org/")
    text = json.dumps(s)
    for key in ("apiVersion", "time_to_fail", "does_not_restore", "service_links", "in_order"):
        assert key in text


def test_local_inventory(root: Path) -> None:
    inv = load_inventory(root / "inventories" / "local.yaml")
    assert inv.lab.kind.value == "local" and inv.lab.time_scale == 100
    n = inv.node("serving")
    assert n.role is Role.SERVING and n.restart is RestartPolicy.ALWAYS
    assert n.connection == {"ansible_connection": "local"}
    assert "127.0.77.10" in n.rendered_args()


def test_inventory_unknown_host_var(tmp_path: Path, root: Path) -> None:
    text = (root / "inventories" / "local.yaml").read_text()
    p = write(tmp_path, text.replace("gameday_port: 8000", "gameday_prot: 8000"), "i.yaml")
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    assert "gameday_prot" in str(e.value) and e.value.line is not None
    assert "gameday_prot" in p.read_text().splitlines()[e.value.line - 1]


def test_inventory_bad_value(tmp_path: Path, root: Path) -> None:
    text = (root / "inventories" / "local.yaml").read_text()
    p = write(
        tmp_path, text.replace("gameday_restart: always", "gameday_restart: sometimes"), "i.yaml"
    )
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    assert e.value.field == "serving.gameday_restart"


def test_inventory_groups_nest(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        """
        all:
          vars:
            gameday_lab: {name: t, kind: local}
          children:
            tp_group:
              vars: {gameday_gpu: {type: a10g, count: 1}}
              children:
                head:
                  hosts:
                    node1: {gameday_role: head, gameday_address: 127.0.0.1,
                            gameday_engine_args: [m]}
                worker:
                  hosts:
                    node2: {gameday_role: worker, gameday_address: 127.0.0.2,
                            gameday_engine_args: [m]}
        """,
        "i.yaml",
    )
    inv = load_inventory(p)
    assert set(inv.node("node1").groups) == {"tp_group", "head"}
    assert [n.name for n in inv.resolve("tp_group")] == ["node1", "node2"]


def test_log_silence_regex_is_checked_like_signatures(tmp_path: Path, root: Path) -> None:
    text = (root / "scenarios" / "dhcp-address-change.yaml").read_text()
    p = write(
        tmp_path,
        text.replace(
            "{kind: log_silence, nodes: [node1, node2, node3, node4]}",
            "{kind: log_silence, nodes: [node1], regex: '(?=a)'}",
        ),
    )
    with pytest.raises(ScenarioError, match="RE2"):
        load_scenario(p)


def test_the_real_vllm_lab_carries_a_share_of_the_load(tmp_path: Path, root: Path) -> None:
    text = (root / "inventories" / "local-realvllm.yaml").read_text()
    assert load_inventory(root / "inventories" / "local-realvllm.yaml").lab.load_scale == 0.3
    assert load_inventory(root / "inventories" / "local.yaml").lab.load_scale == 1
    for bad in ("0", "1.5", "-0.3"):
        p = write(tmp_path, text.replace("load_scale: 0.3", f"load_scale: {bad}"), "i.yaml")
        with pytest.raises(InventoryError) as e:
            load_inventory(p)
        assert e.value.exit_code == 2 and e.value.line is not None
        assert "load_scale" in p.read_text().splitlines()[e.value.line - 1], bad
