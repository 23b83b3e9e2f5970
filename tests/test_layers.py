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
    {"meta", "bench"},  # bench: benchmark adapters and protocols
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
