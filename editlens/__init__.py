"""editlens: judge instruction-guided image edits.

Heavy modules (torch, transformers) are imported only when a feature that
needs them is used; ``import editlens`` itself is cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "EditSample": "editlens.core.types",
    "LoadedEdit": "editlens.core.types",
    "Score": "editlens.core.types",
    "ImageLoadOptions": "editlens.core.images",
    "load_image": "editlens.core.images",
    "read_manifest": "editlens.data.manifest",
    "create_metric": "editlens.metrics.registry",
    "list_metrics": "editlens.metrics.registry",
    "register_metric": "editlens.metrics.registry",
    "MetricSpec": "editlens.metrics.spec",
    "change_map": "editlens.metrics.changemap",
    "score_edit": "editlens.runner.scoring",
    "RewardFunction": "editlens.runner.reward",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'editlens' has no attribute {name!r}")
