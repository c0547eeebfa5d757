"""A model's compile jobs as GitHub matrices: computed by `render` (how many shard jobs the export workflow needs,
the smoke job) and by the export workflow itself at run time (`qnn-release plan --model M --github-output`), so
one reusable workflow serves every model: GitHub counts a reusable workflow called for many models once."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..matrix.plan import plan
from ..matrix.schema import LoadedMatrix

MAX_JOBS = 256  # GitHub: "A job matrix can generate a maximum of 256 jobs per workflow run" (docs, Actions limits)


@dataclass(frozen=True)
class ModelJobs:
    model: str
    shards: list[list[dict]]  # each at most MAX_JOBS jobs: {soc, precision, graph ("" unless fan_out: target), tag}
    smoke: dict  # the push smoke test: one chip, one precision

    def outputs(self) -> dict[str, str]:
        """The step outputs the export workflow's compile shards read (``jobs1`` ... ``jobsN``)."""
        out = {f"jobs{k + 1}": json.dumps({"include": s}, sort_keys=True, separators=(",", ":"))
               for k, s in enumerate(self.shards)}
        return {"shards": str(len(self.shards)), **out, "smoke_soc": self.smoke["soc"],
                "smoke_precision": self.smoke["precision"]}


def by_model(targets) -> dict[str, list]:
    """The targets of each model, in plan order."""
    out: dict[str, list] = {}
    for t in targets:
        out.setdefault(t.model.name, []).append(t)
    return out


def job_tag(t) -> str:
    """The compile job a target belongs to: chip and precision (and graph, with ``fan_out: target``)."""
    return "-".join(x for x in (t.soc.name, t.precision, t.graph if t.model.options.fan_out == "target" else "") if x)


def model_jobs(loaded: LoadedMatrix, model: str, targets=None) -> ModelJobs:
    targets = [t for t in (targets if targets is not None else plan(loaded)) if t.model.name == model]
    if not targets:
        from ..errors import UsageError

        raise UsageError(f"--model {model}: no targets in the matrix for it",
                         hint="check the model's chips, precisions and exclude")
    fan = targets[0].model.options.fan_out
    jobs = {job_tag(t): {"soc": t.soc.name, "precision": t.precision, "graph": t.graph if fan == "target" else "",
                         "tag": job_tag(t)} for t in targets}
    ordered = [jobs[k] for k in sorted(jobs)]
    shards = [ordered[i:i + MAX_JOBS] for i in range(0, len(ordered), MAX_JOBS)]
    return ModelJobs(model=model, shards=shards, smoke={"soc": targets[0].soc.name, "precision": targets[0].precision})


def write_github_output(path, jobs: ModelJobs) -> None:
    """Append ``name=value`` lines to $GITHUB_OUTPUT (values are one-line JSON or plain words)."""
    with open(path, "a") as f:
        for k, v in jobs.outputs().items():
            f.write(f"{k}={v}\n")
