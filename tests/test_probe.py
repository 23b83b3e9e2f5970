"""Sanity probes: pass-rate arithmetic, ties, CIs, verdicts, controls on disk, resumable runs, the JSON schema."""

import hashlib
import json

import numpy as np
import pytest
from helpers import shared_path
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.trust.controls import CONTROLS, build_controls, parse_controls
from editlens.trust.probe import bootstrap_rate, outcome, pass_rate, verdicts

runner = CliRunner()


# ------------------------------------------------------------------ arithmetic

def test_outcome_follows_the_declared_direction_and_ties():
    assert outcome(0.8, 0.5, True) == 1 and outcome(0.8, 0.5, False) == -1
    assert outcome(0.2, 0.5, False) == 1 and outcome(0.2, 0.5, True) == -1
    assert outcome(0.5, 0.5, True) == 0 and outcome(0.5, 0.5, False) == 0
    assert outcome(100.0, 100.0 + 1e-5, True) == 0  # float noise of batched computation is a tie
    assert outcome(1.0, 1.001, False) == 1


def test_pass_rate_counts_strict_wins_only():
    pairs = [(0.9, 0.1), (0.9, 0.1), (0.9, 0.1), (0.5, 0.5), (0.5, 0.5), (0.1, 0.7), (0.3, 0.3 + 1e-12), (0.6, 0.2)]
    r = pass_rate(pairs, True, n_boot=200)
    assert (r["n"], r["wins"], r["ties"], r["losses"]) == (8, 4, 3, 1)
    assert r["pass_rate"] == 0.5  # ties are not passes
    lower = pass_rate(pairs, False, n_boot=200)
    assert (lower["wins"], lower["ties"], lower["losses"]) == (1, 3, 4) and lower["pass_rate"] == 1 / 8
    empty = pass_rate([], True)
    assert empty == {"pass_rate": None, "ci": None, "n": 0, "wins": 0, "ties": 0, "losses": 0}


def test_bootstrap_ci_is_seeded_and_brackets_the_rate():
    assert bootstrap_rate([True] * 20) == [1.0, 1.0]
    assert bootstrap_rate([False] * 20) == [0.0, 0.0]
    assert bootstrap_rate([True]) is None  # undefined for n < 2, never [x, x]
    half = [True, False] * 50
    ci = bootstrap_rate(half, n_boot=2000, seed=3)
    assert ci == bootstrap_rate(half, n_boot=2000, seed=3)
    assert ci[0] < 0.5 < ci[1]
    # binomial standard error sqrt(0.25 / 100) = 0.05: the 95% interval is about +-0.1 wide
    assert ci[0] == pytest.approx(0.40, abs=0.025) and ci[1] == pytest.approx(0.60, abs=0.025)
    assert pass_rate([(1, 0)] * 3 + [(0, 1)], True, n_boot=500, seed=1)["ci"] == bootstrap_rate(
        [True, True, True, False], n_boot=500, seed=1)


def _stats(wins, ties, losses, ci=None):
    n = wins + ties + losses
    return {"pass_rate": wins / n, "ci": ci if ci is not None else bootstrap_rate([1] * wins + [0] * (n - wins)),
            "n": n, "wins": wins, "ties": ties, "losses": losses}


def test_verdicts_from_the_outcomes():
    ssim_like = {"noop": _stats(0, 0, 50), "blank": _stats(50, 0, 0), "noise": _stats(50, 0, 0),
                 "swapped": _stats(0, 42, 8), "wrong_instruction": _stats(0, 50, 0), "unrelated": _stats(50, 0, 0)}
    assert verdicts(ssim_like) == ["rewards doing nothing", "ignores which image is the edit", "ignores the instruction"]
    text_only = {c: _stats(0, 50, 0) for c in CONTROLS if c != "wrong_instruction"}
    text_only["wrong_instruction"] = _stats(24, 1, 25)
    assert verdicts(text_only) == ["ignores the images", "weak against a wrong instruction"]
    good = {c: _stats(48, 1, 1) for c in CONTROLS}
    assert verdicts(good) == []
    assert verdicts({"noop": _stats(35, 0, 15)}, min_pass=0.75) == ["weak against doing nothing"]
    # nothing to judge is never a pass: no data reads "not measured", a handful "too few"
    assert verdicts({"noop": pass_rate([], True)}) == [
        "not measured (n = 0: no edit with both it and its control scored)"]
    assert verdicts({"noop": _stats(4, 0, 0), "blank": _stats(48, 1, 1)}) == ["noop: too few (n = 4, fewer than 10)"]


# ------------------------------------------------------------------ controls on disk

