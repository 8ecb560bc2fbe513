"""Regenerate fixtures/lightning/versions with the real Lightning CSVLogger.

    pip install torch lightning   # not test dependencies: the tests read the output
    python tests/ingest/make_lightning_fixtures.py

Four `trainer.fit` calls into one `lightning_logs/`, as a user who reruns a
script leaves them:

* version_0: a 3-epoch run (8 steps an epoch) killed by an exception at step 13;
* version_1: the same run resumed with `ckpt_path=` version_0's epoch-0
  checkpoint (step 8): it replays steps 8-13 and goes on to step 23;
* version_2, version_3: new one-epoch runs from scratch (no checkpoint).

The checkpoints are deleted afterwards (binary, and no reader looks at them).
"""

from __future__ import annotations

import logging
import shutil
import sys
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "lightning" / "versions"


class Regression(L.LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, _index):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Killed(L.Callback):
    """The job dies mid-epoch: what a preempted or OOM-killed run leaves behind."""

    def on_train_batch_end(self, trainer, *_args):
        if trainer.global_step == 13:
            raise RuntimeError("killed")


def data():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    dataset = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    return torch.utils.data.DataLoader(dataset, batch_size=8)


def fit(epochs: int, ckpt: str | None = None, killed: bool = False) -> Path:
    L.seed_everything(0, verbose=False)
    logger = CSVLogger(str(OUT), name="lightning_logs")
    callbacks = [ModelCheckpoint(save_top_k=-1), LearningRateMonitor()]
    trainer = L.Trainer(
        max_epochs=epochs,
        logger=logger,
        log_every_n_steps=2,
        callbacks=callbacks + ([Killed()] if killed else []),
        precision="bf16-mixed",
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(Regression(), data(), ckpt_path=ckpt)
    except RuntimeError:
        if not killed:
            raise
    return Path(logger.log_dir)


def main() -> int:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    shutil.rmtree(OUT / "lightning_logs", ignore_errors=True)
    first = fit(3, killed=True)
    fit(3, ckpt=str(next((first / "checkpoints").glob("epoch=0-*.ckpt"))))
    fit(1)
    fit(1)
    for folder in (OUT / "lightning_logs").glob("version_*/checkpoints"):
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
