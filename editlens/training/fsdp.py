"""FSDP for the one training loop: the model's layers sharded over the processes (torch's FSDP2,
``torch.distributed.fsdp.fully_shard``), for models whose weights, gradients and optimiser state do
not fit one device several times over.

Chosen with ``LoopSettings.sharding="fsdp"`` (``--sharding fsdp`` on every trainer) or by launching
with ``accelerate launch --use_fsdp`` (accelerate sets ``ACCELERATE_USE_FSDP``; its
``--fsdp_transformer_layer_cls_to_wrap`` names the layer classes). What it does:

* **wrap policy**: every outermost module whose class is one of the model's transformer-layer classes
  (the ``_no_split_modules`` of its transformers / diffusers parts, or the classes accelerate was told)
  and that holds a trainable parameter becomes one FSDP unit; its parameters (frozen base weights and
  LoRA adapters alike: FSDP2 keeps each parameter's ``requires_grad``) are split in rows over the
  processes, gathered for each forward and backward, and its gradients reduce-scattered (averaged).
  Everything outside those layers (embeddings, heads, a score decoder) stays whole on every process
  and its gradients are averaged as in data-parallel training.
* **precision**: the project's one policy, unchanged: trainable parameters are float32 master weights,
  the forward pass runs under the policy's autocast; FSDP gathers parameters in their stored dtype and
  reduces gradients in float32.
* **checkpoints and exports are whole**: before the main process validates, checkpoints or exports,
  every process takes part in gathering the full weights (:meth:`Sharded.full`) and the full optimiser
  state, so ``state.pt``, a checkpoint's adapter and the exported weights are those a one-process run
  writes (they load with the usual ``from_pretrained`` / ``--resume`` paths, with any number of
  processes, sharded or not). Resuming loads the whole state and shards it again.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

from editlens.errors import InputError

SHARDINGS = ("ddp", "fsdp")
#: what ``accelerate launch --use_fsdp`` and ``--fsdp_transformer_layer_cls_to_wrap`` set
ENV_USE_FSDP = "ACCELERATE_USE_FSDP"
ENV_LAYER_CLASSES = "FSDP_TRANSFORMER_CLS_TO_WRAP"


def chosen_sharding(value: str | None) -> str:
    """``value`` (``ddp`` / ``fsdp``), or when it is not given: ``fsdp`` under ``accelerate launch --use_fsdp``,
    else ``ddp``.

    >>> chosen_sharding("ddp")
    'ddp'
    """
    if value is None:
        return "fsdp" if os.environ.get(ENV_USE_FSDP, "").strip().lower() in ("1", "true", "yes") else "ddp"
    value = str(value).strip().lower()
    if value not in SHARDINGS:
        raise InputError(f"sharding must be one of {', '.join(SHARDINGS)}, got {value!r}")
    return value


def refuse_fsdp(sharding: str | None, trainer: str, why: str) -> None:
    """Stop before anything loads when ``trainer`` cannot run sharded (``--sharding fsdp``, or launched by
    ``accelerate launch --use_fsdp``): say why and what works instead."""
    if chosen_sharding(sharding) == "fsdp":
        raise InputError(f"{trainer} does not train with FSDP sharding ({why}); use --sharding ddp (each "
                         "process holds the whole model; launched by `accelerate launch --use_fsdp`, pass "
                         "--sharding ddp or launch without --use_fsdp)")


def layer_classes(model: Any) -> list[str]:
    """The class names of the model's transformer layers: those accelerate was told
    (``$FSDP_TRANSFORMER_CLS_TO_WRAP``, comma-separated), else every ``_no_split_modules`` of its parts."""
    told = os.environ.get(ENV_LAYER_CLASSES, "").strip()
    if told:
        return [c.strip() for c in told.split(",") if c.strip()]
    names: list[str] = []
    for m in model.modules():
        for c in getattr(m, "_no_split_modules", None) or []:
            if isinstance(c, str) and c not in names:
                names.append(c)
    return names


def _units(model: Any, classes: list[str]) -> list[Any]:
    """The outermost modules of ``classes`` that hold a trainable parameter, in module order."""
    wanted = set(classes)
    units: list[Any] = []
    inside: set[int] = set()
    for m in model.modules():
        if id(m) in inside:
            continue
        if type(m).__name__ in wanted and any(p.requires_grad for p in m.parameters()):
            units.append(m)
            inside.update(id(x) for x in m.modules())
    return units


def _is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


class Sharded:
    """A model whose layers FSDP shards over the processes (see the module docstring)."""

    def __init__(self, model: Any, units: list[Any], classes: list[str]) -> None:
        self.model, self.units, self.classes = model, units, classes

    def describe(self) -> dict[str, Any]:
        return {"sharding": "fsdp", "fsdp_units": len(self.units), "fsdp_layer_classes": self.classes}

    # -- gradients ------------------------------------------------------------------------------
    def replicated(self, params: list[Any]) -> list[Any]:
        """The parameters FSDP does not manage (their gradients are averaged by the loop)."""
        return [p for p in params if not _is_dtensor(p)]

    def clip_grad_norm_(self, params: list[Any], max_norm: float) -> float:
        """Clip the gradients of ``params`` (sharded and whole) to a total 2-norm of ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_`` does on the whole gradients of one process."""
        import torch
        import torch.distributed as dist

        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return 0.0
        device = grads[0].device
        local = torch.zeros((), dtype=torch.float32, device=device)
        whole = torch.zeros((), dtype=torch.float32, device=device)
        for g in grads:
            if _is_dtensor(g):
                local += g.to_local().float().pow(2).sum()
            else:
                whole += g.float().pow(2).sum()
        dist.all_reduce(local)  # each shard once: the sum over processes is the whole gradient's
        total = float((local + whole).sqrt())
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            with torch.no_grad():
                for g in grads:
                    (g.to_local() if _is_dtensor(g) else g).mul_(coef)
        return total

    # -- whole weights --------------------------------------------------------------------------
    def _sharded_slots(self) -> list[tuple[Any, str, Any]]:
        return [(m, n, p) for m in self.model.modules() for n, p in list(m._parameters.items())
                if p is not None and _is_dtensor(p)]

    @contextlib.contextmanager
    def full(self, write_back: bool = False) -> Iterator[None]:
        """The whole parameters in the model, on every process (a collective: every process enters),
        with FSDP's forward hooks off so the main process alone may run the model; ``write_back``:
        what the block wrote into them is sharded back into the parameters that train."""
        import torch

        slots = self._sharded_slots()
        hooks = [(u, dict(u._forward_pre_hooks), dict(u._forward_hooks)) for u in self.units]
        with torch.no_grad():
            whole = [torch.nn.Parameter(p.full_tensor(), requires_grad=p.requires_grad) for _, _, p in slots]
        for (m, n, _), w in zip(slots, whole):
            m._parameters[n] = w
        for u, _, _ in hooks:
            u._forward_pre_hooks.clear()
            u._forward_hooks.clear()
        try:
            yield
        finally:
            for m, n, p in slots:
                m._parameters[n] = p
            for u, pre, post in hooks:
                u._forward_pre_hooks.update(pre)
                u._forward_hooks.update(post)
        if write_back:
            from torch.distributed.tensor import distribute_tensor

            with torch.no_grad():
                for (_, _, p), w in zip(slots, whole):
                    p.to_local().copy_(distribute_tensor(w.detach(), p.device_mesh, p.placements).to_local())

    def full_optimizer_state(self, optimizer: Any) -> dict[str, Any]:
        """``optimizer.state_dict()`` with every sharded tensor whole (a collective)."""
        state = optimizer.state_dict()  # its per-parameter dicts are the optimiser's own: not changed here
        state["state"] = {i: {k: v.full_tensor() if _is_dtensor(v) else v for k, v in slot.items()}
                          for i, slot in state["state"].items()}
        return state

    def shard_optimizer_state(self, optimizer: Any) -> None:
        """After ``optimizer.load_state_dict`` of a whole state: shard the tensors of sharded parameters."""
        from torch.distributed.tensor import distribute_tensor

        for group in optimizer.param_groups:
            for p in group["params"]:
                if not _is_dtensor(p):
                    continue
                slot = optimizer.state.get(p, {})
                for k, v in list(slot.items()):
                    if hasattr(v, "shape") and not _is_dtensor(v) and tuple(v.shape) == tuple(p.shape):
                        slot[k] = distribute_tensor(v.to(p.to_local().device), p.device_mesh, p.placements)


def shard(model: Any, processes: Any, precision: Any) -> Sharded | None:
    """Shard ``model``'s transformer layers over ``processes`` with FSDP2 (``None`` for one process: there
    is nothing to shard). Call it after the trainable parameters are float32 and equal on every process,
    before the optimiser is built."""
    if not processes.several:
        return None
    import torch

    for p in model.parameters():
        if type(p).__name__ == "Params4bit" or p.dtype in (torch.uint8, torch.int8):
            raise InputError("--sharding fsdp cannot shard 4-bit / 8-bit quantised base weights; use "
                             "--quantization none, or --sharding ddp for QLoRA")
    classes = layer_classes(model)
    units = _units(model, classes)
    if not units:
        raise InputError(f"--sharding fsdp: {type(model).__name__} has no transformer layers holding trainable "
                         f"parameters to shard (layer classes: {', '.join(classes) or 'none declared'}); name them "
                         f"with ${ENV_LAYER_CLASSES} (accelerate's --fsdp_transformer_layer_cls_to_wrap), or use "
                         "--sharding ddp")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kind = str(precision.device).split(":")[0]
    mesh = init_device_mesh("cuda" if kind == "cuda" else "cpu", (processes.world,))
    policy = MixedPrecisionPolicy(reduce_dtype=torch.float32)
    for unit in units:
        fully_shard(unit, mesh=mesh, mp_policy=policy, reshard_after_forward=True)
    return Sharded(model, units, classes)

