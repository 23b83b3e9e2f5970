"""The training-option vocabulary shared by every ``... train`` command and
``adiee tune-editor``: the same names mean the same thing everywhere.

* ``--val-every N``: steps between validations (0: at the end only, or per
  epoch where a command trains by epochs).
* ``--save-every N``: steps between checkpoints (0: at the end and on
  interruption only, or per epoch where a command trains by epochs).
* ``--lora-rank R``: the rank of the LoRA adapters that train (0 where a
  command can train whole weights instead: no adapters).
* ``--quantization auto|nf4|none``: the frozen base weights in 4-bit NF4
  (QLoRA) or not; ``auto`` is the recipe's own choice on this machine.

Earlier spellings (``--eval-every``, ``--rank``, ``--lora-r``, ``--qlora``)
stay as hidden aliases for one release.
"""

from __future__ import annotations

import enum
from typing import Any

import typer

from editlens.errors import InputError


class LogTo(str, enum.Enum):
    tensorboard = "tensorboard"
    wandb = "wandb"


#: ``--log-to``: experiment tracking beside log.jsonl (see editlens.training.tracking)
LogToOpt = typer.Option(None, "--log-to", help="Also log every step's figures to tensorboard (OUT/tensorboard; "
                        "pip install 'editlens[tracking]') or wandb (pip install 'editlens[wandb]').")

class Sharding(str, enum.Enum):
    ddp = "ddp"
    fsdp = "fsdp"


#: ``--sharding``: how several processes (accelerate launch / torchrun) hold the model (editlens.training.fsdp)
ShardingOpt = typer.Option(None, "--sharding", help="With several processes (accelerate launch / torchrun): ddp "
                           "(each holds the whole model) or fsdp (the transformer layers sharded over them, FSDP2); "
                           "default: fsdp under `accelerate launch --use_fsdp`, else ddp. One process: ignored.")

#: the shared names every training command accepts
SHARED = ("--val-every", "--save-every", "--lora-rank", "--quantization", "--sharding")
VAL_EVERY_HELP = "Steps between validations (0: only at the end)."
SAVE_EVERY_HELP = "Steps between checkpoints (0: only at the end and on Ctrl-C)."
QUANT_HELP = "Frozen base weights: auto (the recipe's choice on this machine), nf4 (4-bit NF4, QLoRA) or none."


def aliased(new: Any, new_default: Any, old: Any, new_name: str, old_name: str) -> Any:
    """The value of an option given under its new name or a hidden earlier one (not both, differently)."""
    if old is None:
        return new
    if new != new_default and new != old:
        raise InputError(f"{old_name} is the earlier name of {new_name}; give one of them (got {new_name} {new} "
                         f"and {old_name} {old})")
    return old
