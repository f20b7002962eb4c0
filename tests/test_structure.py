"""The package's layout holds (issue 27), checked by parsing the sources with `ast`:

- no import loop between the package's modules (imports at module level, as they run on `import`);
- the shipped folder `hf_multiencoder/models/` imports only torch, transformers, the standard library and its own
  files, relatively (sentence-transformers in its own module): what `save_pretrained` copies beside the weights loads
  on its own;
- no run script, protocol script or benchmark imports another script, and none edits `sys.path` (the package is
  installed; what scripts share lives in the library).
"""

import ast
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO_ROOT, "hf_multiencoder")
RUN_SCRIPTS = sorted(f for f in os.listdir(REPO_ROOT) if f.startswith("run_") and f.endswith(".py"))
SCRIPT_DIRS = ("scripts", "benchmarks")
# benchmarks/ helper modules (no `__main__`) that the benchmark scripts may import from their own folder
BENCHMARK_HELPERS = {"timing", "harness"}  # helper modules of benchmarks/, not scripts
BENCHMARK_SCRIPT_IMPORTS: set[str] = set()  # none: the benchmarks share `timing` and `harness`, not a script


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, REPO_ROOT)[: -len(".py")].split(os.sep)
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def _package_modules() -> dict[str, str]:
    modules = {}
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                modules[_module_name(os.path.join(folder, f))] = os.path.join(folder, f)
    return modules


def _top_level_imports(path: str) -> list[tuple[str, int, list[str]]]:
    """(module, level, names) of the imports that run on import: module level, `if`/`try` blocks included, function
    bodies and `if TYPE_CHECKING:` left out."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = []

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((alias.name, 0, []) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                found.append((node.module or "", node.level, [alias.name for alias in node.names]))
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])

    visit(tree.body)
    return found


def _resolve(importer: str, is_package: bool, module: str, level: int) -> str:
    if level == 0:
        return module
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _package_graph() -> dict[str, set[str]]:
    modules = _package_modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for module, level, names in _top_level_imports(path):
            target = _resolve(name, path.endswith("__init__.py"), module, level)
            candidates = [target] + [f"{target}.{n}" for n in names]
            for candidate in candidates:
                if candidate in modules and candidate != name:
                    edges.add(candidate)
        graph[name] = edges - {name}
    return graph


def test_the_package_has_the_four_folders():
    for folder in ("models", "training", "data", "pretraining"):
        assert os.path.isfile(os.path.join(PACKAGE, folder, "__init__.py")), folder
    loose = sorted(f for f in os.listdir(PACKAGE) if f.endswith(".py"))
    assert loose == ["__init__.py", "testing_utils.py"], loose


def test_no_import_loop_in_the_package():
    graph = _package_graph()
    assert graph["hf_multiencoder.pretraining.rtd"] >= {"hf_multiencoder.pretraining.adaptation"}  # the graph sees
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail(f"import loop: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_adaptation_and_rtd_do_not_import_each_other_both_register_objectives():
    graph = _package_graph()
    assert "hf_multiencoder.pretraining.rtd" not in graph["hf_multiencoder.pretraining.adaptation"]
    assert "hf_multiencoder.pretraining.objectives" in graph["hf_multiencoder.pretraining.adaptation"]
    assert "hf_multiencoder.pretraining.objectives" in graph["hf_multiencoder.pretraining.rtd"]
    from hf_multiencoder.pretraining.objectives import OBJECTIVES

    assert {"mlm", "rtd"} <= set(OBJECTIVES)


def test_the_shipped_folder_imports_only_torch_transformers_and_its_siblings():
    folder = os.path.join(PACKAGE, "models")
    siblings = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
    allowed = {"torch", "transformers"}
    for f in sorted(siblings - {"__init__"}):
        path = os.path.join(folder, f + ".py")
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):  # every import, in functions too: the remote-code loader checks them all
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = [node.module.split(".")[0]]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 1, f"{f}.py leaves models/: from {'.' * node.level}{node.module or ''} import"
                targets = [node.module] if node.module else [alias.name for alias in node.names]
                assert set(targets) <= siblings, f"{f}.py imports {targets}, not a file of models/"
                continue
            else:
                continue
            own = {"sentence_transformers"} if f == "sentence_transformers_multiencoder" else set()
            outside = {t for t in tops if t not in sys.stdlib_module_names} - allowed - own
            assert not outside, f"models/{f}.py imports {sorted(outside)}"


def _script_files() -> list[str]:
    files = [os.path.join(REPO_ROOT, f) for f in RUN_SCRIPTS]
    for folder in SCRIPT_DIRS:
        root = os.path.join(REPO_ROOT, folder)
        files += [os.path.join(root, f) for f in sorted(os.listdir(root)) if f.endswith(".py")]
    return files


def _is_script(path: str) -> bool:
    return "__main__" in open(path, encoding="utf-8").read()


@pytest.mark.parametrize("path", _script_files(), ids=lambda p: os.path.relpath(p, REPO_ROOT))
def test_scripts_stand_alone(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    scripts = {os.path.basename(p)[:-3] for p in _script_files() if _is_script(p)}
    in_benchmarks = os.path.basename(os.path.dirname(path)) == "benchmarks"
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            assert top not in ("scripts", "benchmarks"), f"imports {name}"
            if in_benchmarks and top in BENCHMARK_HELPERS | BENCHMARK_SCRIPT_IMPORTS:
                continue
            assert top not in scripts, f"imports the script {top}.py"
        # no sys.path edits: sys.path.insert/append/extend(...), sys.path[...] = ..., sys.path = ...
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
                and node.value.id == "sys":
            pytest.fail(f"{os.path.relpath(path, REPO_ROOT)} uses sys.path (line {node.lineno})")
