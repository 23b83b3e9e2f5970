"""Editors that end or outlive their call: ``sys.exit()`` in an editor never ends ``editlens edit``
as a success; a command editor runs in its own process group, killed whole on a time-out; a
background child it leaves behind neither holds its image back nor outlives it; its failures
name it and the real ``{out}`` path."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from editlens.cli.main import app

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")


def write_inputs(root: Path, n: int = 2) -> Path:
    rows = []
    for i in range(n):
        Image.fromarray(np.full((12, 16, 3), 40 * i, np.uint8)).save(root / f"src{i}.png")
        rows.append({"id": f"e{i}", "source": f"src{i}.png", "instruction": "make it a cat"})
    (root / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "in.jsonl"


def exiting_editor(image, instruction, *, seed):  # type: ignore[no-untyped-def]
    sys.exit(0)


def test_an_editor_calling_sys_exit_makes_edit_exit_non_zero_naming_it(tmp_path):
    manifest = write_inputs(tmp_path)
    res = CliRunner().invoke(app, ["edit", str(manifest), "--editor", f"{__name__}:exiting_editor",
                                   "--out", str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code == 3, res.output
    assert f"the editor {__name__}:exiting_editor called sys.exit(0)" in res.output
    assert "0 images generated" in res.output and "2 failed" in res.output
    assert (tmp_path / "out" / "manifest.jsonl").read_text() == ""  # nothing made, and said so


def test_any_editor_ending_the_process_fails_its_images(tmp_path):
    from editlens.editors import Editor
    from editlens.runner.edit import generate_edits

    class Quits(Editor):
        name, batch_size = "quits", 2

        def edit_batch(self, requests):  # type: ignore[no-untyped-def]
            raise SystemExit("bye")

    res = generate_edits(write_inputs(tmp_path), Quits(), tmp_path / "out", progress=False)
    assert res.generated == 0 and res.failed == 2
    assert "the editor quits called sys.exit('bye')" in res.failures[0]["error"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead: reaped by init soon
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _wait_dead(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds  # bounded wait for the kernel to end them, not a timing
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_a_time_out_kills_the_whole_process_group(tmp_path):
    from editlens.runner.edit import generate_edits

    pids = tmp_path / "pids"
    script = tmp_path / "hang.py"
    # the program starts two children (one a grandchild) that sleep, writes their pids, then hangs
    script.write_text(
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']) for _ in range(2)]\n"
        f"open({str(pids)!r} + '-' + sys.argv[1], 'w').write(' '.join(str(k.pid) for k in kids))\n"
        "time.sleep(300)\n")
    spec = f"command:{sys.executable} {script} {{id}} {{out}}"
    from editlens.editors.command import CommandEditor

    editor = CommandEditor(spec.split(":", 1)[1], timeout=3)
    res = generate_edits(write_inputs(tmp_path), editor, tmp_path / "out", progress=False)
    assert res.failed == 2
    assert "ran past 3 s (its process group was killed)" in res.failures[0]["error"]
    children = [int(p) for f in tmp_path.glob("pids-*") for p in f.read_text().split()]
    assert len(children) == 4
    assert _wait_dead(children) == []


def test_a_background_child_left_behind_neither_holds_the_image_nor_outlives_it(tmp_path):
    from editlens.editors.command import CommandEditor
    from editlens.runner.edit import generate_edits

    pid_file = tmp_path / "bg.pid"
    script = tmp_path / "fork.py"
    # writes its image, leaves a child holding stderr open for 300 s, exits 0
    script.write_text(
        "import subprocess, sys\nfrom PIL import Image\n"
        "Image.open(sys.argv[1]).convert('RGB').save(sys.argv[2])\n"
        "bg = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(bg.pid))\n"
        "sys.stderr.write('left a child\\n')\n")
    editor = CommandEditor([sys.executable, str(script), "{source}", "{out}"], timeout=120)
    res = generate_edits(write_inputs(tmp_path, 1), editor, tmp_path / "out", progress=False)
    assert (res.generated, res.failed) == (1, 0), res.failures
    assert _wait_dead([int(pid_file.read_text())]) == []


def test_wrote_no_image_names_the_path_and_the_command(tmp_path):
    from editlens.editors.base import EditRequest
    from editlens.editors.command import CommandEditor

    editor = CommandEditor([sys.executable, "-c", "import sys; sys.stderr.write('oops')", "{out}"], name="noop-cmd")
    out = editor.edit_batch([EditRequest("e", 0, Image.new("RGB", (4, 4)), "x", 1, {})])[0]
    assert out.image is None and "{out}" not in (out.error or "")
    assert "the command noop-cmd exited 0 but wrote no image to " in out.error and "out-0.png: oops" in out.error


def squashing_editor(image, instruction, *, seed):  # type: ignore[no-untyped-def]
    return image.resize((13, 500))


def test_outputs_of_another_size_or_aspect_are_noted(tmp_path):
    from editlens.runner.edit import generate_edits

    manifest = write_inputs(tmp_path)  # 16 x 12 sources
    res = CliRunner().invoke(app, ["edit", str(manifest), "--editor", f"{__name__}:squashing_editor",
                                   "--out", str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert ("note: 2 image(s) came back at another aspect ratio than their source (e.g. e0: 13x500 from 16x12)"
            in res.output)
    logged = [json.loads(x) for x in (tmp_path / "out" / "generations.jsonl").read_text().splitlines()]
    assert all(r["shape_note"] == "aspect ratio 0.026 from 1.333 (13x500 from a 16x12 source)" for r in logged)
    same = generate_edits(manifest, "editlens.editors.callable_editor:identity_edit", tmp_path / "id", progress=False)
    assert same.notes == [] and same.reshaped == []


def test_edit_bench_with_an_exiting_editor_names_it(tmp_path):
    import bench_files as F

    data = F.gedit(tmp_path / "gedit")
    res = CliRunner().invoke(app, ["edit", str(data), "--bench", "gedit", "--editor", f"{__name__}:exiting_editor",
                                   "--out", str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code == 3, res.output
    assert "0 of 4 cases made" in res.output
    assert f"the editor {__name__}:exiting_editor called sys.exit(0)" in res.output