def _edits(root, n=6, sources=None):
    """``n`` edits of 48x64 images: a coloured square painted on a random source (one source per edit
    unless ``sources`` says how many)."""
    from editlens.core.types import EditSample

    rng = np.random.default_rng(0)
    words = ["add a red square", "paint a blue box", "put a green patch", "make a yellow tile", "add a white block",
             "draw a purple square", "add an orange mark", "put a pink square"]
    out = []
    for i in range(n):
        k = i if sources is None else i % sources
        src = root / f"src{k}.png"
        if not src.exists():
            Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(src)
        edited = np.array(Image.open(src))
        edited[10 + i: 30 + i, 12: 40] = rng.integers(0, 256, 3, dtype=np.uint8)
        Image.fromarray(edited).save(root / f"edit{i}.png")
        out.append(EditSample(f"e{i}", str(src), str(root / f"edit{i}.png"), words[i % len(words)], model=f"m{i % 2}"))
    return out


def test_controls_are_deterministic_and_what_they_say(tmp_path):
    samples = _edits(tmp_path)
    built = build_controls(samples, tmp_path / "probe", seed=0)
    assert not built.not_built and len(built.samples) == 6 * len(CONTROLS)
    by = {built.of[s.id]: s for s in built.samples}
    s0 = samples[0]
    assert by[("e0", "noop")].edited == s0.source and by[("e0", "noop")].source == s0.source
    assert (by[("e0", "swapped")].source, by[("e0", "swapped")].edited) == (s0.edited, s0.source)
    grey = np.array(Image.open(by[("e0", "blank")].edited))
    assert grey.shape == (48, 64, 3) and (grey == 128).all()
    noisy = np.array(Image.open(by[("e0", "noise")].edited)).astype(int)
    clean = np.array(Image.open(s0.edited)).astype(int)
    assert 40 < np.abs(noisy - clean).mean() < 80  # heavy noise
    wrong = by[("e0", "wrong_instruction")]
    donor = next(s for s in samples if wrong.id.endswith("=" + s.id))
    assert wrong.instruction == donor.instruction != s0.instruction and donor.source != s0.source
    unrelated = by[("e0", "unrelated")]
    assert unrelated.edited != s0.edited and unrelated.edited in {s.edited for s in samples}
    assert all(s.model.startswith("control:") and s.metadata["probe_of"] in {x.id for x in samples}
               for s in built.samples)
    # the same manifest and seed give the same controls, without rewriting the images
    stamp = (tmp_path / "probe" / "images" / "noise").stat().st_mtime_ns
    again = build_controls(samples, tmp_path / "probe", seed=0)
    assert [(s.id, s.edited, s.instruction) for s in again.samples] == [(s.id, s.edited, s.instruction)
                                                                         for s in built.samples]
    assert (tmp_path / "probe" / "images" / "noise").stat().st_mtime_ns == stamp
    other = build_controls(samples, tmp_path / "probe", seed=1)
    assert {s.id for s in other.samples} != {s.id for s in built.samples}  # the seed is part of the control's id


def test_controls_that_cannot_be_built_say_why(tmp_path):
    one_source = _edits(tmp_path, n=3, sources=1)
    built = build_controls(one_source, tmp_path / "probe", ["noop", "wrong_instruction", "unrelated"])
    assert {(x["control"], x["reason"]) for x in built.not_built} == {
        ("wrong_instruction", "no edit of another source with another instruction"),
        ("unrelated", "no edit of another source")}
    assert len(built.samples) == 3
    with pytest.raises(Exception, match="unknown control.*bogus.*choose from noop"):
        parse_controls("noop,bogus")


# ------------------------------------------------------------------ end to end

from editlens.metrics.base import Metric  # noqa: E402


class InstructionOnly(Metric):
    """A scorer that reads only the instruction (a stable hash of its text): it cannot see the images."""

    def compute(self, batch):
        return [int(hashlib.sha256(s.instruction.encode()).hexdigest()[:8], 16) / 2**32 for s in batch]


@pytest.fixture
def instruction_only():
    from editlens.metrics import registry
    from editlens.metrics.registry import register_metric
    from editlens.metrics.spec import MetricSpec

    spec = register_metric(MetricSpec("test_instruction_only", InstructionOnly, ("instruction",), True, (0.0, 1.0)),
                           overwrite=True)
    yield spec.name
    registry.METRICS.unregister(spec.name)


def test_probe_flags_image_controls_of_an_instruction_only_scorer(tmp_path, instruction_only):
    from editlens.runner.selection import select_metrics
    from editlens.trust.probe import run_probe

    samples = _edits(tmp_path, n=8)
    sel = select_metrics([instruction_only, "l1"])
    doc = run_probe(samples, sel.metrics, tmp_path / "run", n_boot=200, progress=False)
    text = doc["evaluators"][instruction_only]
    assert text["verdicts"][0] == "ignores the images"
    assert "ignores the instruction" not in text["verdicts"]
    for c in ("noop", "blank", "noise", "swapped", "unrelated"):
        assert text["controls"][c]["pass_rate"] == 0.0 and doc["details"][instruction_only]["controls"][c]["ties"] == 8
    l1 = doc["evaluators"]["l1"]
    assert "rewards doing nothing" in l1["verdicts"] and "ignores the instruction" in l1["verdicts"]
    assert l1["controls"]["blank"]["pass_rate"] == 1.0 and l1["controls"]["noop"]["n"] == 8
    # a rerun recomputes nothing: real edits and controls come from the two run stores
    again = run_probe(samples, sel.metrics, tmp_path / "run", n_boot=200, progress=False)
    assert again["computed"] == {"edits": 0, "controls": 0}
    assert again["evaluators"] == doc["evaluators"]
    assert json.loads((tmp_path / "run" / "probe.json").read_text())["evaluators"] == doc["evaluators"]


