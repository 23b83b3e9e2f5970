"""Editors in the loop: `editlens edit` (seeds, resume after SIGKILL, failed
images redone), the editor kinds (diffusers, endpoint, callable, command),
`run --editor`, `best-of-n --editor` (scores and a pairwise knockout), and
their errors. Tiny random pipelines at 32 px, 2 steps."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app
from editlens.errors import InputError, ModelUnavailableError

SCRIPTED = "editlens.testing.tiny_editors:scripted_editor"
FAST = ["--editor-option", "steps=2", "--editor-option", "resolution=32", "--no-progress"]


def cli(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def write_inputs(root: Path, n: int = 3) -> Path:
    rows = []
    for i in range(n):
        arr = np.zeros((40, 48, 3), np.uint8)
        arr[..., i % 3] = 200
        Image.fromarray(arr).save(root / f"src{i}.png")
        rows.append({"id": f"e{i}", "source": f"src{i}.png", "instruction": "make it a cat", "category": f"c{i}"})
    (root / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "in.jsonl"


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def digests(out: Path) -> dict[str, str]:
    return {r["id"]: hashlib.sha256((out / r["edited"]).read_bytes()).hexdigest() for r in rows(out / "manifest.jsonl")}


@pytest.fixture(scope="module")
def tiny_ip2p(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from editlens.testing.tiny_editors import make_tiny_editor

    return make_tiny_editor(tmp_path_factory.mktemp("editor") / "ip2p", "instruct-pix2pix", image_size=32)


def test_edit_run_report_best_of_n_cli(tiny_ip2p, tmp_path):
    manifest = write_inputs(tmp_path)
    out = tmp_path / "edits"
    r = cli("edit", manifest, "--editor", tiny_ip2p, "--out", out, "--samples", "2", *FAST)
    assert r.exit_code == 0, r.output
    got = rows(out / "manifest.jsonl")
    assert [x["id"] for x in got] == ["e0-s0", "e0-s1", "e1-s0", "e1-s1", "e2-s0", "e2-s1"]
    assert {x["model"] for x in got} == {"ip2p"} and [x["sample"] for x in got[:2]] == [0, 1]
    assert got[0]["category"] == "c0" and got[0]["edit_id"] == "e0" and got[0]["seed"] != got[1]["seed"]
    assert all(Image.open(out / x["edited"]).size == (32, 24) for x in got)  # longer side 32, aspect kept, /8
    record = json.loads((out / "editor.json").read_text())
    assert record["settings"]["steps"] == 2 and record["settings"]["family"] == "instruct-pix2pix"
    assert len(record["weights"]["sha256"]) == 64 and "unet/diffusion_pytorch_model.safetensors" in record["weights"]["files"]
    from editlens.models.precision import decide

    # the policy's choice for the device it ran on, with the family's preference (InstructPix2Pix: fp16 on CUDA)
    prec = record["runtime"]["precision"]
    assert prec["dtype"] == decide("auto", prec["device"], preferred="float16" if prec["device"] != "cpu" else None).dtype
    # the output manifest goes to `run` and `report` as is
    run = tmp_path / "run"
    r = cli("run", out / "manifest.jsonl", "--out", run, "--metrics", "psnr", "--no-progress")
    assert r.exit_code == 0, r.output
    assert "6 samples" in r.output
    r = cli("report", run)
    assert r.exit_code == 0, r.output and (run / "report.html").is_file()
    # best of N over the generated candidates: a point-wise metric, its direction from the spec
    r = cli("best-of-n", manifest, "--editor", tiny_ip2p, "--samples", "2", "--metric", "psnr",
            "--edits-out", out, "--editor-option", "steps=2", "--editor-option", "resolution=32", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout[r.stdout.index("{"):])
    assert len(doc["picks"]) == 3 and doc["higher_is_better"] is True
    for p in doc["picks"]:
        values = {c["id"]: c["value"] for c in p["candidates"]}
        assert len(values) == 2 and p["best_value"] == max(values.values()) and p["best_id"] in values


def test_seeds_reproduce_and_differ(tiny_ip2p, tmp_path):
    from editlens.editors import create_editor
    from editlens.runner.edit import derive_seed, generate_edits

    manifest = write_inputs(tmp_path, 1)
    editor = create_editor(str(tiny_ip2p), steps=2, resolution=32, dtype="float32")  # loaded once, used thrice
    a = generate_edits(manifest, editor, tmp_path / "a", samples=2, progress=False)
    # one at a time instead of batched: the same seeds give the same images
    b = generate_edits(manifest, editor, tmp_path / "b", samples=2, progress=False, batch_size=1)
    assert a.generated == b.generated == 2
    da, db = digests(tmp_path / "a"), digests(tmp_path / "b")
    for key in da:
        x = np.asarray(Image.open(tmp_path / "a" / rows(tmp_path / "a" / "manifest.jsonl")[list(da).index(key)]["edited"]), np.int16)
        y = np.asarray(Image.open(tmp_path / "b" / rows(tmp_path / "b" / "manifest.jsonl")[list(db).index(key)]["edited"]), np.int16)
        assert np.abs(x - y).max() <= 2  # batched matmuls may round differently by a level
    assert len(set(da.values())) == 2  # every (edit, sample) has its own seed
    generate_edits(manifest, editor, tmp_path / "c", samples=2, progress=False)
    assert digests(tmp_path / "c") == da  # same settings, same images, byte for byte
    assert rows(tmp_path / "a" / "manifest.jsonl")[0]["seed"] == derive_seed(0, "e0", 0)
    from editlens.models.precision import resolve_device

    assert {(g["dtype"], g["device"]) for g in rows(tmp_path / "a" / "generations.jsonl")} == {("float32", resolve_device("auto"))}


def test_speed_options_are_recorded_and_channels_last_changes_only_the_last_bits(tiny_ip2p, tmp_path):
    """The speed option (NHWC UNet and VAE) in the policy's dtype: the same seeds give the same images up to
    the rounding of the convolutions' other summation order, and editor.json says which layout made them."""
    from editlens.editors import create_editor
    from editlens.runner.edit import generate_edits

    manifest = write_inputs(tmp_path, 1)
    for name, flag in (("nchw", False), ("nhwc", "true")):  # a string, as --editor-option gives it
        ed = create_editor(str(tiny_ip2p), steps=2, resolution=32, channels_last=flag)
        generate_edits(manifest, ed, tmp_path / name, progress=False)
        runtime = json.loads((tmp_path / name / "editor.json").read_text())["runtime"]
        assert runtime["channels_last"] is bool(flag)
        assert runtime["vae_slicing"] is runtime["precision"]["device"].startswith("cpu")  # auto: on a CPU only
    x, y = (np.asarray(Image.open(tmp_path / n / rows(tmp_path / n / "manifest.jsonl")[0]["edited"]), np.int16)
            for n in ("nchw", "nhwc"))
    dtype = json.loads((tmp_path / "nhwc" / "editor.json").read_text())["runtime"]["precision"]["dtype"]
    # bf16 rounds each layer's output to 8 bits of mantissa: a last-bit change can grow over the steps
    assert np.abs(x - y).max() <= (2 if dtype == "float32" else 16)
    assert np.abs(x - y).mean() < (0.5 if dtype == "float32" else 3.0)
    with pytest.raises(InputError, match="channels_last: expected true or false"):
        create_editor(str(tiny_ip2p), channels_last="maybe")
    off = create_editor(str(tiny_ip2p), steps=2, resolution=32, vae_slicing=False)
    assert off.runtime()["vae_slicing"] is False and off.load().vae.use_slicing is False
    # tf32 is for CUDA float32 only, and switched on for the pipeline call alone
    import torch

    from editlens.editors.diffusers_editor import _tf32

    assert create_editor(str(tiny_ip2p), tf32=True, device="cpu").runtime()["tf32"] is False
    before = torch.backends.cuda.matmul.fp32_precision
    with _tf32(True):
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.backends.cuda.matmul.fp32_precision == before


