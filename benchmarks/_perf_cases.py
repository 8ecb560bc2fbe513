"""The cases of `benchmarks/run.py`: each one input and the commands timed on it.

A case's subjects run interleaved; `stab` is the subject under test, `floor`
the one its ratio in the main table is taken against, and the others are
further baselines (the projection floor, the Parquet floor, the pandas peer,
the format clients).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import _perf_data as data

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SMALL_FIXTURE = ROOT / "fixtures" / "runs" / "healthy-hf-style" / "run.jsonl"
PANDAS_BYTES_PER_ROW = 1_800  # measured: pandas.read_json(lines=True) of these logs, 1M rows
STARTUP_IMPORTS = "import polars, numpy, rich, typer"
STAB_COLUMNS = ("step", "loss", "grad_norm", "learning_rate", "loss_scale", "tokens_per_second")

NAMES = (
    "jsonl-1m-1rank",
    "jsonl-10m-1rank",
    "jsonl-30m-1rank",
    "jsonl-1m-64ranks",
    "jsonl-10m-64ranks",
    "jsonl-30m-64ranks",
    "parquet-100m-1rank",
    "ranks-1024x20000",
    "tensorboard-1m",
    "mlflow-1m",
    "mlflow-client-100k",
    "batch-10000",
    "startup-help",
    "startup-analyze",
)


@dataclass
class Setup:
    cache: Path
    scale: float
    seed: int
    stab: str
    python: str
    max_rss_mb: float = 8192.0


@dataclass
class Subject:
    key: str  # "stab", "floor", or a baseline's own key
    label: str
    argv: list[str]
    ok_exit_codes: tuple[int, ...] = (0,)


@dataclass
class Case:
    name: str
    rows: int
    file_mb: float
    subjects: list[Subject]
    notes: list[str] = field(default_factory=list)
    repeat_factor: int = 1  # start-up cases are cheap and noisy: more runs
    warm_up: bool = False


def _size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 1e6
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def _floor(setup: Setup, key: str, label: str, kind: str, *args: object) -> Subject:
    argv = [setup.python, str(HERE / "_perf_floors.py"), kind, *map(str, args)]
    return Subject(key, label, argv)


def _stab(setup: Setup, label: str, *args: object, key: str = "stab") -> Subject:
    return Subject(key, label, [setup.stab, *map(str, args)], ok_exit_codes=(0, 1))


def _available_mb() -> float:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def jsonl_case(name: str, setup: Setup, rows: int, ranks: int) -> Case:
    rows = max(ranks * 200, int(rows * setup.scale) // ranks * ranks)
    jsonl, parquet = data.jsonl_log(setup.cache, rows, ranks, setup.seed)
    used = ("step", "rank", *STAB_COLUMNS[1:]) if ranks > 1 else STAB_COLUMNS
    subjects = [
        _floor(setup, "floor", "polars.read_ndjson", "read_ndjson", jsonl),
        _stab(setup, "stab analyze", "analyze", jsonl),
        _floor(setup, "projection", "scan_ndjson().select(used)", "scan_ndjson", jsonl, *used),
        _floor(setup, "parquet", "pyarrow.parquet.read_table", "read_parquet", parquet),
        _stab(setup, "stab analyze (Parquet)", "analyze", parquet, key="stab_parquet"),
    ]
    notes = []
    pandas_mb = rows * PANDAS_BYTES_PER_ROW / 1e6
    budget_mb = min(setup.max_rss_mb, _available_mb() / 2)
    if pandas_mb <= budget_mb:
        peer = [setup.python, str(HERE / "_perf_pandas_peer.py"), str(jsonl)]
        subjects.append(Subject("pandas", "pandas peer (read_json + rules)", peer))
    else:
        notes.append(
            f"{name}: pandas peer skipped: it would need about {pandas_mb / 1e3:.1f} GB "
            f"(budget {budget_mb / 1e3:.1f} GB: half the available memory, at most --max-rss-gb)"
        )
    return Case(name, rows, _size_mb(jsonl), subjects, notes)


def parquet_case(name: str, setup: Setup, rows: int, ranks: int) -> Case:
    """A log too long for its JSONL to be worth writing (100M rows: 15 GB), as Parquet only;
    its cost is set against the Parquet run of `jsonl-30m-*` (linear cost, #40)."""
    rows = max(ranks * 200, int(rows * setup.scale) // ranks * ranks)
    parquet = data.parquet_log(setup.cache, rows, ranks, setup.seed)
    subjects = [
        _floor(setup, "floor", "pyarrow.parquet.read_table", "read_parquet", parquet),
        _stab(setup, "stab analyze (Parquet)", "analyze", parquet),
    ]
    return Case(name, rows, _size_mb(parquet), subjects)


def ranks_case(name: str, setup: Setup) -> Case:
    ranks, steps = 1024, max(200, int(20_000 * setup.scale))
    jsonl, _ = data.jsonl_log(
        setup.cache, ranks * steps, ranks, setup.seed, columns=("loss", "tokens_per_second")
    )
    subjects = [
        _floor(setup, "floor", "polars.read_ndjson", "read_ndjson", jsonl),
        _stab(setup, "stab ranks", "ranks", jsonl),
    ]
    return Case(name, ranks * steps, _size_mb(jsonl), subjects)


def tensorboard_case(name: str, setup: Setup) -> Case:
    points = max(1000, int(1_000_000 * setup.scale))
    folder = data.tensorboard_run(setup.cache, points, setup.seed)
    subjects = [
        _floor(setup, "floor", "TFRecord walk + Event parse", "tb_walk", folder),
        _stab(setup, "stab analyze", "analyze", folder),
    ]
    notes = []
    if importlib.util.find_spec("tbparse") is not None:
        subjects.append(
            _floor(setup, "tbparse", "tbparse SummaryReader.scalars", "tbparse", folder)
        )
    else:
        notes.append(f"{name}: tbparse is not installed (pip install tbparse): its row skipped")
    return Case(name, points * len(data.TB_TAGS), _size_mb(folder), subjects, notes)


def mlflow_case(name: str, setup: Setup, points: int, with_client: bool) -> Case:
    points = max(1000, int(points * setup.scale))
    root, run_id = data.mlflow_store(setup.cache, points, setup.seed)
    subjects = [
        _floor(setup, "floor", "metric files via polars.read_csv", "mlflow_files", root),
        _stab(setup, "stab analyze", "analyze", root),
    ]
    notes = []
    if not with_client:
        pass
    elif importlib.util.find_spec("mlflow") is not None:
        subjects.append(
            _floor(
                setup,
                "client",
                "MlflowClient.get_metric_history",
                "mlflow_client",
                root,
                run_id,
                *data.MLFLOW_KEYS,
            )
        )
    else:
        notes.append(f"{name}: mlflow is not installed: the client's row skipped")
    return Case(name, points * len(data.MLFLOW_KEYS), _size_mb(root), subjects, notes)


def batch_case(name: str, setup: Setup) -> Case:
    runs = max(20, int(10_000 * setup.scale))
    folder = data.batch_runs(setup.cache, runs, 300, setup.seed)
    subjects = [
        _stab(
            setup, "stab analyze -r -j 1", "analyze", "--recursive", folder, "-j", 1, key="floor"
        ),
        _stab(setup, "stab analyze -r -j 2", "analyze", "--recursive", folder, "-j", 2),
    ]
    return Case(name, runs * 300, _size_mb(folder), subjects)


def startup_case(name: str, setup: Setup, *stab_args: object) -> Case:
    subjects = [
        # what any tool on this stack imports before it does anything (issue #40)
        Subject("floor", f'python -c "{STARTUP_IMPORTS}"', [setup.python, "-c", STARTUP_IMPORTS]),
        _stab(
            setup, "stab " + " ".join(map(str, stab_args)).replace(str(ROOT) + "/", ""), *stab_args
        ),
    ]
    return Case(name, 0, 0.0, subjects, repeat_factor=5, warm_up=True)


def build(name: str, setup: Setup) -> Case:
    """The case `name`, its input generated first if the cache does not hold it."""
    if name.startswith(("jsonl-", "parquet-")):
        millions, ranks = (int(n) for n in re.findall(r"\d+", name))
        case = jsonl_case if name.startswith("jsonl-") else parquet_case
        return case(name, setup, millions * 1_000_000, ranks)
    builders = {
        "ranks-1024x20000": lambda: ranks_case(name, setup),
        "tensorboard-1m": lambda: tensorboard_case(name, setup),
        "mlflow-1m": lambda: mlflow_case(name, setup, 1_000_000, with_client=False),
        "mlflow-client-100k": lambda: mlflow_case(name, setup, 100_000, with_client=True),
        "batch-10000": lambda: batch_case(name, setup),
        "startup-help": lambda: startup_case(name, setup, "--help"),
        "startup-analyze": lambda: startup_case(name, setup, "analyze", SMALL_FIXTURE),
    }
    return builders[name]()
