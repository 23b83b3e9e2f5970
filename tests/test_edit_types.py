"""Edit types: rules on the instruction (a data file), the manifest column, a judge, and the breakdowns."""

import json

import pytest
from helpers import EXAMPLES
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.data.edit_types import classify_instruction, edit_type_of, edit_types, load_edit_types
from editlens.errors import InputError, ManifestError

runner = CliRunner()

#: instructions whose type a reader would agree on, several per type (wordings of GEdit-Bench's and
#: EditScore's task kinds, MagicBrush, ImagenHub and AURORA)
TABLE = {
    "add": ["Add a giraffe in the field", "put a party hat on the dog", "let there be a bottle of wine",
            "What if the man had a hat?", "There should be some cutlery on the table.", "give the man glasses"],
    "remove": ["Remove the man.", "get rid of the vase on top of the table", "erase the clouds from the sky",
               "take away the skateboarders arms.", "delete the logo-free cup"],
    "replace": ["change the cat to a fox.", "replace the donuts with fruits", "turn the remote into a pizza",
                "Make the zebra a regular horse.", "remove the table and add an aquarium",
                "put a lion in the place of the donkey"],
    "attribute": ["make the car red", "Change the woman's hair to blonde", "change the color of the soccer ball.",
                  "make the brown straw hat small", "Make the woman obese.", "let the chair be red"],
    "material": ["let the table be wooden", "make the vase made of glass", "the statue should be made of gold",
                 "make the ramp cement"],
    "style": ["make it look like a Van Gogh painting", "render the photo in anime style",
              "turn the picture into a watercolor painting", "make it pop art"],
    "background": ["change the background to a beach", "Can we have mountains on the background?",
                   "Could he be in the forest?", "replace the backdrop with a city skyline"],
    "text": ['add the text "SALE" to the sign', "Let the arabic writing be changed to Chinese.",
             "change the title 'After Birth' to 'Before Birth'", "let the sign show an address"],
    "action": ["Move the book to the left of the chair", "let the dog yawn", "make the woman smile",
               "Let the person raise his arm.", "Turn the round bowl upside down", "Swap positions of both items."],
    "count": ["add two more apples", "make two parasailers instead of one.", "change the number of birds to five",
              "Give the zebra a single front leg."],
    "tone": ["make it night", "make the image black and white", "increase the brightness", "make it snowy",
             "change the season to autumn"],
    "multi_step": ["add a hat and then make the car red", "remove the dog; make the sky blue",
                   "add a cat and make the sofa green", "make the car blue, add a tree"],
}


@pytest.mark.parametrize("kind,instruction", [(k, i) for k, items in TABLE.items() for i in items])
def test_rules_classify_the_table(kind, instruction):
    assert classify_instruction(instruction) == kind


def test_every_type_has_a_label_and_the_table_covers_all_but_other():
    types = edit_types()
    assert set(types.names) == set(TABLE) | {"other"}
    assert types.labels["attribute"] == "attribute/colour" and types.labels["action"] == "action/pose"
    assert classify_instruction("xyzzy") == "other"


def test_manifest_column_overrides_and_aliases():
    assert edit_type_of({"id": "a", "instruction": "add a hat", "edit_type": "style"}) == "style"
    # GEdit-Bench / EditScore task names are aliases
    assert edit_type_of({"id": "a", "instruction": "x", "edit_type": "color_alter"}) == "attribute"
    assert edit_type_of({"id": "a", "instruction": "x", "edit_type": "subject-remove"}) == "remove"
    assert edit_type_of({"id": "a", "instruction": "x", "edit_type": "Multi-step"}) == "multi_step"
    with pytest.raises(InputError, match="'a'.*'colourful' is not an edit type"):
        edit_type_of({"id": "a", "instruction": "x", "edit_type": "colourful"})


def test_bad_edit_type_column_is_a_manifest_error_with_its_line(tmp_path):
    from editlens.data.manifest import read_manifest

    rows = [{"id": "a", "source": str(EXAMPLES / "images/cat_seat_source.png"), "edited": str(EXAMPLES / "images/cat_seat_edited.png"),
             "instruction": "add a cat", "edit_type": "add"},
            {"id": "b", "source": str(EXAMPLES / "images/cat_seat_source.png"), "edited": str(EXAMPLES / "images/cat_seat_edited.png"),
             "instruction": "add a cat", "edit_type": "cat stuff"}]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ManifestError, match="line 2: edit_type 'cat stuff' is not an edit type"):
        read_manifest(path)
    rep = read_manifest(path, skip_invalid=True)
    assert [s.id for s in rep.samples] == ["a"] and edit_type_of(rep.samples[0]) == "add"


def test_rules_file_errors_name_the_rule():
    base = '[[type]]\nname = "other"\n[[type]]\nname = "add"\n'
    with pytest.raises(InputError, match=r"rule 1 \(add\): pattern .* not a valid regular expression"):
        load_edit_types(base + "[[rule]]\ntype = \"add\"\npatterns = ['(unclosed']\n", "x.toml")
    with pytest.raises(InputError, match="alias 'plus' names the unknown type 'adding'"):
        load_edit_types(base + "[aliases]\nplus = \"adding\"\n", "x.toml")
    with pytest.raises(InputError, match="rule 1 has the unknown type 'zoom'"):
        load_edit_types(base + "[[rule]]\ntype = \"zoom\"\npatterns = []\n", "x.toml")
    with pytest.raises(InputError, match="must include 'other'"):
        load_edit_types('[[type]]\nname = "add"\n', "x.toml")


