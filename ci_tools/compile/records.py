"""The records that cross from one stage to the next, and the one reader and writer of their files.

A target's record (``<out>/<target id>/target.json``, and each entry of ``targets`` in
``build-report.json``) is what the target job writes, what the build's summary, the transcript check,
``package``, the step summaries and the release page read. It is a frozen dataclass: a stage that adds
a number makes a new record with ``TargetRecord.with_``; no stage invents a key another must guess.

The JSON stays what it was: a key is written when it has a value, or when the stage that made the
record set it to None on purpose (``"parity": null`` on an unverified target). An error's own fields
(``CompileError.details``: a diagnosis, the fp16 range findings) are written at the top level as they
come, in ``details``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import QnnReleaseError
from ..recipes import lift_recipe_result
from ..util.files import write_json

TARGET_FILE = "target.json"
REPORT = "build-report.json"
PRECOMPILE_REPORT = "precompile-report.json"
REPORT_VERSION = 1

OK, CACHED, FAILED = "ok", "cached", "failed"
REAL, GENERATED, NOT_VERIFIED = "real-samples", "generated-inputs", "not-verified"  # what a target was verified on
VERDICTS = {REAL: "verified on real samples", GENERATED: "verified on generated inputs only",
            NOT_VERIFIED: "not verified"}
VERDICT_LABELS = {REAL: "real samples", GENERATED: "generated only", NOT_VERIFIED: "not verified"}


@dataclass(frozen=True, kw_only=True)
class TargetRecord:
    """One target's outcome: what was built, how it was verified, or why it failed."""

    id: str
    model: str
    graph: str
    soc: str
    precision: str
    status: str  # ok | cached | failed
    key: str | None = None  # the content-addressed key the target is cached under
    backend: str | None = None
    precompile_run: str | None = None  # the chip-independent conversion run it was compiled from
    image: str | None = None  # the container image a CI job compiled in (ref@digest)
    # the compile
    sdk_version: str | None = None
    sdk_sha256: str | None = None
    compile_seconds: float | None = None
    warnings: list[str] | None = None
    files: list[dict] | None = None  # every file of the target folder: name, size
    context_onnx: str | None = None
    binaries: list[str] | None = None
    size: int | None = None
    placement: dict | None = None
    parameters: int | None = None
    bytes_per_parameter: float | None = None
    source_parameters: int | None = None
    bytes_per_source_parameter: float | None = None
    calibration_sha256: str | None = None
    weight_scales: str | None = None
    quantized_graph: str | None = None  # the ort route's QDQ graph, in the prepared graph's folder (package's twin)
    compile_reused: bool | None = None  # the binaries of an earlier compile of the same compile key, judged again
    # the verification
    verify_kind: str | None = None  # a recipe's kind: verified by what the chip's graphs do together
    verify_inputs: str | None = None
    verified: bool | None = None
    verified_on: str | None = None
    verify_note: str | None = None
    parity: dict | None = None
    per_output: dict | None = None
    thresholds: dict | None = None
    emulator_seconds: float | None = None
    emulator_seconds_total: float | None = None
    verify_samples: int | None = None
    passed_by: str | None = None
    rules: list | None = None  # every rule other than the default bars an output passed by, in words
    worst_output: str | None = None
    per_sample: list | None = None
    samples: dict | None = None
    recipe: dict | None = None  # the model's recipe's check of this chip, tagged with its kind (its own keys)
    created: str | None = None
    seconds: float | None = None
    # a failure
    error: str | None = None
    exit_code: int | None = None
    traceback: str | None = None
    work_dir: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)  # the error's own fields, top level in the JSON
    nulls: frozenset[str] = frozenset()  # keys set to None on purpose: written as null

    @classmethod
    def make(cls, **values: Any) -> TargetRecord:
        """A record from keyword values; a name that is not a field is refused (a misspelt one must not
        become a new key of target.json)."""
        _refuse_unknown(values)
        return cls(**values, nulls=frozenset(k for k, v in values.items() if v is None))

    @classmethod
    def failure(cls, who: Mapping[str, Any], error: str, exit_code: int, details: Mapping[str, Any] | None = None,
                **more: Any) -> TargetRecord:
        """A failed target: who it is, the one-line error, its exit code, and the error's own fields
        (``QnnReleaseError.details``: written at the top level; a field of the record among them wins)."""
        _refuse_unknown({**who, **more})
        return cls._split({**who, "status": FAILED, "error": error, "exit_code": exit_code, **more, **(details or {})})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TargetRecord:
        """A record as written: keys that are not fields are the error's details written at the top level."""
        return cls._split(data)

    @classmethod
    def _split(cls, values: Mapping[str, Any]) -> TargetRecord:
        values = lift_recipe_result(values)
        known = {k: v for k, v in values.items() if k in _FIELDS}
        details = {k: v for k, v in values.items() if k not in _FIELDS}
        return cls(**known, details=details, nulls=frozenset(k for k, v in known.items() if v is None))

    def with_(self, **changes: Any) -> TargetRecord:
        """This record with ``changes`` (a field set to None is then written as null); an unknown name is refused."""
        _refuse_unknown(changes)
        nulls = (self.nulls - changes.keys()) | {k for k, v in changes.items() if v is None}
        return dataclasses.replace(self, **changes, nulls=frozenset(nulls))

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in _FIELDS if getattr(self, k) is not None or k in self.nulls}
        return {**out, **self.details}

    @property
    def built(self) -> bool:
        return self.status in (OK, CACHED)


