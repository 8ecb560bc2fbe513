"""Write fixtures/textlogs/real/: stdout+stderr of real trainers, as a job's .out file gets it.

Not a test dependency and not run in CI: the trainers live in a venv of their own,

    python3 -m venv /tmp/trainers
    /tmp/trainers/bin/python -m pip install torch lightning transformers accelerate keras
    /tmp/trainers/bin/python scripts/make_real_trainer_stdout.py

Each run is a child process whose stdout and stderr both go to one file, as
`#SBATCH --output` or `cmd > out.log 2>&1` leave them (tqdm's \\r redraws and
the lines printed between them, interleaved in the order they were written),
with PYTHONUNBUFFERED=1 (`python -u`, as job scripts set it) except in the
`*_buffered` runs, which show what a block-buffered stdout does to that order.
Every run has its weights set to NaN by a callback at a fixed step, so the loss
is NaN from the next step on, and the file is then cut in the middle of its
last loss record, as a job killed mid-write leaves it. Beside each log the
trainer's own record of the numbers is kept for the tests to compare with:
Trainer.state.log_history (HF), CSVLogger's metrics.csv (Lightning), Keras's
CSVLogger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "textlogs" / "real"
NAN_AT = {"hf": 30, "lightning": 45, "keras": 8}  # weights NaN after this step (epoch)


def hf_child(out: Path, nan_filter: bool = False) -> None:
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=32)
    model = GPT2LMHeadModel(config)

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n: int, seed: int):
            g = torch.Generator().manual_seed(seed)
            self.ids = torch.randint(0, 128, (n, 32), generator=g)

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    class PoisonWeights(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == NAN_AT["hf"]:
                with torch.no_grad():
                    for p in model.parameters():
                        p.fill_(float("nan"))

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            max_steps=40,
            per_device_train_batch_size=8,
            per_device_eval_batch_size=8,
            learning_rate=1e-3,
            logging_steps=1,
            eval_strategy="steps",
            eval_steps=15,
            save_strategy="no",
            report_to="none",
            seed=0,
            use_cpu=True,
            # the default (True) logs the mean of the finite losses so far in place of a NaN one
            logging_nan_inf_filter=nan_filter,
            disable_tqdm=False,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Tokens(320, 1),
            eval_dataset=Tokens(16, 2),
            callbacks=[PoisonWeights()],
        )
        trainer.train()
    (out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")


def lightning_child(out: Path) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import TQDMProgressBar
    from lightning.pytorch.loggers import CSVLogger

    L.seed_everything(0)

    class Regression(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
            )

        def training_step(self, batch, _index):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def on_train_batch_end(self, _outputs, _batch, _index):
            if self.trainer.global_step == NAN_AT["lightning"]:
                with torch.no_grad():
                    for p in self.parameters():
                        p.fill_(float("nan"))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(240, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(
            max_epochs=2,
            accelerator="cpu",
            log_every_n_steps=1,
            enable_progress_bar=True,
            enable_checkpointing=False,
            # the bar Lightning uses without `rich` installed (with it, RichProgressBar, which
            # off a terminal prints only the final state of each epoch)
            callbacks=[TQDMProgressBar()],
            logger=CSVLogger(tmp, name="", version=0),
            default_root_dir=tmp,
        )
        trainer.fit(Regression(), loader)
        (out / "metrics.csv").write_text((Path(tmp) / "version_0" / "metrics.csv").read_text())


def keras_child(out: Path, verbose: int) -> None:
    os.environ["KERAS_BACKEND"] = "torch"
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = x.sum(1, keepdims=True)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", metrics=["mae"])

    class PoisonWeights(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == NAN_AT["keras"]:
                for w in self.model.weights:
                    w.assign(np.full(w.shape, np.nan, dtype="float32"))

    csv = out / f"keras_verbose{verbose}.csv"
    model.fit(
        x,
        y,
        epochs=12,
        batch_size=32,
        validation_split=0.125,
        verbose=verbose,
        callbacks=[PoisonWeights(), keras.callbacks.CSVLogger(str(csv))],
    )


def cut_last_record(data: bytes, marker: bytes, before: bytes | None = None) -> bytes:
    """Everything before the middle of the last line holding `marker` (before `before`, when
    given): a job killed mid-write."""
    at = data.rindex(marker, 0, data.index(before) if before else len(data))
    start = max(data.rfind(b"\n", 0, at), data.rfind(b"\r", 0, at)) + 1
    end = min(x for x in (data.find(b"\n", at), data.find(b"\r", at), len(data)) if x >= 0)
    # halfway through the line, and never before the loss value begins
    return data[: max(start + (end - start) // 2, at + len(marker) + 2)]


RUNS = {
    # name: (child args, unbuffered, marker of a loss record, cut before this)
    "hf_trainer.log": (["hf"], True, b"{'loss'", None),
    "hf_trainer_buffered.log": (["hf"], False, b"{'loss'", None),
    # the Trainer's default logging_nan_inf_filter=True: the loss logged stays finite
    "hf_trainer_nan_filter.log": (["hf", "nan_filter"], True, b"{'loss'", None),
    # cut in the training loop, not in the bar's last redraw after `fit` returned
    "lightning.log": (["lightning"], True, b"train_loss=", b"`Trainer.fit` stopped"),
    "keras_verbose1.log": (["keras", "1"], True, b" - loss: ", None),
    "keras_verbose2.log": (["keras", "2"], True, b" - loss: ", None),
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, out = sys.argv[2], Path(sys.argv[3])
        if kind == "hf":
            hf_child(out, nan_filter=sys.argv[4:] == ["nan_filter"])
        elif kind == "lightning":
            lightning_child(out)
        else:
            keras_child(out, int(sys.argv[4]))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[1:])
    for name, (child, unbuffered, marker, before) in RUNS.items():
        if only and name not in only:
            continue
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
        env.update(COLUMNS="120", TOKENIZERS_PARALLELISM="false")
        if unbuffered:
            env["PYTHONUNBUFFERED"] = "1"
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, __file__, "--child", child[0], tmp, *child[1:]]
            done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if done.returncode:
                sys.stdout.buffer.write(done.stdout[-4000:])
                raise SystemExit(f"{name}: exit {done.returncode}")
            (OUT / name).write_bytes(cut_last_record(done.stdout, marker, before))
            for side in Path(tmp).iterdir():
                stem = name.removesuffix(".log")
                target = OUT / f"{stem}.{side.name.split('.')[-1]}"
                if side.suffix == ".json":
                    target = OUT / f"{stem}.log_history.json"
                elif side.suffix == ".csv":
                    target = OUT / f"{stem}.metrics.csv"
                target.write_bytes(side.read_bytes())
        print(OUT / name, len((OUT / name).read_bytes()), "bytes")


if __name__ == "__main__":
    main()
