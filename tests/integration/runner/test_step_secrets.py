"""Real `command` steps whose argv and output carry the secrets the security review found in
reports (curl -u, a cookie, a PEM private key, a GitHub token, an AWS key, a JWT, mysql -p,
"password hunter2"): none reaches result.json, report.md or report.html."""

from __future__ import annotations

import os
from pathlib import Path

from runner.report import write_reports
from runner.results.schema import Evidence, EvidenceLine, TimelineEvent, Verdict
from runner.run.stepexec import run_command
from runner.spec.usersteps import CommandStep, describe_user_step
from tests.support.results import NOW, run_result, scenario_result
from tests.unit.runner.test_redact import AKIA, GHP, JWT, PEM_BODY

SECRETS = ["CurlPass123", "CookieVal456", PEM_BODY[:32], GHP[4:], AKIA, JWT.split(".")[1]]
SECRETS += ["MyPass789", "hunter2"]
# stand-ins for the team's programs: each prints what the real one might (its own command line
# under `set -x`, a key it was handed, a token)
OUTPUT = f"""\
+ $0 $*
-----BEGIN RSA PRIVATE KEY-----
{PEM_BODY}
-----END RSA PRIVATE KEY-----
token {GHP} aws {AKIA}
{JWT}
password hunter2
"""


def test_a_command_steps_secrets_never_reach_a_report(tmp_path: Path) -> None:
    for name in ("curl", "mysql"):
        prog = tmp_path / name
        prog.write_text(f"#!/bin/sh\ncat <<EOF\n{OUTPUT}EOF\nexit 3\n")
        prog.chmod(0o755)
    steps = [
        CommandStep(
            kind="command",
            argv=["./curl", "-u", "alice:CurlPass123", "-H", "Cookie: sid=CookieVal456", "x"],
        ),
        CommandStep(kind="command", argv=["./mysql", "-u", "root", "-pMyPass789", "shop"]),
    ]
    timeline, evidence = [], []
    for step in steps:
        run = run_command(step, tmp_path, {"PATH": os.pathsep.join(["/usr/bin", "/bin"])})
        assert not run.ok and "-----BEGIN RSA PRIVATE KEY-----" in run.output
        assert [s for s in SECRETS if s in run.output + run.observed] == []
        # as the run records it (runner.run.apply): the step in the timeline, its output lines
        what = describe_user_step(step)
        event = f"inject: {what}: {run.observed}"
        timeline.append(TimelineEvent(ts=NOW, source="runner", clock="c", event=event))
        lines = [EvidenceLine(ts=None, text=ln) for ln in run.output.splitlines()]
        evidence.append(Evidence(title=f"inject: {what}: output", lines=lines))
    sc = scenario_result("t", verdict=Verdict.FAILED, timeline=timeline, evidence=evidence)
    write_reports(run_result(sc), tmp_path / "reports")
    written = {p.name: p.read_text() for p in (tmp_path / "reports").iterdir()}
    assert {"result.json", "report.md", "report.html"} <= written.keys()
    for name, text in written.items():
        assert [s for s in SECRETS if s in text] == [], name
    assert "./curl -u alice:&lt;redacted&gt;" in written["report.html"]
