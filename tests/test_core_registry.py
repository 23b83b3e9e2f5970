"""The one registry policy (:mod:`editlens.core.registry`), tested once on
standalone registries: lazy ``module:attr`` targets, plugins loaded once
under a re-entrant lock, a broken plugin warned about and skipped, built-ins
protected, close-match suggestions. Then one test per user (metrics,
editors, benchmarks) that it goes through the shared class, including the
four bench-registry faults it fixes and an editor plugin bringing a new kind."""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

import editlens.core.registry as core_registry
from editlens.bench.base import Benchmark, BenchSpec
from editlens.core.registry import Registry, load_target
from editlens.editors.base import Editor, EditOutput
from editlens.editors.spec import EditorSpec
from editlens.errors import InputError

runner = CliRunner()
#: the registry a plugin module (written by a test) registers into while it is being loaded
REENTRANT: dict[str, Registry] = {}


def _fake_entry_points(monkeypatch, group: str, eps: list[EntryPoint], calls: list[str] | None = None,
                       delay: float = 0.0) -> None:
    def found(group: str = "") -> list[EntryPoint]:
        if calls is not None:
            calls.append(group)
        time.sleep(delay)
        return [ep for ep in eps if ep.group == group]

    monkeypatch.setattr(core_registry, "entry_points", lambda group: found(group))


def _module(tmp_path, monkeypatch, name: str, code: str) -> str:
    (tmp_path / f"{name}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


# -- the policy, once --------------------------------------------------------------------------------


def test_lazy_targets_are_imported_only_when_used(tmp_path, monkeypatch):
    mod = _module(tmp_path, monkeypatch, "b45_lazy_target", "THING = {'answer': 42}\n")
    reg: Registry[str] = Registry("thing", builtins=lambda: [("thing", f"{mod}:THING")])
    assert reg.names() == ["thing"] and reg.get("thing") == f"{mod}:THING"
    assert mod not in sys.modules  # listing and looking up import nothing
    assert reg.load("thing") == {"answer": 42} and mod in sys.modules
    assert load_target(42) == 42 and load_target("os.path:join.__name__") == "join"
    with pytest.raises(ImportError, match="has no attribute 'nope'"):
        load_target("os.path:nope", "metric 'x'")
    with pytest.raises(ValueError, match="expected 'module:attribute'"):
        load_target("os.path")


def test_plugins_load_once_under_a_lock_and_a_plugin_may_register_while_loading(tmp_path, monkeypatch):
    mod = _module(tmp_path, monkeypatch, "b45_reentrant_plugin",
                  "import test_core_registry as t\n"
                  "t.REENTRANT['reg'].register('side', 'registered while its module loads')\n"
                  "VALUE = 'the entry point itself'\n")
    calls: list[str] = []
    _fake_entry_points(monkeypatch, "test.things", [EntryPoint("own", f"{mod}:VALUE", "test.things")],
                       calls, delay=0.05)  # a slow scan: other threads must wait, not see a half-filled registry
    reg: Registry[str] = Registry("thing", group="test.things", builtins=lambda: [("base", "built in")])
    monkeypatch.setitem(REENTRANT, "reg", reg)
    seen, errors = [], []

    def look() -> None:
        try:
            seen.append((reg.get("own"), reg.get("side"), reg.get("base")))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=look) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(seen) == 8
    assert set(seen) == {("the entry point itself", "registered while its module loads", "built in")}
    assert calls == ["test.things"]  # loaded once
    reg.names()
    assert calls == ["test.things"]


def test_a_broken_plugin_is_warned_about_and_skipped(monkeypatch):
    def only_ints(obj, ep):
        if not isinstance(obj, int):
            raise TypeError(f"it provides no number ({ep.value})")
        return ep.name, obj

    _fake_entry_points(monkeypatch, "test.nums", [
        EntryPoint("missing", "no_such_module_b45:X", "test.nums"),
        EntryPoint("wrong", "os:sep", "test.nums"),
        EntryPoint("good", "errno:ENOENT", "test.nums")])
    reg: Registry[int] = Registry("number", group="test.nums", from_plugin=only_ints)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = reg.names()
    assert names == ["good"] and reg.get("good") == 2
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(texts) == 2
    assert "number plugin 'missing' could not be loaded" in texts[0] and "ModuleNotFoundError" in texts[0]
    assert "number plugin 'wrong' could not be loaded" in texts[1] and "it provides no number (os:sep)" in texts[1]


