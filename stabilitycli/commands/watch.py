"""`stab watch`: follow a run while it is written, alert as events become decidable, act on
them, and end with the verdict `stab analyze` gives on the final log (its exit status too).

The library is `stabilitycli/watch/`; this module parses the options and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stabilitycli.commands._common import (
    FailOn,
    FailOnOpt,
    boundary,
    fail,
    internal_error,
    load_thresholds,
    print_rendered,
    split_codes,
    with_settings,
)
from stabilitycli.commands.analyze import (
    FormatOpt,
    IgnoreOpt,
    QuietOpt,
    SelectOpt,
    ThresholdSetOpt,
    VerboseOpt,
)
from stabilitycli.commands.read_options import ReadArgs, takes_read_options
from stabilitycli.core.errors import StabInputError, StabUsageError, visible
from stabilitycli.report.formats import Format

EPILOG = (
    "Examples:\n\n"
    "stab watch run/metrics.jsonl --stop-pid $TRAIN_PID --fail-on error\n\n"
    "kubectl logs -f job/train | stab watch - --webhook $SLACK_HOOK\n\n"
    "Alerts are printed as events become decidable (JSON Lines with --format json); a "
    "spike is provisional until its recovery window has passed. The hooks act once per "
    "event (code, onset step, rank) at or above --fail-on, once it is settled. See "
    "docs/watch.md."
)

IDLE_DEFAULT_S = 600.0  # a trainer pausing for an eval or a checkpoint writes nothing for minutes


def _signal(name: str):
    import signal

    text = name.strip().upper()
    try:
        return (
            signal.Signals(int(text))
            if text.isdigit()
            else signal.Signals[text if text.startswith("SIG") else f"SIG{text}"]
        )
    except (KeyError, ValueError):
        raise StabUsageError(
            f"--stop-signal: no signal {name!r} (TERM, INT, KILL, USR1...)"
        ) from None


# the options of `stab watch` beside analyze's, in its --help order
PathArg = Annotated[
    str, typer.Argument(help="The log, run folder or URI being written, or - for stdin.")
]
IntervalOpt = Annotated[float, typer.Option(help="Seconds between polls.")]
IdleOpt = Annotated[
    float,
    typer.Option(
        help="The run is over once nothing was written for this many seconds "
        "(0: only the source, stdin closing or Ctrl-C end it)."
    ),
]
OnAlertOpt = Annotated[
    str | None, typer.Option(help="Run this shell command per alert, its JSON on stdin.")
]
WebhookOpt = Annotated[
    str | None,
    typer.Option(help="POST each alert as JSON (with a Slack-compatible `text`) here."),
]
StopPidOpt = Annotated[
    int | None, typer.Option(help="Send --stop-signal to this process on an alert.")
]
StopSignalOpt = Annotated[str, typer.Option(help="The signal --stop-pid sends.")]
TouchOpt = Annotated[
    Path | None,
    typer.Option(help="Write the alert's JSON to this file (a sentinel a trainer polls)."),
]
AlertsOpt = Annotated[
    Path | None, typer.Option(help="Append the alert lines to this file instead of stdout.")
]
EachRunOpt = Annotated[
    bool,
    typer.Option(
        "--each-run",
        help="An MLflow store or experiment, or a folder of runs: watch each of its runs, and "
        "each run that starts later, judged on its own; one verdict a run at the end.",
    ),
]
CpuShareOpt = Annotated[
    float, typer.Option(help="Share of one core the watch (polls, judgments) may take on average.")
]


@takes_read_options(then={"dtype": ("select", "ignore", "set_values")})
def command(
    path: PathArg,
    *,
    output: FormatOpt = Format.terminal,
    fail_on: FailOnOpt = FailOn.error,
    read: ReadArgs,
    select: SelectOpt = None,
    ignore: IgnoreOpt = None,
    set_values: ThresholdSetOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    interval: IntervalOpt = 2.0,
    idle: IdleOpt = IDLE_DEFAULT_S,
    on_alert: OnAlertOpt = None,
    webhook: WebhookOpt = None,
    stop_pid: StopPidOpt = None,
    stop_signal: StopSignalOpt = "TERM",
    touch: TouchOpt = None,
    alerts: AlertsOpt = None,
    cpu_share: CpuShareOpt = 0.04,
    each_run: EachRunOpt = False,
) -> None:
    """Follow a run while it is written: alert each event as it becomes decidable, run the
    hooks, and end with the verdict `stab analyze` gives on the final log."""
    if quiet and verbose:
        raise fail("--quiet and --verbose contradict each other; give one")
    if not interval > 0 or idle < 0 or not 0 < cpu_share <= 1:
        raise fail("--interval must be above 0, --idle 0 or more, --cpu-share in (0, 1]")
    from stabilitycli.core.exit_codes import exit_code_for
    from stabilitycli.core.model import Severity
    from stabilitycli.watch.hooks import Hooks
    from stabilitycli.watch.loop import WatchSettings

    threshold = Severity.parse(fail_on.value)
    try:
        hooks = Hooks(on_alert, webhook, stop_pid, _signal(stop_signal), touch)
        watch = WatchSettings(interval, idle or None, cpu_share, threshold, hooks)
        finals, settings = _watch(
            path, read, watch, select, ignore, set_values, output, alerts, each_run
        )
    except StabUsageError as err:
        raise fail(str(err)) from None
    verbosity = "quiet" if quiet else "verbose" if verbose else "normal"
    for final in finals:  # --each-run: one verdict a run, in the order they joined
        print_rendered(output.render(with_settings(final, settings), threshold, verbosity))
    worst = max(exit_code_for(final.worst_severity, threshold) for final in finals)
    raise typer.Exit(worst)


def _watch(path, read, watch, select, ignore, set_values, output, alerts, each_run):
    """(the final analyses, the settings not at their defaults): exit 2 with one line on
    bad input."""
    from stabilitycli.watch.experiment import watch_each_run
    from stabilitycli.watch.session import WatchRequest, run_watch

    options = read.options()
    thresholds, settings = load_thresholds(path, set_values)
    request = WatchRequest(
        path, options, thresholds, watch, split_codes(select), split_codes(ignore)
    )
    emit = _alert_printer(output, alerts)
    try:
        if each_run:
            finals = watch_each_run(request, emit, _say)
        else:
            finals = [run_watch(request, emit, _say, stdin=_stdin(path))]
    except (StabInputError, StabUsageError) as err:
        raise boundary(err, path) from None
    except BaseException as err:
        raise internal_error(err, path) from None
    return finals, settings


def _say(line: str) -> None:
    typer.echo(f"stab watch: {visible(line)}", err=True)


def _stdin(path: str):
    import sys

    if path != "-" or sys.stdin is None or sys.stdin.isatty():
        return None
    return sys.stdin.buffer


def _alert_printer(output: Format, to: Path | None):
    """Each alert as one line (a JSON object with --format json), flushed as it comes."""
    import json

    def emit(alert) -> None:
        line = (
            json.dumps(alert.to_dict(), default=str)
            if output is Format.json
            else visible(alert.line())
        )
        if to is None:
            typer.echo(line)
            return
        with open(to, "a", encoding="utf-8") as sink:
            sink.write(line + "\n")

    return emit
