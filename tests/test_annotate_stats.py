"""Agreement statistics of `editlens annotate stats` on synthetic annotators with known noise."""

from __future__ import annotations

import json
import random

import pytest

from editlens.annotate.stats import agreement
from editlens.annotate.task import Task
from editlens.testing.annotate_data import make_edit_set, synthetic_annotator

OUTCOMES = [{"choice": c} for c in ("A", "B", "tie", "both_bad")]


def _truth(items, seed=1):
    rng = random.Random(seed)
    return {i: OUTCOMES[rng.randrange(4)] for i in sorted(items)}


@pytest.fixture(scope="module")
def edits(tmp_path_factory):
    # 14 sources x 5 editors = 140 pairs
    return make_edit_set(tmp_path_factory.mktemp("edits"), sources=14, editors=5, size=24)


@pytest.mark.slow
def test_alpha_of_known_noise_is_within_its_ci(edits, tmp_path):
    """Each annotator gives the true outcome with probability p, else one of the four at random (truth
    uniform over the four): the population alpha is p^2 (observed disagreement (1 - p^2)(1 - 1/4), expected
    1 - 1/4)."""
    p = 0.8
    t = Task.create(tmp_path / "t", edits, "pairwise", annotators=["a1", "a2", "a3"], overlap=3, seed=3)
    truth = _truth(t.items)
    rng = random.Random(7)
    for a in ("a1", "a2", "a3"):
        synthetic_annotator(t, a, truth.__getitem__, p, rng, lambda _: OUTCOMES)
    t.close()
    rep = agreement(tmp_path / "t", n_boot=300, seed=0)
    c = rep["criteria"]["outcome"]
    assert rep["items"] == 140 and c["items_rated_twice_or_more"] == 140
    lo, hi = c["alpha_ci95"]
    assert lo <= p * p <= hi, (c["krippendorff_alpha"], c["alpha_ci95"])
    assert hi - lo < 0.2  # an interval that says something
    # Fleiss' and Cohen's kappa measure the same agreement here (every item rated by all three)
    assert abs(c["fleiss_kappa"] - p * p) < 0.12 and abs(c["cohen_kappa_mean"] - p * p) < 0.12
    assert rep["flagged"] == []


@pytest.mark.slow
def test_gold_and_repeats_flag_a_random_clicker(edits, tmp_path):
    probe = Task.create(tmp_path / "probe", edits, "pairwise", annotators=["x"], seed=0)
    items = probe.items
    probe.close()
    truth = _truth(items)
    gold_ids = sorted(truth)[:12]
    gold = tmp_path / "gold.jsonl"
    # gold lines name the two edits by sample id, here in the other order (the answer is flipped on reading)
    gold.write_text("".join(json.dumps({"a": items[i]["b"]["id"], "b": items[i]["a"]["id"], "preference":
                                        {"A": "B", "B": "A"}.get(truth[i]["choice"], truth[i]["choice"])}) + "\n"
                            for i in gold_ids))
    names = ["good1", "good2", "clicker"]
    t = Task.create(tmp_path / "t", edits, "pairwise", annotators=names, overlap=2, seed=5, repeats=12, gold=gold)
    assert set(t.gold) == set(gold_ids)
    assert all(t.gold[i] == truth[i] for i in gold_ids)
    rng = random.Random(11)
    synthetic_annotator(t, "good1", truth.__getitem__, 0.95, rng, lambda _: OUTCOMES)
    synthetic_annotator(t, "good2", truth.__getitem__, 0.95, rng, lambda _: OUTCOMES)
    synthetic_annotator(t, "clicker", truth.__getitem__, 0.0, rng, lambda _: OUTCOMES)
    t.close()
    rep = agreement(tmp_path / "t", n_boot=200, seed=0)
    per = rep["per_annotator"]
    assert rep["flagged"] == ["clicker"]
    assert per["clicker"]["gold"] == 12 and per["clicker"]["repeats"] == 12
    assert per["clicker"]["gold_accuracy"] < 0.5 and per["clicker"]["self_consistency"] < 0.6
    assert any("gold accuracy" in w for w in per["clicker"]["flagged"])
    assert per["good1"]["gold_accuracy"] >= 0.8 and per["good1"]["self_consistency"] >= 0.8
    # the group agrees more without the clicker than with them, and less without a careful annotator
    whole = rep["criteria"]["outcome"]["krippendorff_alpha"]
    assert per["clicker"]["alpha_without"] > whole + 0.2 and per["good1"]["alpha_without"] < whole
    lo, hi = per["clicker"]["gold_accuracy_ci95"]
    assert lo <= per["clicker"]["gold_accuracy"] <= hi


def test_pointwise_alpha_and_overall(tmp_path):
    """Point-wise on ImagenHub's scale: the same noise model on each criterion gives alpha p^2 there too
    (truth uniform on the three values, replaced by a uniform draw with probability 1 - p)."""
    edits = make_edit_set(tmp_path / "e", sources=30, editors=4, size=24)
    t = Task.create(tmp_path / "t", edits, "pointwise", annotators=["a", "b", "c"], overlap=3, seed=1,
                    preset="imagenhub")
    rng = random.Random(2)
    vals = (0.0, 0.5, 1.0)
    truth = {i: {"scores": {"SC": vals[rng.randrange(3)], "PQ": vals[rng.randrange(3)]}} for i in sorted(t.items)}

    class Mixed:  # each criterion noised on its own
        def __init__(self, p):
            self.p = p

        def __call__(self, name):
            for _ in iter(int, 1):
                row = t.current(name)
                if row is None:
                    return
                tr = truth[row["item"]]["scores"]
                given = {k: (v if rng.random() < self.p else vals[rng.randrange(3)]) for k, v in tr.items()}
                t.vote(name, row["position"], {"scores": given})

    for n in ("a", "b", "c"):
        Mixed(0.85)(n)
    t.close()
    rep = agreement(tmp_path / "t", n_boot=300, seed=0)
    for crit in ("SC", "PQ"):
        c = rep["criteria"][crit]
        assert c["level"] == "ordinal" and c["items_rated_twice_or_more"] == 120
        lo, hi = c["alpha_ci95"]
        # interval and ordinal alpha of this model are both p^2 (the noise is independent of the value)
        assert lo - 0.05 <= 0.85 ** 2 <= hi + 0.05, c
    assert rep["criteria"]["O"]["krippendorff_alpha"] is not None


def test_stats_cli(edits, tmp_path):
    from typer.testing import CliRunner

    from editlens.cli.main import app

    t = Task.create(tmp_path / "t", edits, "pairwise", annotators=["a", "b"], overlap=2, seed=0)
    truth = _truth(t.items)
    rng = random.Random(0)
    for a in ("a", "b"):
        synthetic_annotator(t, a, truth.__getitem__, 0.9, rng, lambda _: OUTCOMES)
    t.close()
    r = CliRunner().invoke(app, ["annotate", "stats", str(tmp_path / "t"), "--n-boot", "50", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["votes"] == 280 and rep["criteria"]["outcome"]["krippendorff_alpha"] > 0.6
    r = CliRunner().invoke(app, ["annotate", "stats", str(tmp_path / "nothing")])
    assert r.exit_code == 2 and "no votes.sqlite" in r.output
