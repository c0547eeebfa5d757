import io

from ci_tools.builder.progress import Progress
from ci_tools.compile.records import TargetRecord


def _record(target_id: str, status: str, **numbers) -> TargetRecord:
    return TargetRecord.make(id=target_id, model="m", graph="g", soc="SM8750", precision="fp16", status=status,
                             **numbers)


def test_github_actions_groups_and_escaped_errors(monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    out = io.StringIO()
    p = Progress(2, stream=out)
    p.finished(_record("m.g.sm8750.fp16", "ok", size=1_000_000, seconds=1.5, parity={"cosine": 0.99999},
                       warnings=["8-bit activations"]))
    p.finished(_record("m.g.sm8550.fp16", "failed", error="bad\n::set-output name=x::y 100%"))
    text = out.getvalue()
    assert "::group::[1/2] m.g.sm8750.fp16 ok 1.00 MB 1.5s cos 0.999990" in text
    assert "  warning: 8-bit activations" in text and text.count("::endgroup::") == 2
    error = next(line for line in text.splitlines() if line.startswith("::error"))
    assert error.count("\n") == 0 and "bad%0A::set-output" in error and "100%25" in error


def test_plain_lines_in_logs(monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    out = io.StringIO()
    Progress(1, stream=out).finished(_record("a", "cached", size=0, seconds=0))
    assert out.getvalue() == "[1/1] a cached 0.00 MB 0.0s\n"
