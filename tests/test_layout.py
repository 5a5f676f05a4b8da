"""The house rules that keep the code easy to find: the map of rooms in CONTRIBUTING.md matches the
folders, no module imports itself round a circle (nor does a room), and no function is over 60 lines."""

import ast
import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spacy_elmo"
MAX_FUNCTION_LINES = 60
CHECKED_TREES = ("spacy_elmo", "training", "bench", "tests", "scripts")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> Dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported_modules(path: Path, known: Set[str]) -> Set[str]:
    """The package's modules that ``path`` imports anywhere in its body (function-level imports
    too: a circle through a late import is still a circle)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {module for module in found if module in known and module != name}


def import_graph() -> Dict[str, Set[str]]:
    modules = package_modules()
    return {name: imported_modules(path, set(modules)) for name, path in modules.items()}


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One circle in ``graph`` as a list of nodes, or [] when there is none."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return []


def room_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_module_imports_itself_round_a_circle():
    graph = import_graph()
    # the top-level __init__ gathers the public API from every room; nothing inside imports it
    assert not any("spacy_elmo" in targets for targets in graph.values()), "a module imports spacy_elmo itself"
    assert find_cycle(graph) == []


def room_graph() -> Dict[str, Set[str]]:
    """Room -> the rooms it imports; a room is a subpackage, or a top-level module."""
    rooms: Dict[str, Set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        if module in ("spacy_elmo", "spacy_elmo.__main__"):
            continue
        rooms[room_of(module)].update(room_of(target) for target in targets if room_of(target) != room_of(module))
    return rooms


def test_rooms_import_each_other_in_one_direction():
    assert find_cycle(room_graph()) == []


def test_a_room_imports_only_the_rooms_above_it_in_the_map():
    order = [folder.rstrip("/").replace("/", ".") for folder in map_rows() if folder.startswith("spacy_elmo/")]
    position = {room: order.index(room) for room in order if room != "spacy_elmo"}
    for top_level in package_modules():  # files.py, choices.py: the map's spacy_elmo/ row
        if top_level.count(".") == 1 and not (PACKAGE / top_level.split(".")[1]).is_dir():
            position[top_level] = order.index("spacy_elmo")
    for room, targets in room_graph().items():
        for target in targets:
            assert position[target] < position[room], f"{room} imports {target}, which the map puts below it"


def test_the_finder_sees_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def map_rows() -> Dict[str, Set[str]]:
    """CONTRIBUTING.md's map: folder -> the module files its row names."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("<!-- --8<-- [start:rooms] -->")[1].split("<!-- --8<-- [end:rooms] -->")[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        folder = re.fullmatch(r"`([\w/]+/)`", cells[0]) if len(cells) >= 2 else None
        if folder:
            rows[folder.group(1)] = set(re.findall(r"`([\w]+\.py)`", cells[1]))
    return rows


def folders_with_modules() -> Dict[str, Set[str]]:
    found: Dict[str, Set[str]] = defaultdict(set)
    for tree in ("spacy_elmo", "training", "bench"):
        for path in (ROOT / tree).rglob("*.py"):
            if path.name != "__init__.py":
                found[str(path.parent.relative_to(ROOT)) + "/"].add(path.name)
    return found


def test_the_map_in_contributing_names_every_folder_and_module_as_they_are():
    rows, folders = map_rows(), folders_with_modules()
    assert set(rows) == set(folders), "folders in the map but not the code, or the other way round"
    for folder, modules in folders.items():
        assert rows[folder] == modules, f"{folder}: the map names {sorted(rows[folder] ^ modules)} wrongly"


def long_functions() -> List[str]:
    found = []
    for tree in CHECKED_TREES:
        for path in (ROOT / tree).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_is_over_60_lines():
    assert long_functions() == []


@pytest.mark.parametrize("room", sorted({room_of(m) for m in package_modules()} - {"spacy_elmo.__main__"}))
def test_every_room_says_what_it_holds(room):
    path = PACKAGE / room.partition(".")[2].replace(".", "/")
    init = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    assert ast.get_docstring(ast.parse(init.read_text())), f"{init} has no docstring"


def test_the_readme_is_short_enough_to_read_through():
    """The house rule: README.md under 10,000 characters; detail goes to docs/."""
    length = len((ROOT / "README.md").read_text(encoding="utf-8"))
    assert 2_000 < length < 10_000, length
