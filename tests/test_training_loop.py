"""The shared training loop on a toy regression task: resume equals an
uninterrupted run, SIGINT/SIGTERM checkpoints, identity refusals, gradient
accumulation, schedule, clipping, checkpoint key accounting, precision
records; and the one atomic write."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch
from torch import nn

from editlens.errors import InputError
from editlens.models.precision import decide
from editlens.training import LoopSettings, PlotSpec, TrainingTask, latest_checkpoint, read_log, run

X = torch.from_numpy(np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32))
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.5


class Toy(TrainingTask):
    """Linear regression with dropout (so torch's RNG matters); batches drawn from (seed, step, micro)."""

    def __init__(self, rows=4, seed=0, dropout=0.2, lr=0.05, sgd=False, hooks=None, dtype=torch.float32):
        torch.manual_seed(123)
        self.model = nn.Sequential(nn.Dropout(dropout), nn.Linear(4, 1)).to(dtype)
        self.rows, self.seed, self.lr, self.sgd = rows, seed, lr, sgd
        self.hooks = hooks or {}
        self.seen_dtypes: set[str] = set()
        self.exported = 0

    def optimizer(self, params):
        return torch.optim.SGD(params, lr=self.lr) if self.sgd else torch.optim.AdamW(params, lr=self.lr)

    def batch(self, step, micro):
        if "batch" in self.hooks:
            self.hooks["batch"](step, micro)
        idx = np.random.default_rng([self.seed, step, micro]).choice(len(X), self.rows, replace=False)
        return X[idx], Y[idx]

    def loss(self, batch):
        x, y = batch
        pred = self.model(x)
        self.seen_dtypes.add(str(pred.dtype).replace("torch.", ""))
        return nn.functional.mse_loss(pred.float(), y), {"mae": (pred.float() - y).abs().mean()}

    @property
    def has_validation(self):
        return True

    def validate(self):
        assert not self.model.training and not torch.is_grad_enabled()
        return {"mse": float(nn.functional.mse_loss(self.model(X).float(), Y))}

    def export(self, result):
        self.exported += 1
        path = result.out / "model.pt"
        torch.save(self.model.state_dict(), path)
        return {"model": str(path)}


def _settings(out, steps=8, **kw):
    kw.setdefault("precision", decide("float32", "cpu", "training"))
    kw.setdefault("plot", None)  # drawing costs a second; the tests that look at the curve ask for it
    return LoopSettings(out=out, steps=steps, identity=kw.pop("identity", {"rank": 8, "seed": 0}),
                        progress=False, log=kw.pop("log", lambda m: None), **kw)


def _weights(task):
    return {k: v.detach().clone() for k, v in task.model.state_dict().items()}


def test_resume_after_interrupt_equals_uninterrupted(tmp_path):
    a = Toy()
    ra = run(a, _settings(tmp_path / "a", save_every=3, eval_every=4))
    assert ra.finished and not ra.interrupted and ra.exit_code == 0 and a.exported == 1
    full = read_log(tmp_path / "a")
    assert [r["step"] for r in full] == list(range(1, 9)) and "val" in full[3] and "val" in full[7]

    def boom(step, micro):
        if step == 4:  # during the 5th step: its gradients are discarded, the weights are step 4's
            raise KeyboardInterrupt

    b = Toy(hooks={"batch": boom})
    rb = run(b, _settings(tmp_path / "b", save_every=3, eval_every=4))
    assert rb.interrupted and rb.exit_code == 130 and rb.steps_done == 4 and b.exported == 0
    assert latest_checkpoint(tmp_path / "b").name == "step-0000004"
    lines = []
    b2 = Toy()
    rb2 = run(b2, _settings(tmp_path / "b", save_every=3, eval_every=4, log=lines.append))
    assert rb2.resumed_from == 4 and rb2.finished and any("resumed" in m and "step 4" in m for m in lines)
    for k, v in _weights(a).items():
        assert torch.equal(v, _weights(b2)[k]), k  # bit for bit: same batches, same dropout masks
    resumed = read_log(tmp_path / "b")
    assert [r["step"] for r in resumed] == list(range(1, 9))  # nothing lost, nothing redone
    assert [r["loss"] for r in resumed] == [r["loss"] for r in full]
    # the newest two checkpoints are kept
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["step-0000006", "step-0000008"]
    # a finished run rerun does nothing; asked for more steps it continues from the last checkpoint
    again = Toy()
    r = run(again, _settings(tmp_path / "b", save_every=3, eval_every=4))
    assert r.finished and r.steps_done == 8 and again.exported == 0 and len(read_log(tmp_path / "b")) == 8
    more = run(Toy(), _settings(tmp_path / "b", steps=10))
    assert more.resumed_from == 8 and [x["step"] for x in read_log(tmp_path / "b")] == list(range(1, 11))


def test_sigint_and_sigterm_stop_at_a_clean_step(tmp_path):
    def send(sig, at):
        def hook(step, micro):
            if step == at:
                os.kill(os.getpid(), sig)
        return hook

    lines = []
    task = Toy(hooks={"batch": send(signal.SIGINT, 2)})
    before = signal.getsignal(signal.SIGINT)
    r = run(task, _settings(tmp_path / "i", log=lines.append, plot=PlotSpec()))
    assert signal.getsignal(signal.SIGINT) is before  # the handler is put back
    # the step that was running when Ctrl-C came finished, then a checkpoint
    assert r.interrupted and r.signal == "SIGINT" and r.exit_code == 130 and r.steps_done == 3
    assert latest_checkpoint(tmp_path / "i").name == "step-0000003"
    assert [x["step"] for x in read_log(tmp_path / "i")] == [1, 2, 3]
    assert any("SIGINT" in m and "stopping after this step" in m for m in lines)
    assert json.loads((tmp_path / "i" / "summary.json").read_text())["interrupted"] is True
    assert (tmp_path / "i" / "loss.png").stat().st_size > 1000

    r = run(Toy(hooks={"batch": send(signal.SIGTERM, 1)}), _settings(tmp_path / "t"))
    assert r.interrupted and r.signal == "SIGTERM" and r.exit_code == 143 and r.steps_done == 2

    def twice(step, micro):
        if step == 1:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C: stop now

    r = run(Toy(hooks={"batch": twice}), _settings(tmp_path / "n"))
    assert r.interrupted and r.steps_done == 1 and latest_checkpoint(tmp_path / "n").name == "step-0000001"


def test_identity_mismatch_names_the_setting(tmp_path):
    run(Toy(), _settings(tmp_path / "r", steps=2))
    with pytest.raises(InputError, match=r"other settings \(rank was 8, now 4\)"):
        run(Toy(), _settings(tmp_path / "r", steps=4, identity={"rank": 4, "seed": 0}))
    with pytest.raises(InputError, match="base was a, now b.*seed was 0, now 1"):
        run(Toy(), _settings(tmp_path / "s", steps=2, identity={"base": "a", "seed": 0}))
        run(Toy(), _settings(tmp_path / "s", steps=2, identity={"base": "b", "seed": 1}))
    # a checkpoint of an earlier editlens is named, not silently ignored
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "train_state.pt").write_bytes(b"x")
    with pytest.raises(InputError, match="earlier editlens .*train_state.pt"):
        run(Toy(), _settings(tmp_path / "old", steps=2))
    # --restart discards the old run
    r = run(Toy(), _settings(tmp_path / "r", steps=2, identity={"rank": 4}, restart=True))
    assert r.resumed_from == 0 and r.finished