def test_rerun_after_sigkill_loses_and_duplicates_nothing(tmp_path):
    manifest = write_inputs(tmp_path, 4)
    out = tmp_path / "out"
    env = {**os.environ, "EDITLENS_TEST_KILL_AT": "e2"}
    proc = subprocess.run([sys.executable, "-m", "editlens.cli.main", "edit", str(manifest), "--editor", SCRIPTED,
                           "--out", str(out), "--no-progress", "--batch-size", "1"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    before = digests(out)
    assert sorted(before) == ["e0", "e1"]  # the images made before the kill are in the manifest
    with open(out / "generations.jsonl", "a") as fh:  # as if the kill had torn a log line in half
        fh.write('{"edit_id": "e2", "sample": 0, "sta')
    r = cli("edit", manifest, "--editor", SCRIPTED, "--out", out, "--no-progress")
    assert r.exit_code == 0, r.output
    assert "2 images generated, 2 kept, 0 failed" in r.output
    after = digests(out)
    assert sorted(after) == ["e0", "e1", "e2", "e3"] and {k: after[k] for k in before} == before
    assert len(rows(out / "manifest.jsonl")) == 4
    assert len(list((out / "images").glob("*.png"))) == 4 and not list(out.glob("images/.*.tmp"))
    r = cli("edit", manifest, "--editor", SCRIPTED, "--out", out, "--no-progress")
    assert "0 images generated, 4 kept" in r.output  # the records after the torn line were read back


def test_sigterm_finishes_the_image_in_flight_and_exits_143(tmp_path):
    manifest = write_inputs(tmp_path, 3)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "editlens.cli.main", "edit", str(manifest), "--editor", SCRIPTED,
                           "--out", str(out), "--no-progress", "--batch-size", "1"],
                          env={**os.environ, "EDITLENS_TEST_TERM_AT": "e1"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 143, proc.stderr
    assert "interrupted (SIGTERM)" in proc.stderr
    assert sorted(digests(out)) == ["e0", "e1"]  # e1 was in flight: finished and kept; e2 not started


def test_failed_images_are_redone_and_damaged_ones_regenerated(tmp_path, monkeypatch):
    manifest = write_inputs(tmp_path, 3)
    out = tmp_path / "out"
    monkeypatch.setenv("EDITLENS_TEST_FAIL_IDS", "e1")
    r = cli("edit", manifest, "--editor", SCRIPTED, "--out", out, "--no-progress")
    assert r.exit_code == 3, r.output
    assert "scripted failure of e1" in r.output
    assert sorted(digests(out)) == ["e0", "e2"]
    monkeypatch.delenv("EDITLENS_TEST_FAIL_IDS")
    first = rows(out / "manifest.jsonl")[0]
    (out / first["edited"]).write_bytes(b"damaged")  # a file that no longer matches its recorded hash
    r = cli("edit", manifest, "--editor", SCRIPTED, "--out", out, "--no-progress")
    assert r.exit_code == 0, r.output
    assert "2 images generated, 1 kept, 0 failed" in r.output
    assert sorted(digests(out)) == ["e0", "e1", "e2"]
    # other settings in the same folder are refused: it would mix two editors
    r = cli("edit", manifest, "--editor", SCRIPTED, "--out", out, "--seed", "5", "--no-progress")
    assert r.exit_code == 2 and "other settings" in r.output and "seed 0 -> 5" in r.output


def test_prompt_suffix_of_a_tuned_editor(tiny_ip2p, tmp_path):
    import shutil

    from editlens.editors import create_editor

    tuned = tmp_path / "tuned"
    shutil.copytree(tiny_ip2p, tuned)
    (tuned / "editlens_editor.json").write_text(json.dumps(
        {"family": "instruct-pix2pix", "prompt_suffix": " The image quality is five out of five.",
         "source": {"base": "tiny"}}))
    ed = create_editor(str(tuned), steps=2, resolution=32)
    assert ed.prompt("make it red ") == "make it red The image quality is five out of five."
    assert ed.settings()["prompt_suffix_from"] == "editlens_editor.json"
    assert ed.weights()["tuned_from"] == {"base": "tiny"}
    assert create_editor(str(tuned), prompt_suffix="").prompt("make it red") == "make it red"
    from editlens.runner.edit import generate_edits

    res = generate_edits(write_inputs(tmp_path, 1), ed, tmp_path / "out", progress=False)
    assert res.generated == 1
    assert rows(tmp_path / "out" / "manifest.jsonl")[0]["prompt"].endswith("five out of five.")


class _ImageEditServer:
    """A small OpenAI-compatible /v1/images/edits on 127.0.0.1: answers the
    source flipped left-right as b64_json; the first request gets a 500."""

    def __init__(self) -> None:
        self.fields: list[dict[str, str]] = []
        self.calls = 0

    def __enter__(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                from email.parser import BytesParser
                from email.policy import HTTP

                body = self.rfile.read(int(self.headers["Content-Length"]))
                msg = BytesParser(policy=HTTP).parsebytes(
                    f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
                fields, image = {}, None
                for part in msg.iter_parts():
                    name = part.get_param("name", header="content-disposition")
                    if name == "image":
                        image = Image.open(io.BytesIO(part.get_payload(decode=True))).convert("RGB")
                    else:
                        fields[name] = part.get_content().strip()
                fake.calls += 1
                if self.path != "/v1/images/edits" or fake.calls == 1:
                    self.send_response(500 if fake.calls == 1 else 404)
                    self.end_headers()
                    return
                fake.fields.append(fields)
                buf = io.BytesIO()
                image.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(buf, format="PNG")
                data = json.dumps({"data": [{"b64_json": base64.b64encode(buf.getvalue()).decode()}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()


def test_endpoint_editor(tmp_path):
    from editlens.runner.edit import derive_seed, generate_edits

    manifest = write_inputs(tmp_path, 2)
    fake = _ImageEditServer()
    with fake as url:
        res = generate_edits(manifest, url, tmp_path / "out", progress=False,
                             editor_options={"model": "edit-1", "max_retries": 2})
    assert res.generated == 2 and res.failed == 0
    assert sorted(f["seed"] for f in fake.fields) == sorted(str(derive_seed(0, f"e{i}", 0)) for i in range(2))
    assert {f["model"] for f in fake.fields} == {"edit-1"} and {f["response_format"] for f in fake.fields} == {"b64_json"}
    got = rows(tmp_path / "out" / "manifest.jsonl")
    src = np.asarray(Image.open(tmp_path / "src0.png").convert("RGB"))
    assert np.array_equal(np.asarray(Image.open(tmp_path / "out" / got[0]["edited"])), src[:, ::-1])
    assert got[0]["model"] == "edit-1"


def test_callable_and_command_editors(tmp_path):
    from editlens.runner.edit import generate_edits

    manifest = write_inputs(tmp_path, 2)
    res = generate_edits(manifest, "editlens.editors.callable_editor:identity_edit", tmp_path / "id", progress=False)
    got = rows(tmp_path / "id" / "manifest.jsonl")
    assert res.generated == 2 and got[0]["model"] == "identity_edit"
    assert np.array_equal(np.asarray(Image.open(tmp_path / "id" / got[0]["edited"])),
                          np.asarray(Image.open(tmp_path / "src0.png").convert("RGB")))
    script = tmp_path / "editor.py"
    script.write_text("import sys\nfrom PIL import Image, ImageOps\n"
                      "src, instruction, seed, out = sys.argv[1:5]\n"
                      "assert instruction == 'make it a cat'\n"
                      "if seed == 'never': sys.exit(1)\n"
                      "ImageOps.invert(Image.open(src).convert('RGB')).save(out)\n")
    spec = f"command:{sys.executable} {script} {{source}} {{instruction}} {{seed}} {{out}}"
    res = generate_edits(manifest, spec, tmp_path / "cmd", progress=False)
    got = rows(tmp_path / "cmd" / "manifest.jsonl")
    assert res.generated == 2
    assert np.array_equal(np.asarray(Image.open(tmp_path / "cmd" / got[1]["edited"])),
                          255 - np.asarray(Image.open(tmp_path / "src1.png").convert("RGB")))
    bad = f"command:{sys.executable} -c 'import sys; sys.exit(4)' {{out}}"
    res = generate_edits(manifest, bad, tmp_path / "bad", progress=False)
    assert res.failed == 2 and "status 4" in res.failures[0]["error"]


def test_pairwise_knockout_keeps_the_champion_on_ties():
    from editlens.core.types import EditSample
    from editlens.runner.best_of_n import knockout

    cands = [EditSample(f"e-s{k}", "s.png", f"c{k}.png", "do it", metadata={"group": "e", "sample": k})
             for k in range(4)]
    quality = {"c0.png": 1, "c1.png": 3, "c2.png": 3, "c3.png": 2}

    class Judge:
        name = "fake pairwise"
        asked: list = []

        def compare(self, items, batch_size):
            self.asked += [(it.edited_a, it.edited_b) for it in items]
            out = []
            for it in items:
                qa, qb = quality[it.edited_a], quality[it.edited_b]
                out.append({"verdict": "A>B" if qa > qb else "B>A" if qb > qa else "A=B", "consistent": True})
            return out

    judge = Judge()
    doc = knockout(cands, judge)
    (pick,) = doc["picks"]
    assert pick["best_id"] == "e-s1"  # c1 beat c0, tied c2 (the champion stays), beat c3
    assert judge.asked == [("c0.png", "c1.png"), ("c1.png", "c2.png"), ("c1.png", "c3.png")]
    tally = {c["id"]: (c["wins"], c["losses"], c["ties"]) for c in pick["candidates"]}
    assert tally == {"e-s0": (0, 1, 0), "e-s1": (2, 0, 1), "e-s2": (0, 0, 1), "e-s3": (0, 1, 0)}
    assert len(pick["matches"]) == 3


def test_bad_specs_and_missing_weights(tmp_path, monkeypatch):
    from editlens.editors import create_editor

    with pytest.raises(InputError, match="no such folder"):
        create_editor("./no/such/editor")
    with pytest.raises(InputError, match="not a registered editor"):
        create_editor("pix2pix-turbo-nonexistent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelUnavailableError, match="no model_index.json"):
        create_editor(str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelUnavailableError) as exc:
        create_editor("instruct-pix2pix")
    assert "hf download timbrooks/instruct-pix2pix" in str(exc.value) and "--editor DIR" in str(exc.value)
    with pytest.raises(InputError, match=r"no \{out\} placeholder"):
        create_editor("command:cat {source}")
    with pytest.raises(InputError, match="has no 'nope'"):
        create_editor("editlens.editors.callable_editor:nope")
    r = cli("edit", write_inputs(tmp_path, 1), "--editor", "./missing-editor", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "no such folder" in r.output and "Traceback" not in r.output
    r = cli("make-tiny-editor", tmp_path / "t", "--family", "sdxl")
    assert r.exit_code == 2 and "instruct-pix2pix" in r.output


def test_a_tiny_editor_generates_at_its_native_size_unless_told_otherwise(tmp_path):
    """make-tiny-editor's folder carries its resolution (the family's 512 px would make a tiny VAE's latents
    huge); an option replaces it; a setting the folder cannot have is refused naming the file."""
    from editlens.runner.edit import generate_edits

    tiny = tmp_path / "tiny"
    assert cli("make-tiny-editor", tiny, "--image-size", "24").exit_code == 0
    inputs = write_inputs(tmp_path, 1)  # a 48 x 40 source
    generate_edits(inputs, str(tiny), tmp_path / "native", progress=False, editor_options={"steps": 1})
    record = json.loads((tmp_path / "native" / "editor.json").read_text())["settings"]
    assert record["resolution"] == 24 and record["settings_from_folder"] == ["resolution"]
    assert max(Image.open(tmp_path / "native" / rows(tmp_path / "native" / "manifest.jsonl")[0]["edited"]).size) == 24
    generate_edits(inputs, str(tiny), tmp_path / "told", progress=False,
                   editor_options={"steps": 1, "resolution": 32})
    assert max(Image.open(tmp_path / "told" / rows(tmp_path / "told" / "manifest.jsonl")[0]["edited"]).size) == 32
    card = tiny / "editlens_editor.json"
    card.write_text(json.dumps({"settings": {"resolution": 24, "sharpness": 3}}))
    from editlens.editors import create_editor

    with pytest.raises(InputError, match=r"editlens_editor.json: settings: unknown setting\(s\) sharpness"):
        create_editor(str(tiny))


def test_other_families_generate(tmp_path):
    from editlens.runner.edit import generate_edits

    flux = tmp_path / "flux"
    r = cli("make-tiny-editor", flux, "--family", "flux-kontext")
    assert r.exit_code == 0, r.output
    assert json.loads((flux / "model_index.json").read_text())["_class_name"] == "FluxKontextPipeline"
    res = generate_edits(write_inputs(tmp_path, 1), str(flux), tmp_path / "out", progress=False,
                         editor_options={"steps": 2, "resolution": 32, "auto_resize": False})
    assert res.generated == 1
    record = json.loads((tmp_path / "out" / "editor.json").read_text())
    assert record["settings"]["family"] == "flux-kontext" and record["settings"]["pipeline_class"] == "FluxKontextPipeline"
    assert Image.open(tmp_path / "out" / rows(tmp_path / "out" / "manifest.jsonl")[0]["edited"]).size == (32, 16)


def test_qwen_image_edit_generates(tmp_path):
    pytest.importorskip("torchvision", reason="the Qwen2-VL processor of the tiny pipeline needs torchvision")
    from editlens.runner.edit import generate_edits
    from editlens.testing.tiny_editors import make_tiny_editor

    qwen = make_tiny_editor(tmp_path / "qwen", "qwen-image-edit")
    res = generate_edits(write_inputs(tmp_path, 1), str(qwen), tmp_path / "out", progress=False,
                         editor_options={"steps": 2, "resolution": 32})
    assert res.generated == 1


def test_python_edit_run_and_best_of_generated(tmp_path):
    from editlens.data.manifest import read_manifest
    from editlens.runner.best_of_n import best_of_generated
    from editlens.runner.edit import generate_edits
    from editlens.runner.run import run_evaluation
    from editlens.runner.selection import select_metrics

    made = generate_edits(write_inputs(tmp_path, 2), SCRIPTED, tmp_path / "edits", samples=3, progress=False)
    assert made.generated == 6
    samples = read_manifest(made.manifest).samples
    assert {s.model for s in samples} == {"scripted_editor"} and samples[0].metadata["category"] == "c0"
    res = run_evaluation(samples, select_metrics(["psnr"]).metrics, tmp_path / "run", progress=False)
    assert res.computed == 6
    doc = best_of_generated(made.manifest, "psnr")
    by_edit = {p["group"]: p for p in doc["picks"]}
    assert sorted(by_edit) == ["e0", "e1"]
    for p in by_edit.values():
        values = [c["value"] for c in p["candidates"]]
        assert len(values) == 3 and p["best_value"] == max(values)  # psnr: higher is better, from its spec
        assert {c["sample"] for c in p["candidates"]} == {0, 1, 2}


def test_best_of_n_knockout_with_the_pairwise_judge_both_orders(tmp_path):
    """Generated candidates judged by the real pairwise judge (both presentation
    orders) over a scripted backend that prefers the brighter edit: the knockout
    keeps the brightest candidate of each edit."""
    from scripted import ScriptedBackend

    from editlens.data.manifest import read_manifest
    from editlens.metrics.registry import create_metric
    from editlens.runner.best_of_n import knockout
    from editlens.runner.compare import JudgeComparer
    from editlens.runner.edit import generate_edits

    made = generate_edits(write_inputs(tmp_path, 2), SCRIPTED, tmp_path / "edits", samples=3, progress=False)
    samples = read_manifest(made.manifest).samples

    def brighter(r):  # images: source, first shown, second shown
        first, second = (float(np.mean(im)) for im in r.images[1:3])
        return "[[A>B]]" if first > second else "[[B>A]]"

    backend = ScriptedBackend(brighter)
    comparer = JudgeComparer.__new__(JudgeComparer)
    comparer.judge = create_metric("pairwise", vlm="scripted", orders="both")
    comparer.judge._backend = backend
    comparer.name = "pairwise (both)"
    doc = knockout(samples, comparer)
    assert len(backend.requests) == 2 * 2 * 2  # 2 edits x 2 matches x both orders
    for p in doc["picks"]:
        group = [s for s in samples if s.metadata["group"] == p["group"]]
        brightest = max(group, key=lambda s: float(np.mean(np.asarray(Image.open(s.edited)))))
        assert p["best_id"] == brightest.id
        assert all(m["consistent"] for m in p["matches"]) and len(p["matches"]) == 2


def test_two_editors_paired_for_compare(tmp_path):
    manifest = write_inputs(tmp_path, 2)
    for name, spec in (("a", "editlens.editors.callable_editor:identity_edit"), ("b", SCRIPTED)):
        assert cli("edit", manifest, "--editor", spec, "--out", tmp_path / name, "--no-progress").exit_code == 0
    r = cli("edit-pairs", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "pairs.jsonl")
    assert r.exit_code == 0, r.output
    pairs = rows(tmp_path / "pairs.jsonl")
    assert [(p["id"], p["model_a"], p["model_b"]) for p in pairs] == [("e0", "identity_edit", "scripted_editor"),
                                                                       ("e1", "identity_edit", "scripted_editor")]
    r = cli("compare", "--pairs", tmp_path / "pairs.jsonl", "--metric", "psnr", "--out", tmp_path / "verdicts.jsonl")
    assert r.exit_code == 0, r.output
    # the unchanged image is infinitely close to its source: PSNR prefers editor A on both
    assert [v["verdict"] for v in rows(tmp_path / "verdicts.jsonl")] == ["A>B", "A>B"]


def test_run_with_editor_chains_generation_and_scoring(tmp_path, monkeypatch):
    manifest = write_inputs(tmp_path, 3)
    monkeypatch.setenv("EDITLENS_TEST_FAIL_IDS", "e2")
    r = cli("run", manifest, "--editor", SCRIPTED, "--edit-samples", "2", "--out", tmp_path / "run",
            "--metrics", "psnr", "--no-progress")
    assert r.exit_code == 3, r.output  # the failed images make the exit status, after scoring the rest
    assert "4 samples" in r.output and "2 image(s) failed to generate" in r.output
    monkeypatch.delenv("EDITLENS_TEST_FAIL_IDS")
    r = cli("run", manifest, "--editor", SCRIPTED, "--edit-samples", "2", "--out", tmp_path / "run",
            "--metrics", "psnr", "--no-progress")
    assert r.exit_code == 0, r.output
    assert "2 images generated, 4 kept" in r.output and "6 samples: 2 results computed, 4 reused" in r.output
    assert len(rows(tmp_path / "run" / "edits" / "manifest.jsonl")) == 6


def test_every_catalog_editor_and_family_preset_resolves():
    from editlens.editors import Editor, families, list_editors
    from editlens.editors.spec import family_of_class

    specs = list_editors()
    assert all(issubclass(s.load_class(), Editor) for s in specs)
    assert {s.family for s in specs if s.family} <= set(families())
    import diffusers

    for fam in families().values():
        assert all(hasattr(diffusers, c) for c in fam.pipeline_classes), fam.family
        assert all(family_of_class(c) == fam.family for c in fam.pipeline_classes)
    assert family_of_class("QwenImageEditPlusPipeline") == "qwen-image-edit-plus"


def test_an_editor_that_loses_outputs_fails_those_edits(tmp_path):
    from editlens.editors import Editor, EditOutput
    from editlens.runner.edit import generate_edits

    class Lossy(Editor):
        name, batch_size = "lossy", 2

        def edit_batch(self, requests):
            return [EditOutput(image=requests[0].source)]  # one image for two requests: which edit is it?

    res = generate_edits(write_inputs(tmp_path, 2), Lossy(), tmp_path / "out", progress=False)
    assert res.generated == 0 and res.failed == 2
    assert "returned 1 outputs for 2 requests" in res.failures[0]["error"]
