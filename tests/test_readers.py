"""Every reader of a JSON file goes through editlens.core.io: a broken file is an InputError naming the file,
what it was read as, and the problem (never a json traceback, never a silent default)."""

from __future__ import annotations

import pytest

from editlens.errors import InputError


def _broken(path):  # type: ignore[no-untyped-def]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"a": 1,')
    return path


def _readers(tmp_path):  # type: ignore[no-untyped-def]
    """(reader call, the file it reads, the words the error must carry)."""
    from editlens.annotate.interop import import_labelstudio
    from editlens.bench.prompts import read_json as prompts_json
    from editlens.bench.published import read_json as published_json
    from editlens.dice.data.coco import CocoSet
    from editlens.dice.released import load_preset
    from editlens.reporting.collect import read_meta_eval
    from editlens.runner.arena import load_arena

    images = tmp_path / "images"
    images.mkdir()
    return [
        (lambda p: prompts_json(p, "--prompts-from"), "prompts.json", "(given by --prompts-from)"),
        (published_json, "published.json", ""),
        (lambda p: CocoSet(p, images), "instances.json", "(COCO annotations)"),
        (load_preset, "preset.json", "(a DICE preset)"),
        (read_meta_eval, "meta.json", "(meta-evaluation result)"),
        (load_arena, "arena.json", "(arena result)"),
        (lambda p: import_labelstudio(tmp_path / "task", p), "export.json", "(Label Studio's JSON export)"),
    ]


def test_a_broken_json_file_is_named_by_every_reader(tmp_path):
    for read, name, what in _readers(tmp_path):
        f = _broken(tmp_path / name)
        with pytest.raises(InputError) as err:
            read(f)
        assert f"{f}: not valid JSON {what}".rstrip() in str(err.value), (name, str(err.value))


def test_a_missing_file_is_named_with_what_it_is_for(tmp_path):
    from editlens.reporting.collect import read_meta_eval
    from editlens.runner.merge import _load

    with pytest.raises(InputError, match=r"nope.json: no such file \(meta-evaluation result\); save one with "
                                         r"`editlens meta-eval ... --json > nope.json`"):
        read_meta_eval(tmp_path / "nope.json")
    with pytest.raises(InputError, match=r"s1/shard.json: no such file; is .*s1 a shard folder of `editlens edit"):
        _load(tmp_path / "s1" / "shard.json")
    with pytest.raises(InputError, match=r"s1/shard.json: not valid JSON: "):
        _load(_broken(tmp_path / "s1" / "shard.json"))


def test_a_broken_probe_file_is_reported_in_the_report_not_raised(tmp_path):
    from editlens.reporting.trust_html import PROBE_FILE, load_probe

    _broken(tmp_path / PROBE_FILE)
    doc = load_probe(tmp_path)
    assert doc is not None and doc["error"].startswith(f"{tmp_path / PROBE_FILE}: not valid JSON (probe result)")


def test_jsonl_readers_name_the_line(tmp_path):
    from editlens.adiee.data import read_edits
    from editlens.dice.evaluation import load_ground_truth, load_predictions

    f = tmp_path / "edits.jsonl"
    f.write_text('{"id": \n')
    for read in (read_edits, load_predictions, load_ground_truth):
        with pytest.raises(InputError, match=r"edits.jsonl:1: not valid JSON"):
            read(f)
    f.write_text("\n\n")
    with pytest.raises(InputError, match=r"edits.jsonl: no rows"):
        read_edits(f)
    f.write_text('{"id": "a", "differences": []}\n')
    with pytest.raises(InputError, match=r"edits.jsonl:1: needs 'width' and 'height'"):
        load_ground_truth(f)
    f.write_text('{"id": "a", "differences": [], "width": 4, "height": 4}\n["not an object"]\n')
    with pytest.raises(InputError, match=r"edits.jsonl:2: expected a JSON object, got list"):
        load_ground_truth(f)
