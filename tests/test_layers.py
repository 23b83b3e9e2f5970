"""Folders show the architecture: each layer imports only layers below it
(and editlens.testing, the tools for tests and benchmarks, is imported by no
part of the package)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "editlens"
#: Lowest first. A module may import its own layer or any lower one.
LAYERS = [
    {"errors", "paths", "__init__", "templates"},  # templates: data files only
    {"core"},
    {"data"},
    {"models"},
    {"metrics", "backends", "editors"},
    {"judges"},
    {"meta"},  # pure statistics of agreement with people
    {"bench"},  # every benchmark, one file each, and the one meta-evaluation path
    {"training"},
    {"dice", "adiee", "twoframe", "rewardmodels"},
    {"runner"},
    {"trust"},
    {"reporting"},
    {"annotate"},  # the labelling server: people's votes, on the report's look and the arena's scheduler
    {"cli"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        out |= {n.split(".")[1] for n in names if n.startswith("editlens.") and len(n.split(".")) > 1}
    return out


def test_every_top_level_part_has_a_layer():
    parts = {p.name if p.is_dir() else p.stem for p in PACKAGE.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert parts - {"testing"} <= set(LEVEL), sorted(parts - set(LEVEL) - {"testing"})


def test_no_layer_imports_a_layer_above_it():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        part = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if part == "testing":
            continue
        for dst in _imports(path):
            if dst == "testing":
                wrong.append(f"{rel} imports editlens.testing (tools for tests, not the product)")
            elif dst in LEVEL and LEVEL[dst] > LEVEL[part]:
                wrong.append(f"{rel} ({part}) imports editlens.{dst}, a layer above it")
    assert not wrong, "\n".join(sorted(wrong))


def test_every_lazy_import_string_names_a_real_object():
    """Registries name classes of higher layers lazily ("editlens.dice.pipeline:DiceEvaluator": a spec
    must not import the system it describes). The import test above cannot see such strings, so this one
    resolves every one of them: a renamed module or class fails here, not in a user's run."""
    import importlib
    import re

    target = re.compile(r"^editlens(?:\.\w+)+:\w+$")
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and target.match(node.value):
                found.setdefault(node.value, str(path.relative_to(PACKAGE)))
    assert len(found) > 20  # the catalog's metrics, the model kinds' loaders...
    broken = []
    for ref, where in sorted(found.items()):
        module, _, attr = ref.partition(":")
        try:
            getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            broken.append(f"{where}: {ref} ({type(exc).__name__}: {exc})")
    assert broken == []


def test_meta_is_pure_statistics_and_never_imports_bench():
    """meta/ computes (protocols, correlation, bootstrap, calibration fit and apply, arena
    statistics); reading a benchmark's files is bench/'s job, so no arrow runs back up from
    meta/ to bench/ (issue 45: the bench <-> meta package loop), lazy imports included."""
    wrong = [f"{p.relative_to(PACKAGE)} imports editlens.bench" for p in sorted((PACKAGE / "meta").rglob("*.py"))
             if "bench" in _imports(p)]
    assert not wrong, "\n".join(wrong)


def test_meta_calibration_and_meta_reports_make_no_circle():
    """meta/reports reads meta/calibration (the summary of a report), never the other way round."""
    assert "editlens.meta.reports" not in (PACKAGE / "meta" / "calibration.py").read_text(encoding="utf-8")


# -- import circles ------------------------------------------------------------------------------------------
#: None: a new circle is opened where it is made, never allowed here.
ALLOWED_MODULE_CIRCLES: set[frozenset[str]] = set()
ALLOWED_PART_CIRCLES: set[frozenset[str]] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` (names for annotations, never imported when running)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _import_graph() -> dict[str, set[str]]:
    """Module -> the editlens modules it imports, at module level or inside a function (the module
    named: ``from editlens.a import b`` is ``editlens.a.b`` when that is a module, else ``editlens.a``)."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        names: list[str] = []
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package up
                    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if base else pkg
                names += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        targets = {known(n) for n in names if n == "editlens" or n.startswith("editlens.")}
        graph[mod] = {t for t in targets if t and t not in (mod, "editlens")}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of ``graph`` with more than one node (Tarjan's, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return sorted(found)


def _shown(part: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(part)
    return "; ".join(f"{a} -> {b}" for a in part for b in sorted(graph.get(a, set()) & inside))


def test_circles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}, "f": {"f"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _shown(["a", "b", "c"], graph) == "a -> b; b -> c; c -> a"


def test_no_import_circle_between_modules():
    """Two modules that import each other (at the top or inside a function) are one module in two files:
    neither can be read, tested or moved alone. ``if TYPE_CHECKING:`` imports do not count."""
    graph = _import_graph()
    assert "editlens.data.tables" in graph["editlens.data.manifest"]  # the graph sees function-level imports too
    circles = [c for c in _circles(graph) if frozenset(c) not in ALLOWED_MODULE_CIRCLES]
    assert circles == [], "\n".join(_shown(c, graph) for c in circles)


def test_no_import_circle_between_parts():
    """The same between the package's parts (``bench`` <-> ``meta``): the layer test allows imports within a
    layer, so two parts of one layer could still reach into each other."""
    graph: dict[str, set[str]] = {}
    for mod, targets in _import_graph().items():
        part = mod.split(".")[1] if "." in mod else mod
        graph.setdefault(part, set()).update(t.split(".")[1] for t in targets if t.split(".")[1] != part)
    circles = [c for c in _circles(graph) if frozenset(c) not in ALLOWED_PART_CIRCLES]
    assert circles == [], "\n".join(_shown(c, graph) for c in circles)


def test_saved_weights_reach_a_model_only_through_models():
    """Loading an adapter or a state dict into a VLM is done once, in editlens.models (the one loader: strict
    key checks, the precision policy); everything else asks it. Training a new adapter (``get_peft_model``)
    is not loading and stays with its trainer."""
    loading = ("set_peft_model_state_dict", "load_peft_weights", "PeftModel.from_pretrained", "from_pretrained(None")
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in ("models", "testing"):
            continue
        text = path.read_text(encoding="utf-8")
        wrong += [f"{rel}: {call}" for call in loading if call in text]
    assert wrong == []
