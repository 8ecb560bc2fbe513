"""What the user told us about how to read the input."""

from __future__ import annotations

from dataclasses import field

from stabilitycli.core.records import dataclass
from stabilitycli.ingest.dtype import dtype_option
from stabilitycli.ingest.limits import InputLimits


@dataclass(frozen=True)
class ReadOptions:
    format_in: str | None = None
    # canonical metric -> raw key, from `--metric loss=KEY`
    metric_overrides: dict[str, str] = field(default_factory=dict)
    step_key: str | None = None
    rank_key: str | None = None
    # regex with one group capturing the rank in a per-rank file name
    rank_pattern: str | None = None
    # run / experiment selection for stores holding many runs (MLflow, TensorBoard dirs)
    run: str | None = None
    experiment: str | None = None
    tracking_uri: str | None = None
    # an S3-compatible store's endpoint for s3:// inputs (`--endpoint-url`; else the
    # AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL environment, as the AWS tools read it)
    endpoint_url: str | None = None
    include_deleted: bool = False
    dtype: str | None = None
    # `--pattern REGEX`: named groups are the fields of a text-log record (`step` the step)
    pattern: str | None = None
    # bounds on bytes, nesting, walks and server time (ingest/limits.py; STAB_LIMIT_* env)
    limits: InputLimits = field(default_factory=InputLimits.from_env)

    def __post_init__(self) -> None:
        # refused here, where every command and the library build their options, so that a
        # misspelt `--dtype` fails at once instead of reaching the tree as a regime it is not
        object.__setattr__(self, "dtype", dtype_option(self.dtype))
