"""The layers of the README's architecture section, checked on every test run.

Why a test: an import that crosses a layer (the master daemon importing the driver runtime,
the worker importing the master's package, `rpc` importing a deploy message) compiles and
runs fine, and is only found when it closes an import cycle or drags a daemon's
dependencies into a task process. The import-linter contracts in pyproject.toml
(`[tool.importlinter]`) write the layers down; `lint-imports` checks them here, and a copy of
the tree with one deliberate violation shows that the check can fail. A module-level cycle
finder (grimp's graph, Tarjan's algorithm) keeps `ember/` free of import cycles, and the
README's message table is checked against `ember/deploy/messages.py`.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")

# Runs in a child so that it reads the tree given on PYTHONPATH, not the `ember` this
# process already imported. Prints one line per cycle (its modules, sorted).
_FIND_CYCLES = r"""
import sys
import grimp

graph = grimp.build_graph("ember", cache_dir=None, exclude_type_checking_imports=True)
sys.setrecursionlimit(10000)
index, low, stack, on_stack, cycles = {}, {}, [], set(), []

def visit(module):
    index[module] = low[module] = len(index)
    stack.append(module)
    on_stack.add(module)
    for imported in sorted(graph.find_modules_directly_imported_by(module)):
        if imported not in index:
            visit(imported)
            low[module] = min(low[module], low[imported])
        elif imported in on_stack:
            low[module] = min(low[module], index[imported])
    if low[module] == index[module]:
        component = []
        while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == module:
                break
        if len(component) > 1 or module in graph.find_modules_directly_imported_by(module):
            cycles.append(sorted(component))

for module in sorted(graph.modules):
    if module not in index:
        visit(module)
for cycle in cycles:
    print(" ".join(cycle))
"""


def _env(tree: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": tree}


def lint_imports(tree: str) -> subprocess.CompletedProcess:
    return subprocess.run([LINT_IMPORTS, "pyproject.toml", "--no-cache"], cwd=tree,
                          env=_env(tree), capture_output=True, text=True, timeout=120)


def import_cycles(tree: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", _FIND_CYCLES], cwd=tree, env=_env(tree),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> str:
    """A copy of ember/ and pyproject.toml to break on purpose."""
    tree = str(tmp_path_factory.mktemp("tree"))
    shutil.copytree(os.path.join(ROOT, "ember"), os.path.join(tree, "ember"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tree)
    return tree


def test_import_contracts_are_kept():
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_a_layer_violation_breaks_the_contract(tree_copy):
    """rpc importing a scheduler module (directly here; a chain would fail the same way)."""
    path = os.path.join(tree_copy, "ember", "rpc", "_violation.py")
    with open(path, "w") as f:
        f.write("from ember.scheduler import task  # noqa: F401\n")
    try:
        r = lint_imports(tree_copy)
    finally:
        os.remove(path)
    assert r.returncode != 0
    assert "BROKEN" in r.stdout and "ember.rpc._violation -> ember.scheduler.task" in r.stdout


def test_master_and_worker_importing_each_other_breaks_the_contract(tree_copy):
    path = os.path.join(tree_copy, "ember", "deploy", "worker", "_violation.py")
    with open(path, "w") as f:
        f.write("from ember.deploy.master import uploads  # noqa: F401\n")
    try:
        r = lint_imports(tree_copy)
    finally:
        os.remove(path)
    assert r.returncode != 0
    assert "ember.deploy.worker._violation -> ember.deploy.master.uploads" in r.stdout


def test_no_import_cycle_in_ember():
    assert import_cycles(ROOT) == []


def test_the_cycle_finder_finds_a_cycle(tree_copy):
    paths = [os.path.join(tree_copy, "ember", "util", "_cycle_a.py"),
             os.path.join(tree_copy, "ember", "util", "_cycle_b.py")]
    with open(paths[0], "w") as f:
        f.write("from ember.util import _cycle_b  # noqa: F401\n")
    with open(paths[1], "w") as f:
        f.write("def later():\n    from ember.util import _cycle_a  # noqa: F401\n")
    try:
        cycles = import_cycles(tree_copy)
    finally:
        for p in paths:
            os.remove(p)
    assert cycles == ["ember.util._cycle_a ember.util._cycle_b"]


def test_versions_come_from_ember_version():
    import ember
    from ember import version
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert version.EMBER_VERSION == project["version"]
    assert ember.__version__ == version.__version__ == version.SPARK_VERSION
    with open(version.__file__) as f:   # the bottom of the bottom layer imports nothing
        tree = ast.parse(f.read())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _message_classes() -> list[str]:
    """ember/deploy/messages.py's classes and the resource and executor messages it
    re-exports."""
    names = []
    for module in ("messages.py", "resource_messages.py", "executor_messages.py"):
        with open(os.path.join(ROOT, "ember", "deploy", module)) as f:
            tree = ast.parse(f.read())
        names += [n.name for n in tree.body if isinstance(n, ast.ClassDef)
                  and not n.name.startswith("_")]
    return names


def _architecture_section() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("## Architecture")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_readme_names_the_handler_of_every_deploy_message():
    """Every class of ember/deploy/messages.py is a row of the README's message table (the
    file that handles it, or, for payloads and states, what carries them), and every file the
    table names exists."""
    section = _architecture_section()
    rows = {m.group(1): m.group(2) for m in
            re.finditer(r"^\| `(\w+)` \| (.+?) \|$", section, re.MULTILINE)}
    classes = set(_message_classes())
    missing = sorted(classes - set(rows))
    assert not missing, f"README architecture section: no table row for {missing}"
    stale = sorted(set(rows) - classes)
    assert not stale, f"README table rows for messages that no longer exist: {stale}"
    for name, where in rows.items():
        for path in re.findall(r"`(ember/[\w/]+\.py)`", where):
            assert os.path.isfile(os.path.join(ROOT, path)), f"{name}: no file {path}"


def test_one_log_format_and_one_pickle_fallback():
    """The bottom layer's helpers stay the only copies: no module but ember/util/logs.py
    spells the log format, none but ember/util/pickling.py falls back to cloudpickle.dumps."""
    spelled, fallbacks = [], []
    for folder, _, files in os.walk(os.path.join(ROOT, "ember")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            with open(path) as f:
                text = f.read()
            if "%(asctime)" in text and rel != os.path.join("ember", "util", "logs.py"):
                spelled.append(rel)
            if re.search(r"except Exception:\s*\n\s*import cloudpickle", text) and \
                    rel != os.path.join("ember", "util", "pickling.py"):
                fallbacks.append(rel)
    assert spelled == [], f"use ember.util.logs instead: {spelled}"
    assert fallbacks == [], f"use ember.util.pickling.dumps instead: {fallbacks}"
