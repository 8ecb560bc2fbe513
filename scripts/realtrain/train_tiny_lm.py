"""Train a tiny decoder-only transformer on CPU and log every step as JSON Lines.

This is a test-data generator for `stab`, not part of the package: it makes
training logs whose pathologies come from changing the TRAINING (a learning
rate that is too high, a garbage batch, a scheduler bug, a resume that drops
the optimizer state, fp16 overflow), never from editing the log afterwards.
It needs torch, which is deliberately not a dependency of `stabilitycli`:

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchvenv/bin/python scripts/realtrain/train_tiny_lm.py --out /tmp/run/run.jsonl

The language is synthetic and generated in-script from fixed seeds, so a run
is reproducible on CPU and has structure worth learning:
  * Markov text: an order-1 chain over the "word" tokens with a sparse,
    peaked transition matrix (learnable down to the chain's entropy);
  * copy tasks: a random segment, a separator, then the same segment again
    (learnable only by attending back: the induction-head pattern).
A few tokens are reserved and never appear in normal data; the `rare` bad
batch is made of them (the long-tail-token pathology).

Each step writes one line with `json.dumps` (so NaN / Infinity appear as the
bare tokens Python writes):
    {"step", "loss", "grad_norm", "lr", "tokens", "batch_id", "param_norm",
     "act_norm/<layer>"..., ["loss_scale", "skipped"] in fp16}
`grad_norm` is the PRE-clip global L2 norm (the return value of
`clip_grad_norm_`). With `--eval-every N` an extra, sparse line
{"step", "eval_loss"} follows every N-th step. A `manifest.json` beside the
log states the dtype, the seed and the full command line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# --- the synthetic language -------------------------------------------------

VOCAB = 48
SEP = 0  # separator of the copy task
RARE = (44, 45, 46, 47)  # reserved: never in normal data (the long-tail tokens)
WORDS = np.arange(1, 44)  # tokens the Markov chain emits
LANGUAGE_SEED = (
    20240601  # the language is the same for every run; --seed varies init and data order
)


def _transition_matrix() -> np.ndarray:
    """A sparse, peaked Markov chain: each word has a few likely successors."""
    rng = np.random.default_rng(LANGUAGE_SEED)
    probs = rng.dirichlet(np.full(WORDS.size, 0.08), size=WORDS.size)
    return probs / probs.sum(axis=1, keepdims=True)


TRANSITIONS = _transition_matrix()
CUMULATIVE = np.cumsum(TRANSITIONS, axis=1)


def _markov(rng: np.random.Generator, length: int) -> np.ndarray:
    state = int(rng.integers(WORDS.size))
    draws = rng.random(length)
    out = np.empty(length, dtype=np.int64)
    for i in range(length):  # short sequences (65 tokens): a loop is fine here
        state = min(int(np.searchsorted(CUMULATIVE[state], draws[i])), WORDS.size - 1)
        out[i] = WORDS[state]
    return out


def _copy_task(rng: np.random.Generator, length: int) -> np.ndarray:
    """segment SEP segment SEP segment ... cut to `length`."""
    seg = WORDS[rng.integers(WORDS.size, size=int(rng.integers(6, 17)))]
    unit = np.concatenate([seg, [SEP]])
    reps = length // unit.size + 1
    return np.tile(unit, reps)[:length]


def make_batch(stream_seed: int, batch_id: int, batch: int, seq: int) -> torch.Tensor:
    """Batch number `batch_id` of the data stream: deterministic, so a resumed or
    repeated batch is bit-identical to the first time it was served."""
    rng = np.random.default_rng([stream_seed, batch_id])
    rows = [
        _copy_task(rng, seq + 1) if rng.random() < 0.5 else _markov(rng, seq + 1)
        for _ in range(batch)
    ]
    return torch.from_numpy(np.stack(rows))


def bad_batch(kind: str, clean: torch.Tensor, batch_id: int) -> torch.Tensor:
    """A corrupted batch, as a broken shard or tokenizer would serve it."""
    rng = np.random.default_rng([999, batch_id])
    if kind == "rare":  # long-tail tokens the model has never seen as input nor as target
        return torch.from_numpy(rng.choice(np.array(RARE), size=tuple(clean.shape)))
    if kind == "random":  # uniform garbage over the whole vocabulary
        return torch.from_numpy(rng.integers(VOCAB, size=tuple(clean.shape)))
    if kind == "shuffled":  # right tokens, wrong order: targets no longer follow the inputs
        flat = clean.flatten()[torch.from_numpy(rng.permutation(clean.numel()))]
        return flat.view_as(clean)
    raise ValueError(kind)


# --- the model ---------------------------------------------------------------


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Embed(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq, d_model)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1]))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, seq: int, d_model: int, layers: int, heads: int):
        super().__init__()
        self.embed = Embed(vocab, seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def watch_activations(model: TinyLM, sink: dict[str, float]) -> None:
    """Forward hooks writing the RMS of each layer's output into `sink` (forward order).

    Names follow the forward order stab walks for Q1.3: embed, blocks.i.attn,
    blocks.i.mlp, ln_f, lm_head. RMS in fp32 of the layer's own output, so an
    fp16 inf stays inf.
    """
    named = [("embed", model.embed)]
    for i, block in enumerate(model.blocks):
        named += [(f"blocks.{i}.attn", block.attn), (f"blocks.{i}.mlp", block.mlp)]
    named += [("ln_f", model.ln_f), ("lm_head", model.lm_head)]
    for name, module in named:

        def hook(_module, _inputs, output, name=name):
            with torch.no_grad():
                sink[f"act_norm/{name}"] = float(output.detach().float().pow(2).mean().sqrt())

        module.register_forward_hook(hook)


# --- schedule and optimizer ---------------------------------------------------


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Linear warmup to --lr, then cosine to --min-lr-frac * --lr at --steps; plus the
    injected jump."""
    if step <= args.warmup:
        lr = args.lr * step / args.warmup
    else:
        progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
        lr = args.lr * (
            args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress))
        )
    if (
        args.lr_jump_at
        and step >= args.lr_jump_at
        and (not args.lr_jump_len or step < args.lr_jump_at + args.lr_jump_len)
    ):
        lr *= args.lr_jump_factor  # the scheduler bug: the schedule is multiplied from this step on
    return lr


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy, computed in fp32 whatever the model's dtype."""
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))


