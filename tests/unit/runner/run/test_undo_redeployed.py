"""An undo never writes an old baseline over a deployment the team made since adoption: the
journal's change on that node is closed, the node left as the team deployed it, and cleanup
says so; other nodes are put back as usual."""

from __future__ import annotations

from pathlib import Path

from runner.labs.base import Change, ChangeKind, NodeConfig
from runner.labs.fake import FakeLab
from runner.run.journal import Journal, open_changes
from runner.run.undo import cleanup_lab
from tests.support.fakelab import inventory


class AdoptedFake(FakeLab):
    """A fake lab whose nodes count as adopted: gameday's own configs are the baseline and what
    it applied; anything else the team deployed."""

    own: list[object]

    def apply(self, change: Change) -> None:
        self.own = [*getattr(self, "own", []), change.after]
        super().apply(change)

    def redeployed(self) -> list[str]:
        own = getattr(self, "own", [])
        return [
            n.name
            for n in self.inventory.nodes
            if self.config(n.name) != self.baseline_config(n.name)
            and self.config(n.name) not in own
        ]


def _fault(lab: FakeLab, node: str, max_len: str) -> Change:
    before = lab.config(node)
    after = before.model_copy(update={"args": (*before.args, "--max-model-len", max_len)})
    return Change(kind=ChangeKind.NODE_CONFIG, node=node, before=before, after=after)


def test_cleanup_leaves_a_node_the_team_redeployed_and_restores_the_others(
    tmp_path: Path,
) -> None:
    lab = AdoptedFake(inventory(tmp_path), state_dir=tmp_path / "state")
    lab.up()
    journal = Journal(lab.state_dir, "killed")
    for node in ("serving", "node1"):
        change = _fault(lab, node, "65536")
        journal.record("kv-cache-shortage", change)
        lab.apply(change)
    # (the runner is killed here) and the team rolls out its own args on `serving`
    team = NodeConfig(args=("Qwen/Qwen2.5-0.5B-Instruct", "--max-model-len", "8192"), env={})
    lab._nodes["serving"].config = team
    lab.applied.clear()
    outcome = cleanup_lab(lab)
    assert lab.config("serving") == team  # not the baseline saved at adoption
    assert outcome.redeployed == ["serving"]
    assert [c.node for c in lab.applied] == ["node1"]
    assert lab.config("node1") == lab.baseline_config("node1")
    assert open_changes(lab.state_dir) == []  # closed: nothing is left for a later cleanup
