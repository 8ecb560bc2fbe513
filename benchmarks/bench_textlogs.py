"""How fast stab reads trainer stdout, per line, against its Megatron reader.

    .venv/bin/python benchmarks/bench_textlogs.py [--records N] [--repeat R]

Writes N records (default 200,000) of the same loss curve in each text
format, each followed by the chatter its trainer prints (Megatron's timer
line, a tqdm bar before a Hugging Face dict), and times
`stabilitycli.ingest.read` end to end (bytes to the finished frame, sniffing
excluded: `--format-in` is given). Reported: microseconds per line of the
file and per record, best of R runs. The Megatron reader is the baseline the
issue sets ("at least as fast per line as the Megatron reader today").

Measured at 0c0edd6 (200,000 records, best of 3, a shared 2-core box at load 8.5,
so only the ratios in one run mean much):

    format                     lines   us/line  us/record
    megatron                  400,000   23.20    46.41   1.00x
    kvlog (nanoGPT)           200,000    9.13     9.13   0.39x
    kvlog (modded-nanogpt)    200,000    7.86     7.86   0.34x
    kvlog (torchtitan)        200,000   16.06    16.06   0.69x
    dictlog (HF stdout)       400,000    5.67    11.34   0.24x
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _series import loss_curve

from stabilitycli.ingest import read
from stabilitycli.ingest.options import ReadOptions


def megatron(loss) -> list[str]:
    out = []
    for s, v in enumerate(loss, start=1):
        out.append(
            f"[default0]: iteration {s:8d}/{len(loss):8d} | consumed samples: {s * 512:12d} | "
            f"elapsed time per iteration (ms): 1234.5 | learning rate: 1.500000E-04 | "
            f"global batch size:   512 | lm loss: {v:.6E} | loss scale: 1.0 | grad norm: 0.876 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
        out.append("time (ms) | forward: 1897.36 | backward: 8367.41 | optimizer: 1450.71")
    return out


def nanogpt(loss) -> list[str]:
    return [f"iter {s}: loss {v:.4f}, time 330.12ms, mfu 31.20%" for s, v in enumerate(loss)]


def modded_nanogpt(loss) -> list[str]:
    return [
        f"step:{s}/{len(loss)} train_loss:{v:.4f} train_time:{87786 + s * 1719}ms "
        "step_avg:1719.17ms"
        for s, v in enumerate(loss, start=1)
    ]


def torchtitan(loss) -> list[str]:
    return [
        f"[rank0]:[titan] 2025-01-10 12:00:00,123 - root - INFO - \033[31mstep: {s:2}  "
        f"\033[32mloss: {v:7.4f}  \033[33mgrad_norm:  1.2345  \033[36mmemory: 61.32GiB(64.56%)  "
        "\033[34mtps: 7,023  \033[36mtflops: 1,234.56  \033[35mmfu: 38.51%\033[39m"
        for s, v in enumerate(loss, start=1)
    ]


def hf_stdout(loss) -> list[str]:
    out = []
    for s, v in enumerate(loss, start=1):
        out.append(f" 14%|#         | {s}/{len(loss)} [13:58:09<86:18:35, 132.44s/it]")
        out.append(
            f"{{'loss': {v:.4f}, 'grad_norm': 1.2345, 'learning_rate': 0.0002, 'epoch': 0.28}}"
        )
    return out


FORMATS = {
    "megatron": megatron,
    "kvlog": nanogpt,
    "kvlog (modded-nanogpt)": modded_nanogpt,
    "kvlog (torchtitan)": torchtitan,
    "dictlog (HF stdout)": hf_stdout,
}


def best_of(repeat: int, fn) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    loss = loss_curve(args.records).tolist()
    print(f"{args.records:,} records each; best of {args.repeat}")
    print(f"{'format':26} {'lines':>9} {'seconds':>8} {'us/line':>8} {'us/record':>10}")
    baseline = None
    with tempfile.TemporaryDirectory() as folder:
        for label, writer in FORMATS.items():
            lines = writer(loss)
            path = Path(folder) / f"{label.split()[0]}-{len(lines)}.log"
            path.write_text("\n".join(lines) + "\n")
            options = ReadOptions(format_in=label.split()[0])
            seconds = best_of(args.repeat, lambda p=path, o=options: read(p, o))
            per_line = seconds / len(lines) * 1e6
            baseline = baseline or per_line
            print(
                f"{label:26} {len(lines):9,} {seconds:8.2f} {per_line:8.2f} "
                f"{seconds / args.records * 1e6:10.2f}   {per_line / baseline:4.2f}x Megatron"
            )


if __name__ == "__main__":
    main()