def make_optimizer(model: nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    """AdamW; weight decay on matrices (and embeddings) only, as GPT-style recipes do."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, 0.95),
        eps=args.adam_eps,
    )


def param_norm(model: nn.Module) -> float:
    with torch.no_grad():
        return float(torch.sqrt(sum(p.detach().float().pow(2).sum() for p in model.parameters())))


# --- fp16 with a dynamic loss scale (what torch.cuda.amp.GradScaler does, by hand) ---


class Fp16Trainer:
    """fp16 weights and activations, fp32 master weights, and a loss scaler.

    CPU autocast has no fp16, so the model is kept twice: an fp32 master copy
    the optimizer updates, and an fp16 copy that runs forward and backward.
    Each step: copy master -> fp16, forward, backward of loss * scale, copy
    the fp16 grads to the master divided by the scale. A non-finite grad is
    an overflow: the step is skipped and the scale halved (dynamic) or kept
    (static, the misconfiguration). After `growth_interval` clean steps the
    dynamic scale doubles.
    """

    def __init__(self, master: TinyLM, half: TinyLM, args: argparse.Namespace):
        self.master, self.half, self.args = master, half, args
        self.scale = float(args.loss_scale_init)
        self.clean_steps = 0

    def forward_backward(self, idx: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for p16, p32 in zip(self.half.parameters(), self.master.parameters(), strict=True):
                p16.copy_(p32)
        self.half.zero_grad(set_to_none=True)
        logits = self.half(idx[:, :-1])
        loss = lm_loss(logits, idx[:, 1:])
        # the scaled loss goes back through the fp16 graph: this is where grads overflow
        (loss * self.scale).backward()
        for p16, p32 in zip(self.half.parameters(), self.master.parameters(), strict=True):
            p32.grad = p16.grad.float() / self.scale
        return loss

    def after_grads(self, grads_finite: bool) -> bool:
        """Update the scale; return whether the optimizer may step."""
        if not grads_finite:
            if self.args.loss_scale_mode == "dynamic":
                self.scale = max(self.scale / 2, 1e-4)
            self.clean_steps = 0
            return False
        self.clean_steps += 1
        if (
            self.args.loss_scale_mode == "dynamic"
            and self.clean_steps % self.args.loss_scale_growth == 0
        ):
            self.scale *= 2
        return True


# --- the loop -----------------------------------------------------------------


def evaluate(model: TinyLM, args: argparse.Namespace, autocast) -> float:
    """Mean loss over a fixed held-out set (its own data stream)."""
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(args.eval_batches):
            idx = make_batch(args.seed + 10_000, i, args.batch, args.seq)
            with autocast():
                logits = model(idx[:, :-1])
            total += float(lm_loss(logits, idx[:, 1:]))
    model.train()
    return total / args.eval_batches


def batch_for(step: int, args: argparse.Namespace) -> tuple[int, torch.Tensor]:
    """(batch_id, tokens) the data loader serves at `step`, with the injected faults."""
    batch_id = step  # one batch per step: the data cursor is the step
    if (
        args.repeat_batch_at
        and args.repeat_batch_at <= step < args.repeat_batch_at + args.repeat_batch_len
    ):
        batch_id = args.repeat_batch_at - 1  # a stuck loader serves the previous batch again
    idx = make_batch(args.seed, batch_id, args.batch, args.seq)
    if args.bad_batch_at and args.bad_batch_at <= step < args.bad_batch_at + args.bad_batch_len:
        idx = bad_batch(args.bad_batch_kind, idx, batch_id)
    return batch_id, idx


def _sig(value, digits: int = 6):
    """A float cut to `digits` significant digits (NaN and +-Inf unchanged); ints as they are."""
    return float(f"{value:.{digits}g}") if isinstance(value, float) else value


class Run:
    """The model, its optimizer and (for fp16) the scaler: what a checkpoint holds."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        torch.manual_seed(args.seed)
        self.model = TinyLM(VOCAB, args.seq, args.d_model, args.layers, args.heads)
        self.acts: dict[str, float] = {}
        self.fp16 = None
        watched = self.model
        if args.dtype == "fp16":
            half = TinyLM(VOCAB, args.seq, args.d_model, args.layers, args.heads).half()
            self.fp16 = Fp16Trainer(self.model, half, args)
            watched = half
        if args.act_norms:
            watch_activations(watched, self.acts)
        self.optimizer = make_optimizer(self.model, args)

    def autocast(self):
        # CPU autocast runs matmuls in bf16 and keeps reductions in fp32
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.args.dtype == "bf16")

    def step(self, step: int, idx: torch.Tensor, lr: float) -> tuple[float, float, bool]:
        """One optimizer step: (loss, pre-clip grad norm, whether the update was applied)."""
        args = self.args
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if args.weight_decay_from and step >= args.weight_decay_from:
            # the config bug: a resumed job picked up another weight decay from this step on
            self.optimizer.param_groups[0]["weight_decay"] = args.weight_decay_late
        self.acts.clear()
        self.optimizer.zero_grad(set_to_none=True)
        if self.fp16 is not None:
            loss = self.fp16.forward_backward(idx)
        else:
            with self.autocast():
                logits = self.model(idx[:, :-1])
            loss = lm_loss(logits, idx[:, 1:])
            loss.backward()
        # clip_grad_norm_ returns the norm BEFORE clipping; an infinite max_norm only measures
        grad_norm = float(
            torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), float("inf") if args.no_clip else args.clip
            )
        )
        stepped = self.fp16.after_grads(math.isfinite(grad_norm)) if self.fp16 is not None else True
        if stepped:
            self.optimizer.step()
        return float(loss.detach()), grad_norm, stepped

    def save(self, path: Path, step: int) -> None:
        torch.save(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "step": step,
                "scale": self.fp16.scale if self.fp16 else None,
            },
            path,
        )

    def load(self, path: Path, keep_optimizer: bool) -> None:
        state = torch.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer = make_optimizer(
            self.model, self.args
        )  # a fresh AdamW: empty moments, step count 0
        if keep_optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
        if self.fp16 is not None:
            self.fp16.scale = state["scale"]


