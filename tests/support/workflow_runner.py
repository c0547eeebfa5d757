"""Runs the jobs of rendered GitHub Actions workflows on this machine, for tests.

Stands in for the GitHub Actions runner, closely enough to follow a release through its jobs:
- each job starts from a fresh copy of the repository (``actions/checkout``) in its own folder;
- ``run:`` steps run with ``bash -e -o pipefail`` (GitHub's default shell for Linux runners),
  with the job's and the step's ``env:`` after expression substitution;
- ``actions/upload-artifact`` copies ``with.path`` (several lines, ``!`` exclusions) into an artifact
  store, refusing an existing name unless ``overwrite: true`` (upload-artifact v4-v7 answer 409 there);
- ``actions/attest-build-provenance`` records each subject's sha256 (and refuses a job without the
  ``id-token``/``attestations: write`` permissions it needs);
- ``actions/download-artifact`` copies one artifact (``name``) or every artifact matching
  ``pattern`` (``merge-multiple``) into ``with.path``;
- a step's ``continue-on-error: true`` lets the job pass when that step fails;
- a step's ``if:`` supports ``success()`` (the default), ``failure()``, ``failure() || cancelled()`` and
  ``!cancelled()``, and an expression without a status function (``steps.<id>.outputs.<name> != ''``: GitHub
  prefixes it with ``success() &&``; an output no step wrote is ''); a job's
  ``if:`` is evaluated (``==``, ``!=``, ``&&``, ``||``, ``!``, ``startsWith``, ``!cancelled()``, and
  ``needs.<job>.result`` of the jobs run before) against the context: a
  called workflow sees its CALLER's ``github.*`` and the ``inputs`` it was given, as on GitHub;
- a ``run:`` step writes ``name=value`` lines to ``$GITHUB_OUTPUT``; they are ``steps.<id>.outputs.<name>`` for
  the job's later steps, and the job's ``outputs:`` map them to ``needs.<job>.outputs.<name>`` for later jobs
  (an output no step wrote is the empty string, as on GitHub);
- ``${{ ... }}`` expressions are looked up in a flat context (``matrix.soc``, ``runner.temp``,
  ``secrets.GITHUB_TOKEN``, ``needs.image.outputs.pinned`` ...); an unknown one fails the test, so a
  template that starts using a new expression must be taught here first.
- ``actions/checkout`` with ``repository`` and ``ref`` (a repository that adopted qnn-release checks the tool out at
  its pinned commit, ``path: .qnn-release-tool``) copies the local folder ``tools["OWNER/NAME@REF"]`` standing in
  for that commit (an unknown pin fails the test); ``qnn-release`` then runs from that copy.
Steps that install the toolkit (``pip install -e .``) are skipped: the test's interpreter has it.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
TOOL_DIR = ".qnn-release-tool"  # ci_tools.workflows.render.TOOL_DIR
COPY = ("pyproject.toml", "README.md", "ci_tools", "templates", "Dockerfile-2.40")


@dataclass
class Runner:
    repo: Path  # the repository the jobs check out (a folder with matrix/, models ...)
    work: Path  # scratch space: job folders, artifacts
    context: dict[str, str]  # expression -> value, shared by all jobs (secrets, github.*, needs.*)
    env: dict[str, str]  # the container's environment (QNN_SDK_ROOT ...)
    artifacts: dict[str, Path] = field(default_factory=dict)
    attested: dict[str, str] = field(default_factory=dict)  # file name -> sha256 of each attestation subject
    log: list[str] = field(default_factory=list)
    runs: int = 0
    tools: dict[str, Path] = field(default_factory=dict)  # OWNER/NAME@REF -> a local checkout standing in for it
    git: bool = False  # each job's checkout has the repository's .git (a job that commits what it changed)

    @classmethod
    def tag_push(cls, repo: Path, work: Path, gh, sdk: Path, *, image: str, repository: str, model: str = "m",
                 tools: dict[str, Path] | None = None) -> Runner:
        """A release run for tag v1.0.0 against the stand-in GitHub ``gh``, the image job's result given as
        ``image``: the called export workflows see the caller's github.* (event push) and full: true."""
        return cls(repo=repo, work=work, tools=tools or {}, context={
            "github.event_name": "push", "github.ref": "refs/tags/v1.0.0", "inputs.full": True,
            "github.event.repository.fork": False, "github.event.repository.visibility": "public",
            "secrets.GITHUB_TOKEN": gh.state.token, "secrets.HF_TOKEN": "", "github.ref_name": "v1.0.0",
            "secrets.QAI_HUB_API_TOKEN": "", "needs.image.result": "success", "needs.export.result": "success",
            "needs.image.outputs.pinned": image, "inputs.image": image, "inputs.model": model},
            env={"QNN_SDK_ROOT": str(sdk), "QNN_PYTHON": sys.executable, "GITHUB_API_URL": gh.url,
                 "GITHUB_REPOSITORY": repository, "QNN_RELEASE_CACHE": ""})

    def job(self, workflow: Path, job_id: str, matrix: dict | None = None, extra_env: dict | None = None
            ) -> bool | None:
        """Run one job (one matrix entry); True when every step passed, None when its ``if:`` skips it."""
        wf = yaml.safe_load(workflow.read_text())
        job = wf["jobs"][job_id]
        if "if" in job and not evaluate(str(job["if"]), self.context):
            self.log.append(f"{workflow.name}:{job_id}: skipped ({job['if']})")
            self.context[f"needs.{job_id}.result"] = "skipped"
            return None
        self.runs += 1
        home = self.work / f"job{self.runs}-{job_id}"
        checkout, temp = home / "repo", home / "runner-temp"
        temp.mkdir(parents=True)
        self._checkout(checkout)
        ctx = {**self.context, "runner.temp": str(temp), **{f"matrix.{k}": str(v) for k, v in (matrix or {}).items()}}
        failed = False
        for step in job["steps"]:
            cond = str(step.get("if", "success()"))
            cond = EXPR.sub(lambda m: m[1], cond).strip()
            # docs.github.com, expressions, "Status check functions": cancelled() is true for a cancelled run
            # (a job killed by timeout-minutes too); this runner never cancels, so `failure() || cancelled()`
            # runs exactly when failure() does
            run_it = {"success()": not failed, "failure()": failed, "failure() || cancelled()": failed,
                      "!cancelled()": True}.get(cond)
            if run_it is None and re.search(r"\b(success|failure|cancelled|always)\(", cond):
                raise AssertionError(f"{workflow.name}:{job_id}: step condition {cond!r} is not modelled here")
            if run_it is None:  # docs: a step's `if` without a status check function is `success() && (...)`;
                run_it = not failed and evaluate(cond, ctx, missing="")  # an output no step wrote is ''
            if not run_it:
                continue
            ok = self._step(step, job, ctx, checkout, extra_env or {})
            if not ok and step.get("continue-on-error") is True:  # docs: jobs.<id>.steps[*].continue-on-error,
                self.log.append(f"{workflow.name}:{job_id}: step {step.get('name')!r} failed, continuing")
                ok = True  # "allow a job to pass when this step fails"
            failed = failed or not ok
        for name, value in (job.get("outputs") or {}).items():  # docs: jobs.<job_id>.outputs
            self.context[f"needs.{job_id}.outputs.{name}"] = self._expand(value, ctx, missing="")
        self.log.append(f"{workflow.name}:{job_id} {matrix or ''}: {'failed' if failed else 'ok'}")
        # what a later job's `needs.<id>.result` reads (docs: contexts, "needs context")
        self.context[f"needs.{job_id}.result"] = "failure" if failed else "success"
        return not failed

    # -- steps ------------------------------------------------------------------------------------

    def _checkout(self, dest: Path, repo: Path | None = None) -> None:
        repo = repo or self.repo
        dest.mkdir(parents=True)
        for name in os.listdir(repo):
            if (name == ".git" and not self.git) or name in (".venv", "dist", "release_notes") or \
                    name.startswith(".pytest"):
                continue
            src = repo / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)

    def _expand(self, value: object, ctx: dict[str, str], missing: str | None = None) -> str:
        def look(m: re.Match) -> str:
            # docs.github.com, "Evaluate expressions in workflows and actions", operators: `a || b` is a's value
            # when a is truthy, else b's (falsy: '', null, false, 0)
            names = [n.strip() for n in m[1].split("||")]
            known = {n: ctx[n] if n in ctx else missing for n in names
                     if n in ctx or (missing is not None and n.startswith("steps."))}
            for n in names:
                if n not in known:
                    raise AssertionError(f"expression ${{{{ {n} }}}} is not modelled by the test runner")
            return next((known[n] for n in names if known[n] not in ("", None, False)), known[names[-1]])

        return EXPR.sub(look, str(value))

    def _step(self, step: dict, job: dict, ctx: dict[str, str], cwd: Path, extra_env: dict) -> bool:
        uses = step.get("uses", "")
        args = {k: self._expand(v, ctx) for k, v in (step.get("with") or {}).items()}
        if uses.startswith("actions/checkout@") and args.get("repository"):
            pin = f"{args['repository']}@{args.get('ref')}"
            if pin not in self.tools:
                raise AssertionError(f"checkout of {pin}: no local stand-in for that repository and commit")
            self._checkout(cwd / args["path"], self.tools[pin])
            return True
        if uses.startswith("actions/checkout@"):
            return True  # the job folder is already a fresh checkout
        if uses.startswith("actions/setup-python@"):
            return True
        if uses.startswith("actions/upload-artifact@"):
            return self._upload(args, cwd)
        if uses.startswith("actions/download-artifact@"):
            return self._download(args, cwd)
        if uses.startswith("actions/attest-build-provenance@"):
            return self._attest(args, job, cwd)
        if uses:
            raise AssertionError(f"action {uses} is not modelled by the test runner")
        script = step["run"]
        if re.match(r"^python3? -m pip install", script):
            return True
        env = {**os.environ, **self.env, **extra_env, "CI": "true", "GITHUB_ACTIONS": "true",
               "PATH": f"{self.work / 'bin'}{os.pathsep}{os.environ['PATH']}",
               # the pinned tool's checkout when the repository adopted qnn-release, else the repository itself
               "PYTHONPATH": str(cwd / TOOL_DIR if (cwd / TOOL_DIR).is_dir() else cwd)}
        for scope in (job.get("env") or {}, step.get("env") or {}):
            env.update({k: self._expand(v, ctx) for k, v in scope.items()})
        self._shim()
        outputs = cwd.parent / f"github-output-{len(self.log)}"
        outputs.write_text("")
        env["GITHUB_OUTPUT"] = str(outputs)
        r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=900)
        self.log.append(f"$ {script}\n{r.stdout}{r.stderr}")
        if step.get("id"):  # docs: "Setting an output parameter" (name=value lines)
            for line in outputs.read_text().splitlines():
                name, sep, val = line.partition("=")
                if sep:
                    ctx[f"steps.{step['id']}.outputs.{name}"] = val
        return r.returncode == 0

    def _shim(self) -> None:
        """``qnn-release`` on PATH: the checked-out package, run by the test's interpreter."""
        shim = self.work / "bin" / "qnn-release"
        if not shim.exists():
            shim.parent.mkdir(parents=True, exist_ok=True)
            shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ci_tools "$@"\n')
            shim.chmod(0o755)

    def _upload(self, args: dict, cwd: Path) -> bool:
        name = args["name"]
        if name in self.artifacts and str(args.get("overwrite", "false")).lower() != "true":
            self.log.append(f"upload {name}: 409 an artifact with this name already exists")
            return False
        lines = [ln.strip() for ln in args["path"].splitlines() if ln.strip()]
        include = [cwd / ln for ln in lines if not ln.startswith("!")]
        exclude = [str(cwd / ln[1:]) for ln in lines if ln.startswith("!")]
        files = []
        for inc in include:
            matches = [Path(p) for p in _glob(inc)]
            for m in matches:
                files += [m] if m.is_file() else [p for p in m.rglob("*") if p.is_file()]
        files = [f for f in files if not any(str(f).startswith(x.rstrip("/") + "/") or str(f) == x for x in exclude)]
        if not args.get("include-hidden-files"):
            files = [f for f in files if not any(part.startswith(".") for part in f.relative_to(cwd.parent).parts)]
        if not files:
            if args.get("if-no-files-found", "warn") == "error":
                self.log.append(f"upload {name}: no files found")
                return False
            return True
        # upload-artifact keeps paths relative to the least common ancestor of the include paths
        roots = [p if p.is_dir() else p.parent for inc in include for p in map(Path, _glob(inc))]
        root = Path(os.path.commonpath([str(r) for r in roots])) if roots else cwd
        dest = self.work / "artifacts" / name
        shutil.rmtree(dest, ignore_errors=True)
        for f in files:
            target = dest / f.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        self.artifacts[name] = dest
        return True

    def _attest(self, args: dict, job: dict, cwd: Path) -> bool:
        """actions/attest-build-provenance v3.2.0 (README, "Usage"): the job needs ``id-token: write`` and
        ``attestations: write``; ``subject-path`` is a path, a glob or several lines, at most 1024 subjects;
        each subject is recorded by name and sha256 (what ``gh attestation verify`` checks a file against)."""
        import hashlib

        perms = job.get("permissions") or {}
        if perms.get("id-token") != "write" or perms.get("attestations") != "write":
            self.log.append(f"attest: the job's permissions {perms} lack id-token/attestations: write")
            return False
        files = [Path(f) for line in args.get("subject-path", "").splitlines() if line.strip()
                 for f in _glob(cwd / line.strip()) if Path(f).is_file()]
        if not files or len(files) > 1024:
            self.log.append(f"attest: {len(files)} subjects in {args.get('subject-path')!r}")
            return False
        for f in files:
            self.attested[f.name] = hashlib.sha256(f.read_bytes()).hexdigest()
        return True

    def _download(self, args: dict, cwd: Path) -> bool:
        path = Path(args.get("path") or cwd)
        path = path if path.is_absolute() else cwd / path
        if "name" in args:
            if args["name"] not in self.artifacts:
                self.log.append(f"download {args['name']}: artifact not found")
                return False
            shutil.copytree(self.artifacts[args["name"]], path, dirs_exist_ok=True)
            return True
        names = sorted(n for n in self.artifacts if fnmatch.fnmatchcase(n, args["pattern"]))
        for n in names:
            into = path if str(args.get("merge-multiple", "false")).lower() == "true" else path / n
            shutil.copytree(self.artifacts[n], into, dirs_exist_ok=True)
        return True


def _glob(pattern: Path) -> list[str]:
    import glob

    return sorted(glob.glob(str(pattern), recursive=True))


def evaluate(expr: str, context: dict[str, str | bool | None], missing: str | None = None) -> bool:
    """A GitHub expression of the kinds the templates use, against a flat context (missing: null, or ``missing``
    for a step's output no step wrote)."""
    m = EXPR.fullmatch(expr.strip())
    text = m[1] if m else expr

    def value(ref: re.Match) -> str:
        return repr(context.get(ref[0], missing if ref[0].startswith("steps.") else None))

    text = re.sub(r"\b(?:inputs|github|steps|needs|matrix|secrets)\.[\w.-]+", value, text)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    text = text.replace("startsWith(", "_startswith(")
    # status functions in a job's `if`: this runner never cancels a run (see the step conditions above)
    env = {"_startswith": lambda a, b: str(a or "").startswith(str(b)), "cancelled": lambda: False,
           "always": lambda: True, "__builtins__": {}}
    return bool(eval(text, env))  # the test's own rendered templates, with the names above only