_FIELDS = tuple(f.name for f in dataclasses.fields(TargetRecord) if f.name not in ("details", "nulls"))


def _refuse_unknown(values: Mapping[str, Any]) -> None:
    import difflib

    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        near = difflib.get_close_matches(unknown[0], _FIELDS, n=1)
        raise TypeError(f"TargetRecord has no field {', '.join(map(repr, unknown))}"
                        + (f" (did you mean {near[0]!r}?)" if near else ""))


def verdict(record: Any) -> str:
    """A target's (or a manifest asset's) verdict: one of VERDICTS' keys. A record or an asset by its
    attributes; a manifest read back from JSON (an older release's) by its keys."""
    verified, on = ((record.get("verified"), record.get("verified_on")) if isinstance(record, Mapping)
                    else (record.verified, record.verified_on))
    if not verified:
        return NOT_VERIFIED
    return on or GENERATED


def verdict_label(record: TargetRecord | Mapping[str, Any]) -> str:
    """The verdict as tables show it (the summary's, the step summaries', the release notes')."""
    return VERDICT_LABELS[verdict(record)]


def weakest(verdicts: Iterable[str]) -> str:
    """An archive of several graphs is only as verified as its least verified graph."""
    order = list(VERDICTS)
    return max(verdicts, key=order.index, default=NOT_VERIFIED)


def write_target(folder: Path, record: TargetRecord) -> None:
    write_json(folder / TARGET_FILE, record.to_json())


def read_target(folder: Path) -> TargetRecord | None:
    """The finished target in ``folder``, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads((folder / TARGET_FILE).read_text())
    except (OSError, ValueError):
        return None
    return TargetRecord.from_json(data) if isinstance(data, dict) else None


@dataclass(kw_only=True)
class BuildReport:
    """``build-report.json``: every target of a build, the prepared graphs, the timings."""

    records: list[TargetRecord]
    prepared: list[dict]
    path: Path
    backend: str | None  # None: a report written without it (an older or a hand-made one)
    sdk_version: str | None
    seconds: float | None
    interrupted: bool = False
    timings: dict = field(default_factory=dict)
    work: dict = field(default_factory=dict)
    refused: list[dict] = field(default_factory=list)  # (model, soc, precision) the plan refused, with the reason
    matrix: str | None = None
    started: str | None = None
    toolkit: str | None = None
    exports: dict[str, str] = field(default_factory=dict)  # models verified by transcript: their export folder

    @property
    def failed(self) -> list[TargetRecord]:
        return [r for r in self.records if r.status == FAILED]

    @property
    def status(self) -> str:
        return "interrupted" if self.interrupted else (FAILED if self.failed else OK)

    def write(self) -> None:
        write_json(self.path, {
            "version": REPORT_VERSION, "toolkit": self.toolkit, "matrix": self.matrix, "backend": self.backend,
            "sdk_version": self.sdk_version, "started": self.started, "status": self.status,
            "timings": self.timings, "work": self.work, "prepared": self.prepared,
            "targets": [r.to_json() for r in self.records], "refused": self.refused, "exports": self.exports})

    @classmethod
    def load(cls, path: Path, error: type[QnnReleaseError]) -> BuildReport:
        """``read``, with a missing or unreadable report as one line of ``error``."""
        try:
            return cls.read(path)
        except FileNotFoundError:
            raise error(f"{path}: no build report", hint="run `qnn-release build` first") from None
        except (OSError, ValueError, TypeError) as e:
            raise error(f"{path}: not valid JSON: {e}") from None

    @classmethod
    def read(cls, path: Path) -> BuildReport:
        """Raises OSError / ValueError as reading and parsing do (the caller says which file and why)."""
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or not isinstance(data.get("targets"), list):
            raise ValueError("no list of targets in it")
        return cls(records=[TargetRecord.from_json(r) for r in data["targets"]], prepared=data.get("prepared", []),
                   path=Path(path), backend=data.get("backend"), sdk_version=data.get("sdk_version"),
                   seconds=(data.get("timings") or {}).get("total"), interrupted=data.get("status") == "interrupted",
                   timings=data.get("timings") or {}, work=data.get("work") or {}, refused=data.get("refused") or [],
                   matrix=data.get("matrix"), started=data.get("started"), toolkit=data.get("toolkit"),
                   exports=data.get("exports") or {})


def write_precompile_report(report: BuildReport) -> None:
    """``precompile-report.json``: what a release's precompile job converted, once per graph and precision
    (``report.work["precompiled"]``), and the targets whose graph could not be (``report.records``)."""
    failed = report.records
    write_json(report.path, {
        "version": REPORT_VERSION, "toolkit": report.toolkit, "matrix": report.matrix, "backend": report.backend,
        "sdk_version": report.sdk_version, "started": report.started, "status": FAILED if failed else OK,
        "precompiled": report.work["precompiled"], "prepared": report.prepared,
        "failed": [r.to_json() for r in failed]})
