"""The house by stage: every import points down the flow, no module imports itself back, no function
longer than a screen (issue #22). A move that breaks the direction fails here, naming the import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
PKG = REPO / "ci_tools"

# The flow, earliest first: a module may import from its own layer or an earlier one, never a later one.
# errors, paths and qairt_zip (standard library only: the Dockerfile copies it alone into the SDK image) sit
# below everything; the package's own __init__/__main__ and the CLI above everything.
LAYERS = ["errors", "paths", "qairt_zip", "util", "catalog", "matrix", "sources", "prepare", "compile", "recipes",
          "builder", "device", "release", "workflows", "sdk", "cli", "__init__", "__main__"]
FLAT = {"errors", "paths", "qairt_zip", "__init__", "__main__"}  # the only modules directly in ci_tools/
MAX_FUNCTION_LINES = 60  # a screen


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


REGISTRY = "ci_tools.recipes"  # the recipes' registry: imports no stage at run time, so every stage may call it


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for annotations: they never run)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        todo += [c for c in ast.iter_child_nodes(node)
                 if not (isinstance(c, ast.If) and isinstance(c.test, ast.Name) and c.test.id == "TYPE_CHECKING")]
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """Every ci_tools module ``name`` imports at run time (lazy ones in functions too), with the line."""
    is_pkg = path.name == "__init__.py"
    found = []
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules]
            found += [(node.lineno, m) for m in (subs or [mod]) if m in modules]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name in modules]
    return [(ln, m) for ln, m in found if m != name and m != "ci_tools"]


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return LAYERS.index(top)


def test_only_the_shared_modules_are_flat():
    flat = sorted(p.stem for p in PKG.glob("*.py"))
    assert set(flat) <= FLAT, f"modules directly in ci_tools/ that belong in a stage package: {set(flat) - FLAT}"
    packages = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file())
    assert set(packages) <= set(LAYERS), f"a package the layout test does not place: {set(packages) - set(LAYERS)}"
    for name in packages:
        assert ast.get_docstring(ast.parse((PKG / name / "__init__.py").read_text())), f"{name}/ says what it holds"


def test_imports_point_down_the_flow():
    modules = _modules()
    upward = [f"{path.relative_to(PKG.parent)}:{ln} imports {m} ({LAYERS[_layer(m)]} comes after "
              f"{LAYERS[_layer(name)]})"
              for name, path in modules.items() for ln, m in _imports(name, path, modules)
              if _layer(m) > _layer(name) and m != REGISTRY]
    assert not upward, "\n".join(upward)
    # the registry may be called from any stage because it imports none: a recipe is imported by its path
    assert not _imports(REGISTRY, modules[REGISTRY], modules), "ci_tools/recipes/__init__.py imports a stage"


def test_no_import_cycle():
    modules = _modules()
    graph = {n: {m for _, m in _imports(n, p, modules)} for n, p in modules.items()}
    # a package's __init__ importing its own submodule (cli re-exports main) is not a cycle back into it
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(n: str, stack: list[str]) -> None:
        state[n] = 1
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycles.append([*stack[stack.index(m):], m] if m in stack else [n, m])
            elif m not in state:
                visit(m, [*stack, m])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_function_longer_than_a_screen():
    long = []
    for p in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(PKG.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps:\n" + "\n".join(long)


def test_every_name_imported_from_the_package_exists():
    """Lazy imports inside functions are not checked by ruff: a name that moved fails here, not in a user's build."""
    import importlib

    modules = _modules()
    missing = []
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                mod = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod != "ci_tools" and not mod.startswith("ci_tools."):
                continue
            target = importlib.import_module(mod)
            for a in node.names:
                if not hasattr(target, a.name) and f"{mod}.{a.name}" not in modules:
                    missing.append(f"{path.relative_to(PKG.parent)}:{node.lineno}: {mod} has no {a.name}")
    assert not missing, "\n".join(missing)


def _recipe_words() -> tuple[set[str], set[str]]:
    """(the recipes' names: their folders, the recipes' kinds: their matrix ``verify.kind``), from the registry."""
    from ci_tools.recipes import RECIPES

    return {path.split(".")[2] for path in RECIPES.values()}, set(RECIPES)


def _words(identifier: str) -> set[str]:
    """An identifier's words, lower case: ``SpeechNumbers`` and ``speech_numbers`` are {speech, numbers}."""
    return {w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", identifier)}


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.arg, ast.keyword)) and node.arg:
        return [node.arg]
    if isinstance(node, ast.alias):
        return [node.asname or node.name.split(".")[-1]]
    return []