def test_a_failed_load_leaves_the_registry_unloaded_and_is_tried_again():
    tries = []

    def flaky() -> list[tuple[str, int]]:
        tries.append(1)
        if len(tries) == 1:
            raise OSError("catalog not readable")
        return [("one", 1)]

    reg: Registry[int] = Registry("number", builtins=flaky)
    with pytest.raises(OSError, match="catalog not readable"):
        reg.names()
    assert reg.names() == ["one"] and len(tries) == 2  # not left marked as loaded and empty


def test_builtins_are_protected_and_overwrite_is_needed_for_the_rest(monkeypatch):
    _fake_entry_points(monkeypatch, "test.nums", [EntryPoint("one", "errno:ENOENT", "test.nums")])
    reg: Registry[int] = Registry("number", group="test.nums", builtins=lambda: [("one", 1)])
    with pytest.warns(RuntimeWarning, match="plugin 'one' .* registers 'one', which already exists"):
        assert reg.get("one") == 1  # the plugin's impostor is left out
    assert reg.is_builtin("one")
    with pytest.raises(ValueError, match="'one' is built in and cannot be replaced"):
        reg.register("one", 11, overwrite=True)
    with pytest.raises(ValueError, match="built in and cannot be removed"):
        reg.unregister("one")
    assert reg.register("one", 1) == 1  # the same entry again: nothing to refuse
    reg.register("two", 2)
    with pytest.raises(ValueError, match="'two' is already registered"):
        reg.register("two", 22)
    assert reg.register("two", 22, overwrite=True) == 22 and reg.get("two") == 22
    reg.unregister("two")
    assert "two" not in reg and reg.names() == ["one"]


def test_unknown_names_suggest_close_matches_in_the_registrys_error():
    reg: Registry[int] = Registry("colour", builtins=lambda: [("red", 1), ("green", 2), ("grey", 3)],
                                  key=str.lower, error=InputError, hint="Run `colours` to list them.")
    assert reg.get("RED") == 1 and "Red" in reg
    with pytest.raises(InputError) as exc:
        reg.get("gren")
    assert str(exc.value) == "unknown colour 'gren'. Did you mean green, grey? Run `colours` to list them."
    with pytest.raises(InputError, match=r"^unknown colour 'blue'\. Run"):
        reg.get("blue")


def test_isolated_undoes_what_the_block_registered():
    reg: Registry[int] = Registry("number", builtins=lambda: [("one", 1)])
    reg.register("kept", 5)
    with reg.isolated():
        reg.register("temporary", 7)
        reg.unregister("kept")
        assert reg.names() == ["one", "temporary"]
    assert reg.names() == ["one", "kept"]


# -- the metric registry ----------------------------------------------------------------------------


def test_metrics_go_through_the_shared_registry(monkeypatch):
    import editlens.metrics.registry as metrics_registry
    from editlens.errors import UnknownMetricError

    assert isinstance(metrics_registry.METRICS, Registry)
    _fake_entry_points(monkeypatch, "editlens.metrics",
                       [EntryPoint("broken", "no_such_module_b45:X", "editlens.metrics")])
    monkeypatch.setattr(metrics_registry, "METRICS", metrics_registry.METRICS.fresh())
    with pytest.warns(RuntimeWarning, match="metric plugin 'broken' could not be loaded"):
        assert metrics_registry.get_spec("Clip-T") is metrics_registry.METRICS.get("clip_t")
    assert metrics_registry.METRICS.is_builtin("ssim")
    with pytest.raises(UnknownMetricError, match="Did you mean ssim"):
        metrics_registry.create_metric("sssim")


# -- the benchmark registry: its four faults ---------------------------------------------------------


