"""Shared fixtures: real sample images, and tiny random models built offline.

The tiny models are randomly initialised from ``transformers`` config
classes, saved to a temp dir and loaded back through editlens' real loading
code; no download happens. The real CLIP tokenizer files are used when
``../shared`` is present, else a small BPE tokenizer is trained on the spot.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import EXAMPLES, SHARED

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Mark ``once`` what need not run in both of CI's passes: pages in a browser (no model precision in
    them), 4-bit QLoRA training (bitsandbytes computes in its own dtype whatever EDITLENS_DTYPE says), the
    docs' shell examples (they run only commands that need no weights: no model, no precision) and the
    several-process tests (:data:`SEVERAL_PROCESSES`)."""
    import inspect

    for item in items:
        fn = getattr(item, "function", None)
        try:
            src = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            src = ""
        if "chromium_page(" in src or "qlora" in item.name.lower() or item.name.startswith("test_page_shell_examples"):
            item.add_marker(pytest.mark.once)
        elif getattr(getattr(item, "module", None), "__name__", None) in SEVERAL_PROCESSES:
            item.add_marker(pytest.mark.once)
    # the long tests first, so that xdist's workers (pyproject: --dist loadgroup hands out one test at a time)
    # start them early and finish together instead of one waiting on a late minute-long test
    items.sort(key=lambda item: 0 if item.get_closest_marker("once") or item.get_closest_marker("slow") else 1)


@pytest.fixture(autouse=True, scope="module")
def _browser_closed_after_each_module():  # type: ignore[no-untyped-def]
    """The shared Chromium (editlens.testing.browser) runs Playwright's event loop on this thread; a test of
    another module that calls asyncio.run() on it would find a loop already running. So it lives one module."""
    yield
    from editlens.testing import browser

    browser._close_shared()


#: tests that start several processes (torchrun / accelerate launch, Ray workers): a minute or more each on
#: two cores, so CI runs them in its first pass only (in bfloat16 where the CPU computes it natively); their
#: float32 runs are made by hand before a change lands (EDITLENS_DTYPE=float32 pytest tests/test_...)
SEVERAL_PROCESSES = {"test_training_distributed", "test_ray_generation"}


@pytest.fixture(scope="session")
def example_pairs() -> list[tuple[Path, Path, str]]:
    import json

    rows = [json.loads(line) for line in open(EXAMPLES / "manifest.jsonl")]
    return [(EXAMPLES / r["source"], EXAMPLES / r["edited"], r["instruction"]) for r in rows if r["source"] != r["edited"]]


def _train_tokenizer(tmp: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|startoftext|>", "<|endoftext|>", "<|unk|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["a photo of a cat", "a dog on a sofa", "make the sky blue", "add a red hat", "remove the car"] * 4
    tok.train_from_iterator(corpus, trainer)
    # like CLIP's: every text starts and ends with its markers. CLIP pools the
    # text at the end marker; without one every text would pool at its first
    # token ("a"), making "a photo of a cat" and "a photo of a dog" identical.
    bos, eos = tok.token_to_id("<|startoftext|>"), tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="<|startoftext|> $A <|endoftext|>",
                                                       special_tokens=[("<|startoftext|>", bos), ("<|endoftext|>", eos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>", unk_token="<|unk|>", model_max_length=77)


@pytest.fixture(scope="session")
def clip_tokenizer(tmp_path_factory):  # type: ignore[no-untyped-def]
    real = SHARED / "tokenizers" / "clip-vit-base-patch32"
    if real.is_dir():
        from transformers import CLIPTokenizerFast

        return CLIPTokenizerFast.from_pretrained(str(real))
    return _train_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory, clip_tokenizer) -> Path:  # type: ignore[no-untyped-def]
    import torch
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPModel

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-clip")
    cfg = CLIPConfig(
        text_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                         vocab_size=len(clip_tokenizer), max_position_embeddings=77,
                         eos_token_id=clip_tokenizer.eos_token_id, bos_token_id=clip_tokenizer.bos_token_id,
                         pad_token_id=clip_tokenizer.pad_token_id),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=16,
    )
    CLIPModel(cfg).save_pretrained(out)
    clip_tokenizer.save_pretrained(out)
    CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_dino_dir(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    import torch
    from transformers import BitImageProcessorPil, Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-dino")
    cfg = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                       image_size=32, patch_size=8)
    Dinov2Model(cfg).save_pretrained(out)
    BitImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                         image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(out)
    return out


@pytest.fixture(autouse=True)
def _fresh_encoders():  # type: ignore[no-untyped-def]
    yield
    import sys

    if "editlens.models.pool" in sys.modules:
        sys.modules["editlens.models.pool"].clear()  # every test loads its own models



@pytest.fixture(scope="session")
def tiny_vlm_dirs(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Tiny random Idefics3, Qwen2-VL and LLaVA-NeXT checkpoints, saved offline."""
    from editlens.models.random_init import BUILDERS

    return {fam: build(tmp_path_factory.mktemp(f"tiny-{fam}")) for fam, build in BUILDERS.items()}


@pytest.fixture(scope="session")
def editscore_dirs(tmp_path_factory):  # type: ignore[no-untyped-def]
    """(base, adapter) folders in EditScore's released layout whose model answers TR.GOOD_ANSWER."""
    from editlens.testing import tiny_reward as TR

    root = tmp_path_factory.mktemp("editscore")
    return {"q25": TR.build_editscore(root / "q25", "qwen2_5_vl", answer=TR.GOOD_ANSWER),
            "q3": TR.build_editscore(root / "q3", "qwen3_vl", answer=TR.GOOD_ANSWER)}


@pytest.fixture(scope="session")
def editreward_dirs(tmp_path_factory):  # type: ignore[no-untyped-def]
    """(base, checkpoint) folders in EditReward's released layout (random weights)."""
    from editlens.testing import tiny_reward as TR

    root = tmp_path_factory.mktemp("editreward")
    return {"q25": TR.build_editreward(root / "q25", "qwen2_5_vl", old_key_names=True),
            "q3": TR.build_editreward(root / "q3", "qwen3_vl")}


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory):  # type: ignore[no-untyped-def]
    """This checkout built as a wheel and installed in a fresh venv, once per test run (one xdist worker builds it, the
    others wait for it): ``(wheel, python, site)``. torch & co. are not
    reinstalled (no network, and minutes of CI): the venv sees this interpreter's site-packages through a
    plain path line, which is not itself scanned for .pth files, so this venv's editable editlens is not
    activated there and ``import editlens`` can only find the installed wheel."""
    import subprocess
    import sys
    import sysconfig

    from helpers import REPO, built_once

    def build(root: Path) -> list[str]:
        # no PYTHONPATH anywhere: a checkout on it would make pip think editlens is installed already
        clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        dist = root / "dist"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(dist), str(REPO)], check=True, capture_output=True, timeout=300, env=clean)
        (wheel,) = dist.glob("editlens-*.whl")
        venv = root / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        py = venv / "bin" / "python"
        site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        (Path(site) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q",
                        str(wheel)], check=True, capture_output=True, timeout=300, env=clean)
        return [str(wheel), str(py), site]

    wheel, py, site = built_once(tmp_path_factory, "wheel", build)
    return Path(wheel), Path(py), site


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EDITLENS_CACHE_DIR", str(tmp_path / "editlens-cache"))
    yield
