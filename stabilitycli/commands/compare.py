"""`stab compare`: a fix against the broken run, a rerun against its baseline,
or a resume against the trajectory it abandoned; plus `--expect` checks.

Registered by `cli.py` as `app.command("compare")(command)`. polars/numpy are
imported only inside the function, so `stab --help` stays instant.

Exit status: 0 every judged metric within its band (one-sided by default for two
runs: only worse than the baseline fails) and every check holds; 1 one does
not (or a run stops before --until); 2 unreadable input or a bad option,
including a malformed --expect (one line on stderr naming it and the column).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    SetOpt,
    boundary,
    internal_error,
    metric_keys,
    pairs,
    print_rendered,
)
from stabilitycli.commands.read_options import ReadArgs, takes_read_options
from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.core.exit_codes import ExitCode


class CompareFormat(StrEnum):
    terminal = "terminal"
    json = "json"


class Band(StrEnum):
    one_sided = "one-sided"
    two_sided = "two-sided"


class XAxis(StrEnum):
    step = "step"
    tokens = "tokens"


# the options of `stab compare` besides the read options, in its --help order
RunsArg = Annotated[
    list[str],
    typer.Argument(
        help="BASELINE CANDIDATE; or one RUN with --expect (checks only) or with --restart N.",
        show_default=False,
    ),
]
# below the options in `stab compare --help`, where a line is never cut
EPILOG = (
    "Examples:\n\n"
    "stab compare baseline.jsonl fixed.jsonl --until 500 --tolerance 0.05\n\n"
    "stab compare run.jsonl --expect 'loss@312<2.5' "
    "--expect 'max(grad_norm)\\[300:400]<3.0'\n\n"
    "stab compare --restart 1 run.jsonl\n\n"
    "An --expect check is METRIC@STEP OP NUMBER or AGG(METRIC)\\[A:B] OP NUMBER, AGG one of "
    "max, min, mean, last, OP one of < <= > >= ==."
)

ExpectOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--expect",
        "-e",
        help="A check that must hold (examples below); on the candidate unless prefixed "
        "'baseline:' (repeatable).",
    ),
]
RestartOpt = Annotated[
    int | None,
    typer.Option(
        help="Compare restart N (1-based) of one log: "
        "the abandoned trajectory against the resumed one."
    ),
]
ToleranceOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--tolerance",
        "-t",
        help="Absolute band: VALUE (for loss) or METRIC=VALUE (repeatable). "
        "Default: the noise measured in the baseline.",
    ),
]
RelToleranceOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="Relative band: FRAC (every metric) or METRIC=FRAC, times |baseline| (repeatable)."
    ),
]
UntilOpt = Annotated[
    int | None,
    typer.Option(
        help="Compare up to this step (tokens with --x tokens); a run that stops before it fails."
    ),
]
SinceOpt = Annotated[
    int | None, typer.Option(help="Compare from this step (tokens with --x tokens).")
]
XOpt = Annotated[XAxis, typer.Option("--x", help="Align on optimizer steps or on consumed tokens.")]
SmoothOpt = Annotated[
    str | None,
    typer.Option(
        help="Compare smoothed curves: ema:ALPHA (0<ALPHA<=1) "
        "or window:N (trailing mean of N points)."
    ),
]
MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        "-m",
        help="Metric to compare (NAME, or NAME=LOGKEY to map a key in both runs); repeatable. "
        "Default: loss, grad_norm, eval_loss, lr where both runs log them.",
    ),
]
BandOpt = Annotated[
    Band | None,
    typer.Option(
        "--band",
        help="one-sided: only a candidate worse than the baseline beyond the band fails "
        "(verifying a fix; the default for two runs). two-sided: a point outside on either "
        "side fails (a determinism check; the default for --restart).",
        show_default=False,
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        help="Judge every point on its own (default: the median of 5 neighbouring points, "
        "so one noisy mini-batch never fails a comparison)."
    ),
]
FormatOpt = Annotated[CompareFormat, typer.Option("--format", "-f", help="Output format.")]


@takes_read_options(only=("step_key", "format_in"))
def command(
    runs: RunsArg,
    *,
    expect: ExpectOpt = None,
    restart: RestartOpt = None,
    tolerance: ToleranceOpt = None,
    rel_tolerance: RelToleranceOpt = None,
    until: UntilOpt = None,
    since: SinceOpt = None,
    x: XOpt = XAxis.step,
    smooth: SmoothOpt = None,
    metric: MetricOpt = None,
    band: BandOpt = None,
    strict: StrictOpt = False,
    output: FormatOpt = CompareFormat.terminal,
    read: ReadArgs,
    set_values: SetOpt = None,
) -> None:
    """Compare two runs (or a resume with what it replaced) and check --expect bounds."""
    try:
        result = _compare(
            runs,
            expect,
            restart,
            tolerance,
            rel_tolerance,
            until,
            since,
            x.value,
            smooth,
            metric,
            strict,
            band.value if band else None,
            read,
            set_values,
        )
    except (StabInputError, StabUsageError) as err:
        raise boundary(err, " ".join(runs)) from None
    except BaseException as err:
        raise internal_error(err, " ".join(runs)) from None
    if output is CompareFormat.json:
        import json

        typer.echo(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    else:
        from stabilitycli.report.compare_terminal import build

        print_rendered(build(result))
    raise typer.Exit(ExitCode.OK if result.passed else ExitCode.INSTABILITY)


def _compare(
    runs,
    expect,
    restart,
    tolerance,
    rel_tolerance,
    until,
    since,
    x,
    smooth,
    metric,
    strict,
    band,
    read: ReadArgs,
    set_values,
):
    from stabilitycli.compare.expect import parse_expect
    from stabilitycli.compare.runs import CompareOptions, check_run, compare, compare_restart
    from stabilitycli.core.settings import load_settings, sentence
    from stabilitycli.detect.deviation import Smoothing
    from stabilitycli.ingest import read as read_run

    if not 1 <= len(runs) <= 2:
        raise StabUsageError(
            "give BASELINE CANDIDATE, or one RUN with --expect or --restart "
            f"(got {len(runs)} paths)"
        )
    if restart is not None and len(runs) != 1:
        raise StabUsageError("--restart N compares within one log: give exactly one RUN")
    checks = tuple(
        parse_expect(e) for e in expect or []
    )  # malformed: a usage error before any reading
    names, overrides = metric_keys(metric)
    thresholds, settings = load_settings(runs[0], pairs(set_values, "--set"))
    options = CompareOptions(
        metrics=names,
        tolerance=_numbers(tolerance, "--tolerance", bare="loss"),
        rel_tolerance=_numbers(rel_tolerance, "--rel-tolerance", bare="*"),
        since=since,
        until=until,
        x=x,
        smoothing=Smoothing.parse(smooth) if smooth else None,
        strict=strict,
        expects=checks,
        band=band,
        thresholds=thresholds,
    )
    read_options = read.options(metric_overrides=overrides)
    loaded = [read_run(path, read_options) for path in runs]
    if restart is not None:
        result = compare_restart(loaded[0], restart, options)
    elif len(loaded) == 1:
        result = check_run(loaded[0], options)
    else:
        result = compare(loaded[0], loaded[1], options)
    said = sentence(settings.to_dict())
    if said is None:
        return result
    from dataclasses import replace

    # thresholds not at their defaults change the bands: the first note says which, and whence
    return replace(result, notes=(said, *result.notes))


def _numbers(values: list[str] | None, flag: str, bare: str) -> dict[str, float]:
    """VALUE or METRIC=VALUE items; a bare VALUE applies to `bare` ('loss', or '*' for all)."""
    import math

    out: dict[str, float] = {}
    for item in values or []:
        name, sep, raw = item.rpartition("=")
        name = name.strip() if sep else bare
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if (not sep and "=" in item) or not name or not math.isfinite(number) or number < 0:
            raise StabUsageError(
                f"{flag} expects VALUE or METRIC=VALUE with a number >= 0, got {item!r}"
            )
        out[name] = number
    return out