def test_probe_cli_json_schema_table_and_report(tmp_path, instruction_only):
    samples = _edits(tmp_path, n=6)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"id": s.id, "source": s.source, "edited": s.edited,
                                            "instruction": s.instruction, "model": s.model}) + "\n" for s in samples))
    out = tmp_path / "run"
    res = runner.invoke(app, ["probe", str(manifest), "--metrics", f"ssim,{instruction_only}", "--out", str(out),
                              "--json", "--no-progress", "--report", "--n-boot", "100"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    # exactly the published schema
    assert set(doc) == {"evaluators"}
    assert set(doc["evaluators"]) == {"ssim", instruction_only}
    for ev in doc["evaluators"].values():
        assert set(ev) == {"controls", "verdicts"} and isinstance(ev["verdicts"], list)
        assert list(ev["controls"]) == list(CONTROLS)
        for c in ev["controls"].values():
            assert set(c) == {"pass_rate", "ci", "n"}
            assert c["n"] == 6 and 0.0 <= c["pass_rate"] <= 1.0
            assert c["ci"] is None or (len(c["ci"]) == 2 and c["ci"][0] <= c["pass_rate"] <= c["ci"][1])
    page = (out / "report.html").read_text()
    assert 'id="probe"' in page and "Sanity probes" in page and "ignores the images" in page
    # with --by edit_type the breakdown comes too, each type with its n
    res = runner.invoke(app, ["probe", str(manifest), "--metrics", "ssim", "--out", str(out), "--json",
                              "--by", "edit_type", "--no-progress", "--n-boot", "100"])
    doc = json.loads(res.stdout)
    assert set(doc) == {"evaluators", "by_edit_type"}
    assert sum(t["n"] for t in doc["by_edit_type"].values()) == 6
    assert doc["by_edit_type"]["add"]["evaluators"]["ssim"]["controls"]["noop"]["n"] == doc["by_edit_type"]["add"]["n"]
    # the table names every evaluator, control and verdict
    res = runner.invoke(app, ["probe", str(manifest), "--metrics", "ssim", "--out", str(out), "--no-progress",
                              "--controls", "noop,wrong_instruction"])
    assert res.exit_code == 0, res.output
    assert "ssim\tnoop\t0.0%" in res.stdout and "ssim: rewards doing nothing; ignores the instruction" in res.stdout
    assert "0 edit and 0 control results computed" in res.output


def test_probe_bad_input_is_a_clear_error(tmp_path):
    res = runner.invoke(app, ["probe", str(tmp_path / "none.jsonl"), "--metrics", "l1", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "manifest file not found" in res.output
    res = runner.invoke(app, ["probe", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "r"), "--controls", "nope"])
    assert res.exit_code == 2 and "unknown control" in res.output


@pytest.mark.integration
def test_probe_on_real_aurora_edits(tmp_path):
    """Real AURORA edits (MagicBrush photos, Kubric and WhatsUp scenes): SSIM, PSNR and L1 measure
    closeness to the source, so the probe must say they reward the no-op and ignore the instruction."""
    root = shared_path("data", "aurora")
    rows = [json.loads(line) for line in (root / "edits.jsonl").read_text().splitlines()]
    picked = [r for task in ("magicbrush", "kubric", "whatsup") for r in [x for x in rows if x["task"] == task][:4]]
    manifest = tmp_path / "aurora.jsonl"
    manifest.write_text("".join(json.dumps({**r, "input": str(root / r["input"]), "output": str(root / r["output"])})
                                + "\n" for r in picked))
    res = runner.invoke(app, ["probe", str(manifest), "--columns", "source=input,edited=output", "--metrics",
                              "ssim,psnr,l1", "--out", str(tmp_path / "run"), "--json", "--no-progress"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["evaluators"]
    for ev in ("ssim", "psnr", "l1"):
        assert "rewards doing nothing" in doc[ev]["verdicts"], (ev, doc[ev])
        assert "ignores the instruction" in doc[ev]["verdicts"], (ev, doc[ev])
        assert doc[ev]["controls"]["noop"]["pass_rate"] == 0.0 and doc[ev]["controls"]["noop"]["n"] == 12
        assert doc[ev]["controls"]["blank"]["pass_rate"] > 0.9  # they do notice a grey image