def test_edit_types_command_writes_the_column_and_counts():
    res = runner.invoke(app, ["edit-types", str(EXAMPLES / "manifest.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["cat_seat"] == {"edit_type": "add", "by": "rules"}
    assert doc["pencil_case"]["edit_type"] == "action"


def test_edit_types_command_writes_a_manifest(tmp_path):
    out = tmp_path / "typed.jsonl"
    res = runner.invoke(app, ["edit-types", str(EXAMPLES / "manifest.jsonl"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["id"]: r["edit_type"] for r in rows}["cat_seat"] == "add"
    assert "add" in res.stdout and "action/pose" in res.stdout


def test_judge_names_the_type_or_the_rules_keep_theirs(tmp_path):
    from fake_openai import FakeServer

    from editlens.trust.edit_type_judge import parse_edit_type

    assert parse_edit_type("Material.") == "material"
    assert parse_edit_type("add, or maybe remove") is None
    assert parse_edit_type("") is None

    class Typer(FakeServer):
        def good_answer(self, body):
            text = json.dumps(body["messages"])
            assert "- background:" in text  # the template lists the types
            return "style" if "Van Gogh" in text else "I cannot tell"

    manifest = tmp_path / "m.jsonl"
    src = str(EXAMPLES / "images/cat_seat_source.png")
    manifest.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "g", "source": src, "edited": src, "instruction": "make it look like Van Gogh"},
        {"id": "u", "source": src, "edited": src, "instruction": "Remove the man."},
        {"id": "c", "source": src, "edited": src, "instruction": "Remove the man.", "edit_type": "text"}]))
    fake = Typer()
    fake.broken = False
    with fake.running() as url:
        res = runner.invoke(app, ["edit-types", str(manifest), "--vlm", url, "--cache", "none", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["g"] == {"edit_type": "style", "by": "judge", "raw": "style"}
    assert doc["u"]["edit_type"] == "remove" and doc["u"]["by"] == "rules" and doc["u"]["raw"] == "I cannot tell"
    assert doc["c"] == {"edit_type": "text", "by": "column"}  # the column is not asked about
    assert len(fake.requests) == 2


def test_runs_summary_by_edit_type(tmp_path):
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", str(EXAMPLES / "manifest.jsonl"), "--out", str(out), "--metrics", "l1",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["id"]: r["edit_type"] for r in rows}["dragonfruit"] == "action"
    res = runner.invoke(app, ["runs", "summary", str(out), "--by", "edit_type", "--json"])
    table = {(r["group"], r["evaluator"]): r for r in json.loads(res.stdout)}
    assert table[("add", "l1")]["n"] == 2 and table[("action", "l1")]["n"] == 3  # cat_seat + its no-op; the moves
    res = runner.invoke(app, ["runs", "summary", str(out), "--by", "colour"])
    # any manifest column groups; one the run lacks is refused, naming those it has
    assert res.exit_code == 2 and "--by 'colour': the run has no such column; group by one of" in res.output
    assert "aurora_task, edit_type" in res.output and "model" in res.output


def test_meta_eval_breaks_down_by_edit_type(tmp_path):
    from editlens.bench.aurora import pairwise_report, pointwise_report
    from editlens.reporting.html import render_meta_report

    instr = {"a1": "add a hat", "a2": "add a dog", "a3": "add a cat", "r1": "remove the car", "r2": "remove the man",
             "r3": "remove the tree"}
    human = tmp_path / "h.jsonl"
    preds = tmp_path / "p.jsonl"
    human.write_text("".join(json.dumps({"id": k, "model": "m", "human": h}) + "\n"
                             for k, h in zip(instr, [0.1, 0.5, 0.9, 0.2, 0.4, 0.8])))
    preds.write_text("".join(json.dumps({"id": k, "score": s, "instruction": instr[k]}) + "\n"
                             for k, s in zip(instr, [1, 2, 3, 3, 2, 1])))
    rep = pointwise_report(human, preds, n_boot=50)
    assert rep["by_edit_type"]["add"]["n"] == 3 and rep["by_edit_type"]["add"]["spearman"]["value"] == pytest.approx(1.0)
    assert rep["by_edit_type"]["remove"]["spearman"]["value"] == pytest.approx(-1.0)
    page = render_meta_report(rep, "demo")
    assert 'id="by-edit-type"' in page and 'data-type="remove">3<' in page
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"id": "p1", "a": "a3", "b": "a1", "preference": "A"}) + "\n"
                     + json.dumps({"id": "p2", "a": "r3", "b": "r1", "preference": "A"}) + "\n")
    pr = pairwise_report(pairs, preds)
    assert pr["by_edit_type"] == {"add": {"label": "add", "n": 1, "accuracy": 1.0},
                                  "remove": {"label": "remove", "n": 1, "accuracy": 0.0}}