def _named_in(path: Path, names: set[str], kinds: set[str], where: object = None) -> list[str]:
    """Where a module outside recipes/ names a recipe (in a string that is not a docstring) or uses a recipe's
    name or kind as a word of an identifier or as a whole string (a key, a tag)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    where = where or path.relative_to(PKG.parent)
    out = []
    for node in ast.walk(tree):
        hit = {w for i in _identifiers(node) for w in _words(i)} & (names | kinds)
        if hit:
            out.append(f"{where}:{node.lineno} an identifier holds the recipe word {sorted(hit)[0]!r}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value.lower()
            code_like = any(re.search(rf"(?:\w[._]{k}\b|\b{k}[._]\w|^\.?{k}$)", text.strip()) for k in kinds)
            if code_like or any(re.search(rf"\b{n}\b", text) for n in names):
                out.append(f"{where}:{node.lineno} names a recipe: {node.value[:60]!r}")
    return out


def test_no_stage_names_a_recipe():
    """A model family is a folder in recipes/ and a line in its registry: the stages reach it through
    ``ci_tools.recipes`` (the Recipe Protocol), never import a recipe's module, and no string or name of theirs
    holds a recipe's name or kind (issues #32, #45): a recipe's data is one field tagged with its kind. Docstrings
    and comments may cite a measurement made on one."""
    modules = _modules()
    recipes = {n for n in modules if n.startswith("ci_tools.recipes.")}
    names, kinds = _recipe_words()
    named = []
    for name, path in modules.items():
        if name == "ci_tools.recipes" or name.startswith("ci_tools.recipes."):
            continue
        named += [f"{path.relative_to(PKG.parent)}:{ln} imports {m}" for ln, m in _imports(name, path, modules)
                  if m in recipes]
        named += _named_in(path, names, kinds)
    templates = PKG / "_data" / "templates"
    for t in sorted(templates.rglob("*.j2")):
        if "recipes" in t.relative_to(templates).parts:
            continue
        for i, line in enumerate(t.read_text().splitlines(), 1):
            code = " ".join(re.findall(r"\{[{%](.*?)[}%]\}", line))
            hit = set(re.findall(r"\w+", code.lower())) & (names | kinds)
            if hit:
                named.append(f"{t.relative_to(PKG.parent)}:{i} names the recipe word {sorted(hit)[0]!r}")
    assert not named, "\n".join(named)


def test_the_name_scan_sees_a_recipe_s_word_in_a_stage(tmp_path):
    """The scan above is not vacuous: a record field named after a kind, a kind as a key, and a recipe's name in
    a message are each caught."""
    names, kinds = _recipe_words()
    kind, name = sorted(kinds)[0], sorted(names)[0]
    module = tmp_path / "m.py"
    module.write_text(f'x = meta.get("{kind}")\nclass {kind.title()}Numbers:\n    pass\n'
                      f'raise SystemExit("the {name.title()} archive is broken")\n'
                      f'y = meta.get("{kind}_numbers"), f"{{x}}.{kind}", "on_device.{kind}"\n'
                      f'z = "a {kind} model, in words"\n')
    lines = _named_in(module, names, kinds, where=module.name)
    assert len(lines) == 6, lines  # the prose line is not code
    assert not _named_in(PKG / "release" / "page.py", names, kinds)


def test_every_subprocess_goes_through_the_one_chokepoint():
    """util/cmd.run logs, resolves the executable, applies the timeout and makes a missing tool one line; the unit
    tier's guard replaces it. A direct subprocess call elsewhere would escape all of that (issue #32)."""
    direct = []
    for p in sorted(PKG.rglob("*.py")):
        if p == PKG / "util" / "cmd.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "subprocess" \
                    and node.attr in ("run", "Popen", "call", "check_call", "check_output", "getoutput"):
                direct.append(f"{p.relative_to(PKG.parent)}:{node.lineno} subprocess.{node.attr}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                    and node.attr in ("system", "popen", "execv", "execvp", "spawnv"):
                direct.append(f"{p.relative_to(PKG.parent)}:{node.lineno} os.{node.attr}")
    assert not direct, "use ci_tools.util.cmd.run:\n" + "\n".join(direct)


MAX_PARAMETERS = 6  # past that, a frozen value travels whole (cibuildwheel's BuildOptions; #45)


def test_no_function_takes_more_than_six_parameters():
    """Values travel whole (#45): a function with more is passed a value holding them. The CLI's argument plumbing
    (ci_tools/cli/) may take what argparse gives."""
    wide = []
    for p in sorted(PKG.rglob("*.py")):
        if p.relative_to(PKG).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                n = len(names) - (names[:1] in (["self"], ["cls"])) + bool(a.vararg) + bool(a.kwarg)
                if n > MAX_PARAMETERS:
                    wide.append(f"{p.relative_to(PKG.parent)}:{node.lineno} {node.name} ({n} parameters)")
    assert not wide, "pass a frozen dataclass instead:\n" + "\n".join(wide)


def test_the_unit_tier_stands_alone():
    """#45 item 5: no unit test imports a test module (what the two tiers share lives in tests/support/), and no
    helper module lies loose in tests/."""
    tests = REPO / "tests"
    crossing = [f"{p.relative_to(REPO)}: {m[0].strip()}" for p in sorted((tests / "unit").glob("*.py"))
                for m in re.finditer(r"^\s*(from tests\.(unit\.)?test_\w+ import|import tests\.(unit\.)?test_\w+|"
                                     r"from tests(\.unit)? import .*\btest_\w+).*$", p.read_text(), re.M)]
    assert not crossing, "import from tests/support/ instead:\n" + "\n".join(crossing)
    loose = sorted(p.name for p in tests.glob("*.py") if not p.name.startswith("test_") and p.name != "conftest.py")
    assert not loose, f"helpers belong in tests/support/: {loose}"