class PluginBench(Benchmark):
    spec = BenchSpec(name="b45-plugin-bench", title="A plugin's benchmark", homepage="https://example.org",
                     download="echo none", layout="nothing")


class ImpostorGEdit(Benchmark):
    spec = BenchSpec(name="gedit", title="Not GEdit", homepage="https://example.org", download="echo none",
                     layout="nothing")


@pytest.fixture
def fresh_bench(monkeypatch):
    import editlens.bench.registry as bench_registry

    monkeypatch.setattr(bench_registry, "BENCHMARKS", bench_registry.BENCHMARKS.fresh())
    return bench_registry


def test_bench_loading_is_locked_and_once(fresh_bench, monkeypatch):
    calls: list[str] = []
    _fake_entry_points(monkeypatch, "editlens.benchmarks",
                       [EntryPoint("b45", "test_core_registry:PluginBench", "editlens.benchmarks")], calls, delay=0.05)
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(fresh_bench.names())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 6 and all(s == seen[0] for s in seen)
    assert {"gedit", "mmrb2", "b45-plugin-bench"} <= set(seen[0]) and calls == ["editlens.benchmarks"]
    assert isinstance(fresh_bench.get("b45-plugin-bench"), PluginBench)


def test_bench_a_failed_load_is_not_marked_loaded(fresh_bench, monkeypatch):
    _fake_entry_points(monkeypatch, "editlens.benchmarks", [])
    monkeypatch.setattr(fresh_bench, "BUILTIN", (*fresh_bench.BUILTIN, "no_such_bench_module_b45"))
    with pytest.raises(ModuleNotFoundError):
        fresh_bench.names()
    monkeypatch.setattr(fresh_bench, "BUILTIN", fresh_bench.BUILTIN[:-1])
    assert "gedit" in fresh_bench.names()  # before: marked loaded first, so left half-filled for good