def test_checkpoint_accounts_for_every_key(tmp_path):
    run(Toy(), _settings(tmp_path / "r", steps=4, save_every=2))
    bigger = Toy()
    bigger.model.add_module("extra", nn.Linear(1, 1))
    with pytest.raises(InputError, match=r"2 trainable parameter\(s\) missing from it .*extra"):
        run(bigger, _settings(tmp_path / "r", steps=6))
    frozen = Toy()
    frozen.model[1].bias.requires_grad_(False)
    with pytest.raises(InputError, match=r"1 unknown to this model .*1.bias"):
        run(frozen, _settings(tmp_path / "r", steps=6))
    other = Toy()
    other.model[1] = nn.Linear(4, 2)
    with pytest.raises(InputError, match="with another shape"):
        run(other, _settings(tmp_path / "r", steps=6))
    (latest_checkpoint(tmp_path / "r") / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="unreadable checkpoint"):
        run(Toy(), _settings(tmp_path / "r", steps=6))


def test_gradient_accumulation_equals_the_big_batch(tmp_path):
    class Split(Toy):
        def batch(self, step, micro):  # micro-batch k of a fixed 8-row batch
            idx = np.random.default_rng([0, step]).choice(len(X), 8, replace=False)
            part = idx if self.rows == 8 else idx[micro * self.rows:(micro + 1) * self.rows]
            return X[part], Y[part]

    big, small = Split(rows=8, dropout=0.0, sgd=True), Split(rows=2, dropout=0.0, sgd=True)
    rb = run(big, _settings(tmp_path / "big", steps=5))
    rs = run(small, _settings(tmp_path / "small", steps=5, grad_accum=4))
    for k, v in _weights(big).items():
        assert torch.allclose(v, _weights(small)[k], atol=1e-6), k
    assert [r["loss"] for r in rs.rows if "loss" in r] == pytest.approx([r["loss"] for r in rb.rows if "loss" in r])


