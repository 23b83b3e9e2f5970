"""Template metadata is data (editlens/templates/templates.json): what each
template's caller supplies, so the checks of --template files name no judge."""

import json
from importlib import resources

import pytest

from editlens.errors import InputError
from editlens.runner.checks import check_templates, supplied, template_names


def test_every_shipped_template_is_declared_and_uses_only_what_its_caller_supplies():
    declared = json.loads(resources.files("editlens.templates").joinpath("templates.json").read_text())
    assert set(declared) == set(template_names())
    for name in template_names():
        values, images = supplied(name)
        assert set(declared[name]["values"]) <= values and set(declared[name]["images"]) <= images


def test_an_override_may_use_what_the_caller_supplies_beyond_the_shipped_text(tmp_path):
    # the perceptual-quality judge has the instruction and the source at hand, though its wording uses neither
    f = tmp_path / "pq.txt"
    f.write_text("<<source>>\n<<edited>>\nRate the second picture; the edit was: $instruction")
    check_templates({"viescore_pq": str(f)})
    f.write_text("<<edited>>\nRate it against $reference_caption")
    with pytest.raises(InputError, match=r"unknown placeholder\(s\) \$reference_caption; viescore_pq can use: \$instruction"):
        check_templates({"viescore_pq": str(f)})
    f.write_text("<<reference>>\nRate it")
    with pytest.raises(InputError, match=r"unknown image marker\(s\) <<reference>>; viescore_pq has: <<edited>>, <<source>>"):
        check_templates({"viescore_pq": str(f)})
