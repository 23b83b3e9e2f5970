"""Job arrays: `--shard I/N` on `edit`, `run` and `bench run`, and `runs merge` joining the shards into the
folder one process writes (same image bytes, same manifest and result rows, same benchmark table), refusing
shards of another job (naming what differs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_editors import FAST, SCRIPTED, cli, digests, rows, write_inputs

from editlens.errors import InputError
from editlens.runner.shards import Shard, parse_shard, shard_of


def test_parse_and_split():
    assert parse_shard("1/4") == Shard(1, 4) and str(Shard(1, 4)) == "1/4" and parse_shard(None) is None
    for bad in ("4/4", "1/0", "a/b", "1-4", "-1/2"):
        with pytest.raises(InputError, match="--shard"):
            parse_shard(bad)
    ids = [f"edit-{i}" for i in range(200)]
    parts = [Shard(i, 3).select(ids, str) for i in range(3)]
    assert sorted(sum(parts, [])) == sorted(ids) and all(30 < len(p) < 100 for p in parts)  # a partition, balanced
    assert [shard_of(i, 3) for i in ids] == [shard_of(i, 3) for i in ids]  # by the id alone


@pytest.fixture(scope="module")
def tiny_ip2p(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from editlens.testing.tiny_editors import make_tiny_editor

    return make_tiny_editor(tmp_path_factory.mktemp("editor") / "ip2p", "instruct-pix2pix", image_size=32)


def _same_rows(a: Path, b: Path) -> None:
    assert rows(a / "manifest.jsonl") == rows(b / "manifest.jsonl")
    strip = ("seconds",)
    assert ([{k: v for k, v in r.items() if k not in strip} for r in rows(a / "generations.jsonl")]
            == [{k: v for k, v in r.items() if k not in strip} for r in rows(b / "generations.jsonl")])


def test_edit_shards_merge_to_the_one_process_folder(tiny_ip2p, tmp_path):
    manifest = write_inputs(tmp_path, 5)
    one = tmp_path / "one"
    assert cli("edit", manifest, "--editor", tiny_ip2p, "--out", one, "--samples", "2", *FAST).exit_code == 0
    parts = []
    for i in range(2):
        part = tmp_path / f"shard{i}"
        r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", part, "--samples", "2", "--shard", f"{i}/2", *FAST)
        assert r.exit_code == 0, r.output
        assert {x["edit_id"] for x in rows(part / "manifest.jsonl")} == {f"e{k}" for k in range(5)
                                                                        if shard_of(f"e{k}", 2) == i}
        parts.append(part)
    assert all(rows(p / "manifest.jsonl") for p in parts)  # both shards hold work
    # a shard folder rerun as another shard is refused (it would mix two shards)
    r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", parts[0], "--samples", "2", "--shard", "1/2", *FAST)
    assert r.exit_code == 2 and "shard" in r.output
    merged = tmp_path / "merged"
    r = cli("runs", "merge", merged, parts[1], parts[0])  # any order
    assert r.exit_code == 0, r.output
    assert "10 images" in r.output
    assert digests(merged) == digests(one)  # byte-identical images
    _same_rows(merged, one)
    ed = json.loads((merged / "editor.json").read_text())
    assert "shard" not in ed and ed["settings"] == json.loads((one / "editor.json").read_text())["settings"]
    # the merged folder is an ordinary edit folder: a rerun keeps every image
    r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", merged, "--samples", "2", *FAST)
    assert r.exit_code == 0 and "0 images generated, 10 kept" in r.output


def test_merge_refuses_shards_of_another_job(tmp_path):
    manifest = write_inputs(tmp_path, 4)
    a0, a1, b1, c1 = (tmp_path / n for n in ("a0", "a1", "b1", "c1"))
    base = ["--editor", SCRIPTED, "--no-progress"]
    assert cli("edit", manifest, *base, "--out", a0, "--shard", "0/2").exit_code == 0
    assert cli("edit", manifest, *base, "--out", a1, "--shard", "1/2").exit_code == 0
    assert cli("edit", manifest, *base, "--out", b1, "--shard", "1/2", "--seed", "7").exit_code == 0
    with pytest.raises(InputError, match=r"other editor settings, weights or seed.*seed 0 vs 7"):
        from editlens.runner.merge import merge_shards

        merge_shards(tmp_path / "m1", [a0, b1])
    (tmp_path / "other").mkdir()
    other = write_inputs(tmp_path / "other", 5)  # other data
    assert cli("edit", other, *base, "--out", c1, "--shard", "1/2").exit_code == 0
    r = cli("runs", "merge", tmp_path / "m2", a0, c1)
    assert r.exit_code == 2 and "input data" in r.output
    r = cli("runs", "merge", tmp_path / "m3", a0)
    assert r.exit_code == 2 and "1/2 missing" in r.output
    r = cli("runs", "merge", tmp_path / "m4", a0, a0)
    assert r.exit_code == 2 and "given twice" in r.output
    r = cli("runs", "merge", a0, a0, a1)
    assert r.exit_code == 2 and "merge into a new folder" in r.output
    assert not (tmp_path / "m1").exists()  # nothing written by a refused merge


def test_run_shards_merge_to_the_one_process_run(tmp_path):
    from helpers import EXAMPLES

    one, parts = tmp_path / "one", [tmp_path / "s0", tmp_path / "s1"]
    base = [EXAMPLES / "manifest.jsonl", "--metrics", "l1,ssim,change_map", "--no-progress"]
    assert cli("run", *base, "--out", one).exit_code == 0
    for i, p in enumerate(parts):
        r = cli("run", *base, "--out", p, "--shard", f"{i}/2")
        assert r.exit_code == 0, r.output
    assert 0 < len(rows(parts[0] / "results.jsonl")) < len(rows(one / "results.jsonl"))
    merged = tmp_path / "merged"
    r = cli("runs", "merge", merged, *parts)
    assert r.exit_code == 0, r.output
    assert rows(merged / "results.jsonl") == rows(one / "results.jsonl")
    a, b = (json.loads((d / "summary.json").read_text()) for d in (merged, one))
    assert (a["counts"], a["means"], a["samples"]) == (b["counts"], b["means"], b["samples"])
    # the merged store resumes as one run: nothing is recomputed
    r = cli("run", *base, "--out", merged)
    assert r.exit_code == 0 and "0 results computed" in r.output
    assert cli("report", merged).exit_code == 0


def test_bench_run_shards_merge_to_the_same_table(tmp_path):
    import bench_files as F
    from test_bench_run import INSTRUCTIONS, ScoringServer

    data = F.gedit(tmp_path / "gedit", instructions=INSTRUCTIONS)
    with ScoringServer().running() as url:
        def bench(out: Path, *extra: str) -> dict:
            r = cli("bench", "run", "gedit", "--data", data, "--editor", SCRIPTED, "--out", out, "--vlm", url,
                    "--cache", "none", "--n-boot", "50", "--json", "--no-report", *extra)
            assert r.exit_code == 0, r.output
            return json.loads(r.stdout)

        one = bench(tmp_path / "one")
        for i in range(2):
            bench(tmp_path / f"s{i}", "--shard", f"{i}/2")
    shard_cases = [len(rows(tmp_path / f"s{i}" / "items.jsonl")) for i in range(2)]
    assert all(shard_cases) and sum(shard_cases) == len(rows(tmp_path / "one" / "items.jsonl"))
    merged = tmp_path / "merged"
    r = cli("runs", "merge", merged, tmp_path / "s0", tmp_path / "s1", "--json")
    assert r.exit_code == 0, r.output
    table = json.loads((merged / "table.json").read_text())
    assert table["models"] == one["models"]  # every figure, CI and count of the paper's table
    assert table["comparison"] == one["comparison"]
    assert (merged / "table.md").read_text() == (tmp_path / "one" / "table.md").read_text()
    assert rows(merged / "items.jsonl") == rows(tmp_path / "one" / "items.jsonl")
    assert digests(merged / "edits" / "scripted_editor") == digests(tmp_path / "one" / "edits" / "scripted_editor")
    assert (merged / "report.html").is_file()
    # the merged results name the merged folder's images, not the shards'
    text = (merged / "run" / "results.jsonl").read_text()
    assert str(tmp_path / "s0") not in text and str(merged / "edits") in text


def test_run_with_editor_sharded_merges_edits_and_results(tmp_path):
    manifest = write_inputs(tmp_path, 5)
    base = [manifest, "--editor", SCRIPTED, "--edit-samples", "2", "--metrics", "l1,psnr", "--no-progress"]
    assert cli("run", *base, "--out", tmp_path / "one").exit_code == 0
    for i in range(2):
        r = cli("run", *base, "--out", tmp_path / f"s{i}", "--shard", f"{i}/2")
        assert r.exit_code == 0, r.output
    r = cli("runs", "merge", tmp_path / "m", tmp_path / "s0", tmp_path / "s1")
    assert r.exit_code == 0, r.output
    assert digests(tmp_path / "m" / "edits") == digests(tmp_path / "one" / "edits")

    def values(d: Path) -> list:
        return [(x["id"], x["scores"]) for x in rows(d / "results.jsonl")]

    assert values(tmp_path / "m") == values(tmp_path / "one")
    assert str(tmp_path / "s0") not in (tmp_path / "m" / "results.jsonl").read_text()


def test_edit_bench_multiturn_shards_keep_chains_whole_and_merge(tmp_path):
    """`edit --bench` of a multi-turn benchmark: a chain of turns (each made from the editor's own earlier turn)
    stays in one shard; the merged step folders equal one process's."""
    import bench_files as F

    from editlens.bench.registry import get
    from editlens.runner.bench import shard_items

    data = F.magicbrush_test(tmp_path)
    items = get("magicbrush-multiturn").read(data)
    for i in range(2):  # every case goes with its chain's first turn
        part = shard_items(items, f"{i}/2")
        assert all(it.after is None or it.after in {p.id for p in part} for it in part)

    def make(out: Path, *extra: str) -> None:
        r = cli("edit", data, "--bench", "magicbrush-multiturn", "--editor", SCRIPTED, "--out", out, "--no-progress",
                *extra)
        assert r.exit_code == 0, r.output

    make(tmp_path / "one")
    make(tmp_path / "s0", "--shard", "0/2")
    make(tmp_path / "s1", "--shard", "1/2")
    r = cli("runs", "merge", tmp_path / "m", tmp_path / "s1", tmp_path / "s0")
    assert r.exit_code == 0, r.output
    stages = sorted(p.parent.name for p in (tmp_path / "one").glob("step*/editor.json"))
    assert len(stages) >= 2
    for st in stages:
        assert digests(tmp_path / "m" / st) == digests(tmp_path / "one" / st)
        assert rows(tmp_path / "m" / st / "manifest.jsonl") == [
            {**r, "source": r["source"].replace(str(tmp_path / "one"), str(tmp_path / "m"))}
            for r in rows(tmp_path / "one" / st / "manifest.jsonl")]


def test_arena_shards_merge_every_verdict_and_a_rerun_replays_them(tmp_path):
    from test_arena import EXAMPLES, build_scenario, register_detail_kept, unregister_detail_kept

    register_detail_kept()
    try:
        # a source's contest key hashes its path, so where the scenario lies decides the split: in 1 folder of 8
        # all 4 sources fall in one shard, which is refused ("none of the sources falls in this shard");
        # the scenario is then made again in another folder
        for attempt in range(12):
            root = tmp_path / f"try{attempt}"
            made = build_scenario(root, mirror=False, examples=EXAMPLES)
            run = root / "run"
            assert cli("run", made["manifest"], "--out", run, "--metrics", "change_map,detail_kept",
                       "--no-progress").exit_code == 0
            base = ["arena", run, "--metric", "detail_kept", "--n-boot", "50", "--json"]
            results = [cli(*base, "--out", tmp_path / f"a{i}", "--shard", f"{i}/2") for i in range(2)]
            if all(r.exit_code == 0 for r in results):
                break
            assert any("none of the 4 sources falls in this shard" in r.output for r in results), \
                [r.output for r in results]
            for i in range(2):
                shutil.rmtree(tmp_path / f"a{i}", ignore_errors=True)
        docs = [json.loads((tmp_path / f"a{i}" / "arena.json").read_text()) for i in range(2)]
        assert all(0 < d["sources"] < 4 for d in docs)  # each shard judged its own sources
        r = cli("runs", "merge", tmp_path / "m", tmp_path / "a0", tmp_path / "a1")
        assert r.exit_code == 0, r.output
        doc = json.loads((tmp_path / "m" / "arena.json").read_text())
        assert doc["sources"] == 4 and doc["verdicts"]["comparisons"] == sum(d["verdicts"]["comparisons"] for d in docs)
        assert len(rows(tmp_path / "m" / "comparisons.jsonl")) == doc["verdicts"]["comparisons"]
        ranked = {x["editor"]: x["rank"] for x in doc["editors"]}
        assert ranked["no_op"] is None and ranked["blur"] == 3  # as the one-process arena ranks them
        # the ratings are fitted over every verdict; a rerun without --shard replays the merged cache
        r = cli(*base, "--out", tmp_path / "m")
        assert r.exit_code == 0, r.output
        again = json.loads((tmp_path / "m" / "arena.json").read_text())
        assert again["schedule"]["cached"] > 0 and again["sources"] == 4
        # shards of an arena with other settings are refused, naming the setting
        r = cli(*base, "--out", tmp_path / "b1", "--shard", "1/2", "--ties", "half")
        assert r.exit_code == 0, r.output
        r = cli("runs", "merge", tmp_path / "m2", tmp_path / "a0", tmp_path / "b1")
        assert r.exit_code == 2 and "ties 'davidson' vs 'half'" in r.output
    finally:
        unregister_detail_kept()
