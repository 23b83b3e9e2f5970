"""The run report's data is declared once (editlens.reporting.payload): the page's JSON has
exactly the declared fields, round-trips through PagePayload, and the page's script reads
no field that is not declared."""

from __future__ import annotations

import json
import re

import pytest

from editlens.reporting.collect import collect_run
from editlens.reporting.html import render_run_report
from editlens.reporting.markup import asset
from editlens.reporting.payload import SAMPLE_HEAVY, SAMPLE_LIGHT, PagePayload, PageSample, RunData
from editlens.testing.synthetic_run import make_synthetic_run


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    made = make_synthetic_run(tmp_path_factory.mktemp("payload") / "syn", n=8, size=32, human=True, per_source=2)
    return collect_run(made["run"], n_boot=50)


def _page_data(page: str) -> str:
    found = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert found is not None
    return found.group(1)


def test_collect_gives_the_declared_run_data(collected: RunData) -> None:
    assert set(collected) == set(RunData.__annotations__) - {"meta_eval"}
    assert len(collected["samples"]) == 8
    assert set(SAMPLE_LIGHT) | set(SAMPLE_HEAVY) | {"images", "scores"} == set(PageSample.__annotations__)


def test_the_page_json_has_exactly_the_declared_fields_and_round_trips(collected: RunData) -> None:
    text = _page_data(render_run_report(collected, images="none"))
    doc = json.loads(text)
    assert list(doc) == PagePayload.json_names()  # every declared field, in order, and nothing else
    assert doc["measureLabels"] == collected["measure_labels"] and doc["hib"] == collected["higher_is_better"]
    for s in doc["samples"]:
        assert set(s) <= set(PageSample.__annotations__) and {"id", "model", "images", "scores"} <= set(s)
    assert [s["id"] for s in doc["samples"]] == [s["id"] for s in collected["samples"]]
    payload = PagePayload.from_json(text)
    assert payload.measure_labels == collected["measure_labels"] and len(payload.samples) == 8
    assert payload.to_json() == text  # the samples serialised here read as the page's kept fragments do
    with pytest.raises(ValueError, match=r"missing \['hib'\], undeclared \['higherIsBetter'\]"):
        PagePayload.from_json(json.dumps({**{k: v for k, v in doc.items() if k != "hib"}, "higherIsBetter": {}}))


def test_the_script_reads_only_declared_fields() -> None:
    script = asset("report.js")
    read = set(re.findall(r"\bDATA\.(\w+)", script))
    assert read and read <= set(PagePayload.json_names()), read - set(PagePayload.json_names())
    # a sample is `s` throughout the script; names with "_" first are the script's own (index, search text)
    sample_reads = {n for n in re.findall(r"\bs\.(\w+)", script) if not n.startswith("_")} - {"toFixed"}
    assert {"id", "scores", "boxes", "input_notes"} <= sample_reads
    assert sample_reads <= set(PageSample.__annotations__), sample_reads - set(PageSample.__annotations__)