def test_schedule_and_clipping(tmp_path):
    r = run(Toy(lr=0.1), _settings(tmp_path / "s", steps=10, warmup_steps=2, decay="linear"))
    assert [x["lr"] for x in r.rows if "lr" in x] == pytest.approx(
        [0.05, 0.1, 0.1, 0.0875, 0.075, 0.0625, 0.05, 0.0375, 0.025, 0.0125])
    r = run(Toy(lr=0.1), _settings(tmp_path / "c", steps=10, decay="cosine"))
    lrs = [x["lr"] for x in r.rows if "lr" in x]
    assert lrs[0] == pytest.approx(0.1) and lrs[5] == pytest.approx(0.05) and lrs == sorted(lrs, reverse=True)
    # SGD with lr 1: the update is the (clipped) gradient, so its norm is at most the clip
    task = Toy(lr=1.0, sgd=True, dropout=0.0)
    w0 = torch.cat([p.detach().flatten() for p in task.model.parameters()])
    run(task, _settings(tmp_path / "clip", steps=1, max_grad_norm=0.01))
    w1 = torch.cat([p.detach().flatten() for p in task.model.parameters()])
    assert float((w1 - w0).norm()) == pytest.approx(0.01, rel=1e-3)
    # the learning rate is no part of a run's identity: a resumed run uses the new one
    run(Toy(lr=0.1), _settings(tmp_path / "r", steps=4))
    r = run(Toy(lr=0.02), _settings(tmp_path / "r", steps=6))
    assert [x["lr"] for x in r.rows] == pytest.approx([0.1] * 4 + [0.02] * 2)
    with pytest.raises(InputError, match="decay must be one of"):
        run(Toy(), _settings(tmp_path / "x", decay="step"))


def test_bfloat16_autocast_keeps_float32_master_weights_and_records_precision(tmp_path):
    prec = decide("bfloat16", "cpu", "training")
    task = Toy(dtype=torch.bfloat16)  # a model loaded in bf16: its trainable weights become float32 masters
    r = run(task, _settings(tmp_path / "b", steps=30, precision=prec, save_every=10,
                            plot=PlotSpec(title="toy", references=((1.0, "a yardstick"),), val_series=("mse",))))
    assert all(p.dtype == torch.float32 for p in task.model.parameters())
    assert task.seen_dtypes == {"bfloat16"}  # the forward pass ran in bf16
    losses = [x["loss"] for x in r.rows if "loss" in x]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])
    state = json.loads((latest_checkpoint(tmp_path / "b") / "state.json").read_text())
    assert state["precision"] == json.loads(json.dumps(prec.to_dict()))
    assert state["precision"]["dtype"] == "bfloat16" and state["precision"]["purpose"] == "training"
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["precision"] == state["precision"] and summary["finished"]
    assert summary["outputs"]["model"].endswith("model.pt") and summary["last_loss"] < summary["first_loss"]
    assert (tmp_path / "b" / "loss.png").stat().st_size > 1000
    # float32: no autocast at all
    t32 = Toy()
    run(t32, _settings(tmp_path / "f", steps=2))
    assert t32.seen_dtypes == {"float32"}