def test_bench_a_broken_plugin_is_warned_about_and_bench_commands_still_run(fresh_bench, monkeypatch):
    from editlens.cli.main import app

    _fake_entry_points(monkeypatch, "editlens.benchmarks", [
        EntryPoint("broken", "no_such_module_b45:Bench", "editlens.benchmarks"),
        EntryPoint("not-a-bench", "os:sep", "editlens.benchmarks"),
        EntryPoint("b45", "test_core_registry:PluginBench", "editlens.benchmarks")])
    with pytest.warns(RuntimeWarning) as caught:
        out = runner.invoke(app, ["bench", "list"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "b45-plugin-bench" in out.output and "gedit" in out.output
    texts = " | ".join(str(w.message) for w in caught)
    assert "benchmark plugin 'broken' could not be loaded" in texts and "no_such_module_b45" in texts
    assert "benchmark plugin 'not-a-bench' could not be loaded" in texts and "not a Benchmark subclass" in texts


def test_bench_a_plugin_or_code_cannot_replace_a_builtin(fresh_bench, monkeypatch):
    from editlens.bench.gedit import GEditBench

    _fake_entry_points(monkeypatch, "editlens.benchmarks",
                       [EntryPoint("gedit", "test_core_registry:ImpostorGEdit", "editlens.benchmarks")])
    with pytest.warns(RuntimeWarning, match="registers 'gedit', which already exists"):
        assert type(fresh_bench.get("gedit")) is GEditBench
    with pytest.raises(ValueError, match="'gedit' is built in and cannot be replaced"):
        fresh_bench.register(ImpostorGEdit, overwrite=True)
    with pytest.raises(ValueError, match="built in and cannot be removed"):
        fresh_bench.unregister("gedit")
    assert fresh_bench.get("gedit").spec.title != "Not GEdit"


# -- the editor registry: a plugin brings a new kind -------------------------------------------------


class TintEditor(Editor):
    """A plugin's kind: ``--editor tint:COLOUR`` blends each source half-way with COLOUR."""

    def __init__(self, colour: str, name: str | None = None) -> None:
        from PIL import ImageColor

        self.colour = ImageColor.getrgb(colour)[:3]
        self.name = name or "tint"

    def edit_batch(self, requests):  # type: ignore[no-untyped-def]
        out = []
        for r in requests:
            src = r.source.convert("RGB")
            out.append(EditOutput(image=Image.blend(src, Image.new("RGB", src.size, self.colour), 0.5)))
        return out

    def settings(self) -> dict:
        return {"colour": list(self.colour)}


TintEditor.spec = EditorSpec("tint", "tint", TintEditor, value_option="colour", description="blend with a colour")


def grey_factory(level: str) -> Editor:
    """A kind whose target is a factory function, not an Editor subclass."""
    return TintEditor(f"rgb({level},{level},{level})", name="grey")


def not_an_editor() -> str:
    return "an image, honestly"


GREY = EditorSpec("grey", "grey", "test_core_registry:grey_factory", value_option="level")
IMPOSTOR = EditorSpec("diffusers", "tint", TintEditor, description="an impostor")


@pytest.fixture
def editor_plugins(monkeypatch):
    import editlens.editors.registry as editors_registry

    _fake_entry_points(monkeypatch, "editlens.editors", [
        EntryPoint("tint", "test_core_registry:TintEditor", "editlens.editors"),
        EntryPoint("grey", "test_core_registry:GREY", "editlens.editors"),
        EntryPoint("diffusers", "test_core_registry:IMPOSTOR", "editlens.editors")])
    monkeypatch.setattr(editors_registry, "EDITORS", editors_registry.EDITORS.fresh())
    return editors_registry


def test_an_editor_plugin_brings_a_new_kind_usable_from_the_cli(editor_plugins, tmp_path):
    from editlens.cli.main import app

    with pytest.warns(RuntimeWarning, match="registers 'diffusers', which already exists"):
        kinds = editor_plugins.kinds()
    assert {"tint", "grey", "diffusers", "callable"} <= set(kinds)
    assert editor_plugins.EDITORS.get("diffusers").description != "an impostor"  # a built-in kind stays
    spec, options = editor_plugins.resolve_spec("tint:#ff0000")
    assert spec.name == "tint" and options == {"colour": "#ff0000"}

    Image.fromarray(np.full((8, 10, 3), 100, np.uint8)).save(tmp_path / "src.png")
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "e0", "source": "src.png", "instruction": "redder"}) + "\n")
    res = runner.invoke(app, ["edit", str(tmp_path / "in.jsonl"), "--editor", "tint:#ff0000", "--out",
                              str(tmp_path / "out"), "--no-progress"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    (row,) = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    got = np.asarray(Image.open(tmp_path / "out" / row["edited"]))
    assert row["model"] == "tint" and got.shape == (8, 10, 3)
    assert np.all(np.abs(got.astype(int) - [178, 50, 50]) <= 1)  # half-way between 100 and (255, 0, 0)

    grey = editor_plugins.create_editor("grey:20")  # a factory as the kind's target
    assert grey.name == "grey" and grey.colour == (20, 20, 20) and grey.spec is GREY


def test_editor_kinds_are_checked(editor_plugins):
    with pytest.warns(RuntimeWarning):
        editor_plugins.kinds()
    with pytest.raises(ValueError, match="a new kind needs value_option"):
        EditorSpec("sepia", "sepia", TintEditor)
    with pytest.raises(ValueError, match="unknown kind 'sepia'"):
        editor_plugins.register_editor(EditorSpec("my-sepia", "sepia", TintEditor))
    named = editor_plugins.register_editor(EditorSpec("red-tint", "tint", TintEditor, defaults={"colour": "red"}))
    assert editor_plugins.create_editor("red-tint").colour == (255, 0, 0) and named.kind == "tint"
    with pytest.raises(ValueError, match="'callable' is built in"):
        editor_plugins.register_editor(EditorSpec("callable", "tint", TintEditor), overwrite=True)
    bad = editor_plugins.register_editor(EditorSpec("not-an-editor", "tint", "test_core_registry:not_an_editor"))
    with pytest.raises(InputError, match="not an editlens Editor"):
        editor_plugins.create_editor(bad.name)
