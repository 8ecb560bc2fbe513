"""Write fixtures/textlogs/: one stdout sample per trainer, in that trainer's own format.

These trainers do not run on a CPU-only test box (GPU kernels, Apple silicon,
multi-GB models), so each line is produced with the format string the
trainer's source prints it with (quoted in each writer below and checked
against the upstream sources for issue 14;
`stabilitycli/ingest/text/_kvfamilies.py` cites them too), around it the chatter
that comes with it (banners, bars, eval lines), from one seeded loss curve.
Every sample has a NaN record and ends in a record cut mid-write (no final
newline), as a log of a job that died looks. The trainers that do run on CPU
(Hugging Face Trainer, Lightning, Keras 3) wrote their own samples too:
fixtures/textlogs/real/, by scripts/make_real_trainer_stdout.py.

    .venv/bin/python tests/ingest/make_textlog_fixtures.py
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "fixtures" / "textlogs"
STEPS = 60
NAN_FROM = 50  # the loss is NaN from this step on (an fp16 overflow that never recovers)
ESC = "\033"


def curve(seed: int = 14) -> list[float]:
    rng = random.Random(seed)
    return [
        math.nan if s >= NAN_FROM else 2.0 + 8.0 * math.exp(-s / 15) + rng.uniform(-0.05, 0.05)
        for s in range(STEPS + 1)
    ]


def cut(line: str, at: str) -> str:
    """The line up to (and without) `at`: where the dying job stopped writing."""
    return line[: line.rindex(at)]


def nanogpt(loss: list[float]) -> str:
    # train.py: print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms, mfu {m*100:.2f}%")
    #           print(f"step {iter_num}: train loss {l['train']:.4f}, val loss {l['val']:.4f}")
    out = ["Overriding config with config/train_gpt2.py:", "tokens per iteration will be: 491,520"]
    for s in range(0, STEPS + 1):
        if s % 20 == 0:
            out.append(f"step {s}: train loss {loss[s]:.4f}, val loss {loss[s] + 0.02:.4f}")
            out.append("saving checkpoint to out")
        mfu = -100.0 if s < 5 else 31.2
        out.append(
            f"iter {s}: loss {loss[s]:.4f}, time {330.12 + (s % 3) * 0.5:.2f}ms, mfu {mfu:.2f}%"
        )
    out[-1] = cut(out[-1], ", time")
    return "\n".join(out)


def modded_nanogpt(loss: list[float]) -> str:
    # train_gpt.py: print0(f"step:{step}/{train_steps} train_loss:{train_loss.item():.4f}
    #   train_time:{training_time_ms:.0f}ms step_avg:{training_time_ms/(timed_steps-1):.2f}ms")
    # and f"step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:...ms step_avg:...ms"
    out = [
        "import os",
        "import sys",
        "=" * 100,
        "Running pytorch 2.4.1+cu121 compiled for CUDA 12.1",
    ]
    out += [
        "nvidia-smi:",
        "| N/A   34C    P0   154W /  700W |  20146MiB /  81559MiB |  34%  Default |",
    ]
    for s in range(0, STEPS + 1):
        time_ms = 87786 + 1719 * s
        avg = "nan" if s < 10 else f"{(time_ms - 87786) / (s - 9):.2f}"
        if s % 25 == 0:
            out.append(
                f"step:{s}/{STEPS} val_loss:{loss[s] + 0.02:.4f} train_time:{time_ms:.0f}ms "
                f"step_avg:{avg}ms"
            )
        if s:
            out.append(
                f"step:{s}/{STEPS} train_loss:{loss[s]:.4f} train_time:{time_ms:.0f}ms "
                f"step_avg:{avg}ms"
            )
    out[-1] = cut(out[-1], " step_avg")
    return "\n".join(out)


def torchtitan(loss: list[float]) -> str:
    # torchtitan train.py (logger format "[titan] %(asctime)s - %(name)s - %(levelname)s - "):
    # f"{color.red}step: {step:2}  {color.green}loss: {loss:7.4f}  {color.orange}grad_norm:
    # {grad_norm:7.4f}  {color.turquoise}memory: {gib:5.2f}GiB({pct:.2f}%)  {color.blue}tps:
    # {round(tps):,}  {color.cyan}tflops: {tflops:,.2f}  {color.magenta}mfu: {mfu:.2f}%{reset}"
    red, green, orange, turq = (
        f"{ESC}[31m",
        f"{ESC}[32m",
        f"{ESC}[38;2;180;60;0m",  # torchtitan tools/utils.py Color.orange
        f"{ESC}[38;2;54;234;195m",
    )
    blue, cyan, magenta, reset = f"{ESC}[34m", f"{ESC}[36m", f"{ESC}[35m", f"{ESC}[39m"
    out = [
        "[rank0]:[titan] 2025-01-10 12:00:00,001 - root - INFO - Starting job: Llama 3 8B training"
    ]
    for s in range(1, STEPS + 1):
        grad = math.nan if math.isnan(loss[s]) else 1.5 + 0.01 * s
        out.append(
            f"[rank0]:[titan] 2025-01-10 12:{s // 60:02d}:{s % 60:02d},123 - root - INFO - "
            f"{red}step: {s:2}  {green}loss: {loss[s]:7.4f}  {orange}grad_norm: {grad:7.4f}  "
            f"{turq}memory: {61.32:5.2f}GiB({64.56:.2f}%)  {blue}tps: {round(7023.4 + s):,}  "
            f"{cyan}tflops: {1234.56:,.2f}  {magenta}mfu: {38.51:.2f}%{reset}"
        )
    out[-1] = cut(out[-1], "  " + f"{turq}memory")
    return "\n".join(out)


def mlx_lm(loss: list[float]) -> str:
    # mlx_lm/tuner/trainer.py: f"Iter {it}: Train loss {train_loss:.3f}, Learning Rate
    # {learning_rate:.3e}, It/sec {it_sec:.3f}, Tokens/sec {tokens_sec:.3f}, Trained Tokens
    # {trained_tokens}, Peak mem {peak_mem:.3f} GB" and f"Iter {it}: Val loss {val_loss:.3f},
    # Val took {val_time:.3f}s"
    out = [
        "Loading pretrained model",
        "Trainable parameters: 0.047% (3.408M/7241.732M)",
        "Starting training..., iters: 60",
    ]
    for s in range(1, STEPS + 1):
        if s == 1 or s % 20 == 0:
            out.append(f"Iter {s}: Val loss {loss[s] + 0.02:.3f}, Val took {12.345:.3f}s")
        out.append(
            f"Iter {s}: Train loss {loss[s]:.3f}, Learning Rate {1e-5:.3e}, It/sec "
            f"{0.512:.3f}, Tokens/sec {512.25:.3f}, Trained Tokens {1024 * s}, "
            f"Peak mem {5.123:.3f} GB"
        )
    out[-1] = cut(out[-1], ", Learning")
    return "\n".join(out)


def litgpt(loss: list[float]) -> str:
    # litgpt/pretrain.py: f"Epoch {epoch+1} | iter {iter} step {step} | loss train: {loss:.3f},"
    # f" val: {val_loss} | iter time: {iter_time * 1000:.2f} ms{' (step)' if not accumulating}"
    # f" remaining time: {timedelta(seconds=int(remaining))!s}"  (val_loss "n/a" before an eval;
    # the eval runs after the step's line, so its value shows from the next line on).
    # validate() prints "Validating ..." (also once at the start, a sanity check), then
    # f"iter {iter_num}: val loss {val_loss:.4f}, val time: {td * 1000:.2f} ms"
    out = ["Seed set to 42", "Validating ...", "Measured TFLOPs: 42.30"]
    for s in range(1, STEPS + 1):
        val = "n/a" if s <= 20 else f"{loss[20] + 0.02:.3f}"
        left = f"0:{(STEPS - s) // 60:02d}:{(STEPS - s) % 60:02d}"
        out.append(
            f"Epoch 1 | iter {s} step {s} | loss train: {loss[s]:.3f}, val: {val} | "
            f"iter time: {123.45:.2f} ms (step) remaining time: {left}"
        )
        if s == 20:
            out.append("Validating ...")
            out.append(f"iter {s}: val loss {loss[20] + 0.02:.4f}, val time: {2345.67:.2f} ms")
    out[-1] = cut(out[-1], " | iter time")
    return "\n".join(out)


def keras(loss: list[float]) -> str:
    # keras Progbar, not a terminal: "Epoch {e}/{E}" then at the end of the epoch
    # "{n}/{n} [==============================] - {t}s {ms}ms/step - loss: {v:.4f} - ..."
    # (a value under 1e-3 in "{v:.4e}"); pasted from a terminal, the bar is redrawn with \b
    epochs = 12
    out = []
    for e in range(1, epochs + 1):
        value = loss[min(5 * e, STEPS)]
        out.append(f"Epoch {e}/{epochs}")
        bar = "=" * 30
        final = (
            f"1875/1875 [{bar}] - 5s 2ms/step - loss: {value:.4f} - accuracy: 0.9248 - "
            f"val_loss: {value + 0.01:.4f} - val_accuracy: 0.9590"
        )
        if e == 2:  # a terminal redraw pasted as is
            final = (
                "  32/1875 [..............................] - ETA: 5s - loss: 9.1234"
                + "\b" * 70
                + final
            )
        out.append(final)
    out[-1] = cut(out[-1], " - val_loss")
    return "\n".join(out)


def nemo(loss: list[float]) -> str:
    # PyTorch Lightning's TQDM bar (NeMo megatron_gpt_pretraining): postfix set with
    # tqdm.set_postfix, numbers in tqdm's format_num ('{:.3g}' when shorter), redrawn with \r
    def fmt(v: float) -> str:
        short = f"{v:.3g}".replace("+0", "+").replace("-0", "-")
        return short if len(short) < len(str(v)) else str(v)

    out = ["[NeMo I 2024-05-01 10:00:00 megatron_gpt_pretraining:37] Hydra config: ..."]
    bar = []
    for s in range(1, STEPS + 1):
        pct = 100 * s // STEPS
        bar.append(
            f"Epoch 0: : {pct:3d}%|####      | {s}/{STEPS} [00:{s:02d}<00:10, "
            f"reduced_train_loss={fmt(loss[s])}, global_step={fmt(float(s - 1))}, "
            f"consumed_samples={fmt(float(16 * s))}, train_step_timing in s={fmt(0.521)}]"
        )
        if s % 20 == 0:  # every 20 steps the bar line ends (validation prints below it)
            out.append("\r".join(bar))
            out.append("Validation: 0it [00:00, ?it/s]")
            bar = []
    if bar:
        out.append("\r".join(bar))
    out.pop()  # the job died in the last bar redraw, before its validation
    out[-1] = cut(out[-1], ", train_step_timing")
    return "\n".join(out)


def fairseq_json(loss: list[float]) -> str:
    # fairseq JsonProgressBar: logger.info(json.dumps(stats)); numbers through format_stat ("{:g}")
    stamp = "2021-03-01 10:00:00 | INFO | {tag} | "
    out = ["2021-03-01 09:59:00 | INFO | fairseq_cli.train | task: TranslationTask"]
    for s in range(1, STEPS + 1):
        stats = {
            "epoch": 1,
            "update": round(s / STEPS, 3),
            "loss": f"{loss[s]:g}",
            "ppl": f"{math.exp(min(loss[s], 50)):g}",
            "wps": "12345.6",
            "ups": "1.23",
            "num_updates": str(s),
            "lr": "5e-05",
            "gnorm": f"{1.2 + 0.01 * s:g}",
            "loss_scale": "128",
            "train_wall": "36",
            "wall": str(81 + s),
        }
        out.append(stamp.format(tag="train_inner") + json.dumps(stats))
        if s % 20 == 0:
            out.append(
                stamp.format(tag="valid")
                + json.dumps(
                    {"epoch": 1, "valid_loss": f"{loss[s] + 0.02:g}", "valid_num_updates": str(s)}
                )
            )
    out.append(
        stamp.format(tag="train")
        + json.dumps({"epoch": 1, "train_loss": "4.56", "train_num_updates": str(STEPS)})
    )
    out.append(stamp.format(tag="train_inner") + json.dumps({"epoch": 2, "loss": "nan"})[:20])
    return "\n".join(out)


def fairseq_simple(loss: list[float]) -> str:
    # fairseq SimpleProgressBar: f"{prefix}:  {i:5d} / {size:d} {postfix}", postfix "k=v, ..."
    out = []
    for s in range(1, STEPS + 1):
        out.append(
            f"2021-03-01 10:00:00 | INFO | train_inner | epoch 001:  {s:5d} / {STEPS} "
            f"loss={loss[s]:g}, ppl={math.exp(min(loss[s], 50)):g}, wps=12345.6, "
            f"ups=1.23, num_updates={s}, lr=5e-05, gnorm={1.2 + 0.01 * s:g}, "
            f"loss_scale=128, train_wall=36, wall={81 + s}"
        )
    out[-1] = cut(out[-1], ", num_updates")
    return "\n".join(out)


def hf_stdout(loss: list[float]) -> str:
    # transformers ProgressCallback.on_log: self.training_bar.write(str(logs)) between tqdm
    # redraws ("\r 14%|...| 378/2724 [13:58:09<86:18:35, 132.44s/it]")
    out = []
    bar = []
    for s in range(1, STEPS + 1):
        bar.append(f" {100 * s // STEPS:2d}%|#         | {s}/{STEPS} [00:{s:02d}<00:10,  1.02s/it]")
        if s % 5 == 0:
            out.append("\r".join(bar))
            bar = []
            logs = {
                "loss": round(loss[s], 4),
                "grad_norm": 1.5 + 0.01 * s,
                "learning_rate": 2e-5 * (1 - s / STEPS),
                "epoch": round(s / STEPS, 2),
            }
            out.append(str(logs))
            if s % 20 == 0:
                out.append(
                    str(
                        {
                            "eval_loss": round(loss[s] + 0.02, 4),
                            "eval_runtime": 1.2,
                            "epoch": round(s / STEPS, 2),
                        }
                    )
                )
    out.append(
        str(
            {
                "train_runtime": 61.0,
                "train_samples_per_second": 7.8,
                "train_steps_per_second": 0.98,
                "train_loss": 4.2,
                "epoch": 1.0,
            }
        )
    )
    out.append(str({"loss": 1.0, "grad_norm": 2.0})[:12])
    return "\n".join(out)


def gptneox(loss: list[float]) -> str:
    # megatron/training.py (GPT-NeoX) training_log: " samples/sec: ... | iteration {it:8d}/{T:8d} |
    # elapsed time per iteration (ms): ... | learning rate: {lr:.3E} | approx flops per GPU:
    # {flops}TFLOPS | lm_loss: {loss:.6E} | loss scale: ... | number of skipped iterations: ... |"
    out = []
    for s in range(1, STEPS + 1):
        out.append(
            f" samples/sec: 2.721 | iteration {s:8d}/{STEPS:8d} | elapsed time per "
            f"iteration (ms): 11761.2 | learning rate: {2.4e-9 * s:.3E} | approx flops per "
            f"GPU: 9.1TFLOPS | lm_loss: {loss[s]:.6E} | loss scale: 4096.0 | number of "
            "skipped iterations:   0 | number of nan iterations:   0 |"
        )
        out.append("time (ms) | forward: 1897.36 | backward: 8367.41 | optimizer: 1450.71")
    out[-1] = out[-2][: out[-2].index("| approx")]
    out.pop(-2)
    return "\n".join(out)


def ms_swift(loss: list[float]) -> str:
    # ms-swift `megatron sft`: Megatron's training_log line with its own `elapsed time` and
    # `remaining time` fields in days/hours/minutes (as quoted in issue 14)
    out = []
    for s in range(1, STEPS + 1):
        out.append(
            f" [2025-05-01 10:00:00] iteration {s:8d}/{STEPS:8d} | consumed samples: "
            f"{16 * s:12d} | elapsed time per iteration (ms): 5100.0 | learning rate: "
            f"{1e-5:.6E} | global batch size:    16 | lm loss: {loss[s]:.6E} | loss "
            f"scale: 1.0 | grad norm: {1.5:.3f} | number of skipped iterations:   0 | "
            "number of nan iterations:   0 | elapsed time: 1d 6h 54m 11s | remaining "
            "time: 2h 3m 4s |"
        )
    out[-1] = cut(out[-1], " | elapsed time:")
    return "\n".join(out)


def olmo(loss: list[float]) -> str:
    # OLMo `olmo/train.py` log_metrics_to_console: `log.info(f"{prefix}\n" + "\n".join(
    # f"    {name}={format_float(value)}" ...))`, prefix `[step={step}/{max_steps},epoch=E]`,
    # through `olmo/util.py`'s `%(asctime)s\t%(hostname)s:%(local_rank)s\t%(name)s:%(lineno)s
    # \t%(levelname)s\t%(message)s`; format_float prints values over 1000 as `{int:,d}`
    def fmt(value: float) -> str:
        if value < 0.0001 or math.isnan(value):
            return str(value)
        if value > 1000:
            return f"{int(value):,d}"
        return f"{value:.1f}" if value > 100 else f"{value:.2f}" if value > 10 else f"{value:.3f}"

    out = ["2024-02-05 10:00:00.000\tintern-studio-160750:0\tolmo.train:840\tINFO\tStarting"]
    for s in range(1, STEPS + 1):
        metrics = {
            "train/CrossEntropyLoss": loss[s],
            "train/Perplexity": math.exp(loss[s]) if not math.isnan(loss[s]) else loss[s],
            "optim/total_grad_norm": 1.5,
            "throughput/device/tokens_per_second": 1_048_576.0,
        }
        out.append(
            f"2024-02-05 10:00:{s % 60:02d}.123\tintern-studio-160750:0\tolmo.train:966\tINFO"
            f"\t[step={s}/739328,epoch=0]\n"
            + "\n".join(f"    {name}={fmt(value)}" for name, value in metrics.items())
        )
    out[-1] = cut(out[-1], "=")
    return "\n".join(out)


def composer(loss: list[float]) -> str:
    # Composer `composer/loggers/console_logger.py` log_to_console: f"{progress}:" then
    # f"\n\t {prefix}{name}: {format_log_data_value(value)}" (floats `.4f`, ints `str`)
    out = ["*" * 30, "Config:", "enabled_algorithms/GradientClipping: true", "*" * 30]
    for s in range(1, STEPS + 1):
        data = {"time/batch": str(s - 1), "loss/train/total": f"{loss[s]:.4f}"}
        data["lr-DecoupledAdamW/group0"] = f"{6e-4:.4f}"
        out.append(
            f"[batch={s}/{STEPS}]:"
            + "".join(f"\n\t Train {name}: {value}" for name, value in data.items())
        )
    out[-1] = cut(out[-1], ": ")
    return "\n".join(out)


WRITERS = {
    "nanogpt/train.log": nanogpt,
    "modded_nanogpt/log.txt": modded_nanogpt,
    "torchtitan/stdout.log": torchtitan,
    "mlx_lm/train.log": mlx_lm,
    "litgpt/pretrain.log": litgpt,
    "keras/fit.log": keras,
    "nemo/train.log": nemo,
    "fairseq/json.log": fairseq_json,
    "fairseq/simple.log": fairseq_simple,
    "hf_stdout/train.log": hf_stdout,
    "gptneox/train.log": gptneox,
    "ms_swift/train.log": ms_swift,
    "olmo/train.log": olmo,
    "composer/train.log": composer,
}


def main() -> None:
    loss = curve()
    for name, writer in WRITERS.items():
        path = OUT / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(writer(loss))  # no final newline: the last record is cut mid-write
        print(path)


if __name__ == "__main__":
    main()