def _sig(value, digits: int = 6):
    """A float cut to `digits` significant digits (NaN and +-Inf unchanged); ints as they are."""
    return float(f"{value:.{digits}g}") if isinstance(value, float) else value


def train(args: argparse.Namespace, ckpt_dir: Path) -> None:
    torch.set_num_threads(1)  # 2 shared cores: stay small and reproducible
    run = Run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    (out.parent / "manifest.json").write_text(
        json.dumps(
            {
                "dtype": args.dtype,
                "seed": args.seed,
                "torch": torch.__version__,
                "command": "python " + " ".join(sys.argv),
                "vocab_size": VOCAB,
            },
            indent=1,
        )
        + "\n"
    )

    resumed = False
    nonfinite_run = 0
    step = 1
    with out.open("w") as log:
        while step <= args.steps:
            batch_id, idx = batch_for(step, args)
            lr = lr_at(step, args)
            loss, grad_norm, stepped = run.step(step, idx, lr)
            row = {
                "step": step,
                "loss": loss,
                "grad_norm": grad_norm,
                "lr": lr,
                "tokens": step * args.batch * args.seq,
                "batch_id": batch_id,
                "param_norm": param_norm(run.model),
            }
            if run.fp16 is not None:
                row["loss_scale"] = (
                    run.fp16.scale
                )  # after the update, as GradScaler.get_scale() reports it
                row["skipped"] = 0 if stepped else 1
            row.update(run.acts)
            # the loss scale is a power of two: written exactly, as scalers report it
            log.write(
                json.dumps({k: v if k == "loss_scale" else _sig(v) for k, v in row.items()}) + "\n"
            )
            if args.eval_every and step % args.eval_every == 0:
                eval_loss = evaluate(run.fp16.half if run.fp16 else run.model, args, run.autocast)
                log.write(json.dumps({"step": step, "eval_loss": _sig(eval_loss)}) + "\n")
            log.flush()
            if args.ckpt_every and step % args.ckpt_every == 0:
                run.save(ckpt_dir / f"step{step}.pt", step)

            nonfinite_run = 0 if math.isfinite(loss) else nonfinite_run + 1
            if args.stop_after_nonfinite and nonfinite_run >= args.stop_after_nonfinite:
                print(
                    f"stopping: {nonfinite_run} non-finite losses in a row at step {step}",
                    file=sys.stderr,
                )
                break
            if args.resume_at and step == args.resume_at and not resumed:
                # the simulated crash: the process "dies" after logging this step, and a new
                # one resumes from an earlier checkpoint, appending to the same log
                resumed = True
                run.load(
                    ckpt_dir / f"step{args.from_checkpoint}.pt",
                    keep_optimizer=not args.drop_optimizer_state,
                )
                print(
                    f"resumed at step {step} from checkpoint {args.from_checkpoint}"
                    f"{' WITHOUT optimizer state' if args.drop_optimizer_state else ''}",
                    file=sys.stderr,
                )
                step = args.from_checkpoint + 1
                continue
            step += 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSONL log to write (manifest.json goes beside it)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument(
        "--weight-decay-from", type=int, default=0, help="switch weight decay at this step..."
    )
    p.add_argument("--weight-decay-late", type=float, default=0.0, help="...to this value")
    p.add_argument(
        "--adam-eps",
        type=float,
        default=1e-8,
        help="AdamW eps; 0 is the bug: a parameter whose grad is exactly 0 gets 0/0 = NaN",
    )
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--no-clip", action="store_true", help="measure the grad norm but do not clip")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--loss-scale-init", type=float, default=2.0**16)
    p.add_argument(
        "--loss-scale-growth", type=int, default=200, help="clean steps before the scale doubles"
    )
    p.add_argument("--loss-scale-mode", choices=("dynamic", "static"), default="dynamic")
    p.add_argument("--act-norms", action="store_true", help="log act_norm/<layer> every step")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--bad-batch-at", type=int, default=0)
    p.add_argument("--bad-batch-len", type=int, default=1)
    p.add_argument("--bad-batch-kind", choices=("rare", "random", "shuffled"), default="rare")
    p.add_argument("--repeat-batch-at", type=int, default=0)
    p.add_argument("--repeat-batch-len", type=int, default=1)
    p.add_argument("--lr-jump-at", type=int, default=0)
    p.add_argument("--lr-jump-factor", type=float, default=10.0)
    p.add_argument(
        "--lr-jump-len", type=int, default=0, help="steps the jump lasts (0: to the end)"
    )
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument(
        "--ckpt-dir", default="", help="keep checkpoints here (default: a temporary folder)"
    )
    p.add_argument("--resume-at", type=int, default=0, help="crash after logging this step...")
    p.add_argument(
        "--from-checkpoint", type=int, default=0, help="...and resume from this step's checkpoint"
    )
    p.add_argument("--drop-optimizer-state", action="store_true", help="resume with a fresh AdamW")
    p.add_argument("--stop-after-nonfinite", type=int, default=50)
    args = p.parse_args(argv)
    if args.resume_at and (
        args.from_checkpoint <= 0
        or args.from_checkpoint % args.ckpt_every
        or args.from_checkpoint >= args.resume_at
    ):
        p.error(
            "--from-checkpoint must be a checkpointed step (a multiple of --ckpt-every) before "
            "--resume-at"
        )
    return args


def main() -> None:
    args = parse_args()
    if args.ckpt_dir:
        train(args, Path(args.ckpt_dir))
        return
    with tempfile.TemporaryDirectory(prefix="tinylm-ckpt-") as tmp:
        train(args, Path(tmp))


if __name__ == "__main__":
    main()
