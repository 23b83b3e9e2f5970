"""Data-creation configuration: every rule, model list and threshold.

Read from a TOML (or YAML) file with one table per part; anything left out
keeps the default below. The resolved configuration is written into every
dataset it produced (``config.json``), so a dataset says how it was made.

Example file::

    seed = 0
    val_fraction = 0.1

    [rules]
    percentile = 5.0            # p: per-dataset percentile of input-vs-GT CLIP-I/DINO-I
    clip_d_threshold = 0.2      # strong models: below -> 0.5
    strong_above_threshold = "exclude"  # at/above it: "exclude" (as released) or "success" (score 1)
    weak_models = ["sdedit", "diffedit"]
    strong_models = ["magicbrush", "aurora"]

    [augment]
    kinds = ["crop", "color", "jpeg", "affine"]

    [multi_turn]
    pairs_per_sequence = 2
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from editlens.errors import InputError

AUGMENT_KINDS = ("crop", "color", "jpeg", "affine")


@dataclass
class RuleConfig:
    """Switches and thresholds of the score-assignment rules (paper sec. 3.1)."""

    ground_truth: bool = True  # reference edits score 1
    source_as_output: bool = True  # the unedited source scores 0
    clip_d_nonpositive: bool = True  # CLIP-D <= 0 scores 0
    below_input_percentile: bool = True  # CLIP-I and DINO-I both below the input percentile score 0
    percentile: float = 5.0
    clip_d_threshold: float = 0.2
    #: a strong model's output at or above the CLIP-D threshold: "exclude" (the released code) or "success" (1)
    strong_above_threshold: str = "exclude"
    weak_models: list[str] = field(default_factory=list)
    strong_models: list[str] = field(default_factory=list)


@dataclass
class AugmentConfig:
    """Augmented copies of each source (each copy scores 0)."""

    kinds: list[str] = field(default_factory=lambda: list(AUGMENT_KINDS))
    crop_fraction: float = 0.85  # keep at least this fraction of each side
    color_strength: float = 0.2  # brightness/contrast/saturation jitter, +-
    jpeg_quality: int = 40
    max_rotation_deg: float = 5.0
    max_shift_fraction: float = 0.05


@dataclass
class MultiTurnConfig:
    enabled: bool = True
    pairs_per_sequence: int = 2  # (i, j) pairs drawn per edit sequence
    join: str = " "  # how the instructions i+1..j are joined


@dataclass
class DataConfig:
    seed: int = 0
    val_fraction: float = 0.1  # share of *sources* held back for validation
    rules: RuleConfig = field(default_factory=RuleConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def validate(self) -> None:
        if not 0.0 <= self.rules.percentile <= 100.0:
            raise InputError(f"rules.percentile must be in [0, 100], got {self.rules.percentile}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise InputError(f"val_fraction must be in [0, 1), got {self.val_fraction}")
        bad = set(self.augment.kinds) - set(AUGMENT_KINDS)
        if bad:
            raise InputError(f"augment.kinds: unknown {sorted(bad)}; known {list(AUGMENT_KINDS)}")
        if self.rules.strong_above_threshold not in ("exclude", "success"):
            raise InputError(f"rules.strong_above_threshold must be exclude or success, got "
                             f"{self.rules.strong_above_threshold!r}")
        both = {m.lower() for m in self.rules.weak_models} & {m.lower() for m in self.rules.strong_models}
        if both:
            raise InputError(f"models listed as both weak and strong: {sorted(both)}")
        if self.multi_turn.pairs_per_sequence < 0:
            raise InputError("multi_turn.pairs_per_sequence must be >= 0")


def _fill(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        sub = {"rules": RuleConfig, "augment": AugmentConfig, "multi_turn": MultiTurnConfig}.get(name)
        if cls is DataConfig and sub is not None:
            if not isinstance(value, dict):
                raise InputError(f"{where}: [{name}] must be a table")
            value = _fill(sub, value, f"{where} [{name}]")
        kwargs[name] = value
    return cls(**kwargs)


def config_from_dict(data: dict[str, Any], where: str = "config") -> DataConfig:
    cfg = _fill(DataConfig, dict(data), where)
    cfg.validate()
    return cfg


def load_config(path: str | Path | None) -> DataConfig:
    """Defaults when ``path`` is ``None``; else the TOML/YAML file's values."""
    if path is None:
        return DataConfig()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: data-creation config not found")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        elif p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except Exception as exc:  # noqa: BLE001 - any parser error is the file's fault
        raise InputError(f"{p}: cannot parse the config ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"{p}: the config must be a table/mapping")
    return config_from_dict(data, str(p))