def test_a_nan_loss_stops_with_a_clear_error(tmp_path):
    task = Toy(lr=1e30, sgd=True, dropout=0.0)
    with pytest.raises(InputError, match="loss became (nan|inf) at step"):
        run(task, _settings(tmp_path / "n", steps=20))


def test_a_log_line_cut_by_a_crash_is_dropped(tmp_path):
    run(Toy(), _settings(tmp_path / "r", steps=4, save_every=2))
    with open(tmp_path / "r" / "log.jsonl", "a") as fh:
        fh.write('{"step": 5, "lo')
    assert [x["step"] for x in read_log(tmp_path / "r")] == [1, 2, 3, 4]


# -- the one atomic write ---------------------------------------------------------------------

def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path):
    from editlens.core.io import atomic_directory, atomic_write, torch_save, write_json, write_jsonl, write_text

    p = tmp_path / "f.json"
    write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}

    class Boom(Exception):
        pass

    def broken(fh):
        fh.write("partial")
        raise Boom

    with pytest.raises(Boom):
        atomic_write(p, broken)
    assert json.loads(p.read_text()) == {"a": 1}
    with pytest.raises(TypeError):
        write_json(p, {"a": object()})  # unserialisable: the old file stays
    assert json.loads(p.read_text()) == {"a": 1}
    write_jsonl(tmp_path / "r.jsonl", [{"x": 1}, {"x": 2}])
    assert (tmp_path / "r.jsonl").read_text() == '{"x": 1}\n{"x": 2}\n'
    torch_save({"w": torch.ones(2)}, tmp_path / "t.pt")
    assert torch.equal(torch.load(tmp_path / "t.pt", weights_only=True)["w"], torch.ones(2))
    write_text(tmp_path / "sub" / "x.txt", "héllo")
    assert (tmp_path / "sub" / "x.txt").read_text(encoding="utf-8") == "héllo"
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "sub" / "x.txt").stat().st_mode & 0o777 == 0o666 & ~umask

    d = tmp_path / "model"
    with atomic_directory(d) as tmp:
        (tmp / "w.bin").write_bytes(b"old")
    with pytest.raises(Boom):
        with atomic_directory(d) as tmp:
            (tmp / "w.bin").write_bytes(b"ne")
            raise Boom
    assert (d / "w.bin").read_bytes() == b"old"
    with atomic_directory(d) as tmp:
        (tmp / "w2.bin").write_bytes(b"new")
    assert sorted(x.name for x in d.iterdir()) == ["w2.bin"]
    assert not [x for x in tmp_path.rglob(".*") if x.name.endswith((".tmp", ".old"))]  # nothing left behind


def test_log_to_tensorboard_writes_every_steps_figures_and_a_missing_tracker_says_how_to_install(tmp_path):
    import importlib.util

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from editlens.errors import InputError
    from editlens.training.tracking import open_tracker

    res = run(Toy(), _settings(tmp_path / "tb", steps=4, eval_every=2, log_to="tensorboard"))
    assert res.finished
    acc = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "loss" in tags and "val/mse" in tags
    assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3, 4]
    logged = [e.value for e in acc.Scalars("loss")]
    assert logged == pytest.approx([r["loss"] for r in res.rows if "loss" in r], rel=1e-6)
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(InputError, match=r"pip install 'editlens\[wandb\]'"):
            open_tracker("wandb", tmp_path / "w")
    with pytest.raises(InputError, match="not a tracker"):
        open_tracker("mlflow", tmp_path / "m")
