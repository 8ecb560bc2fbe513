"""Tables and PASS/FAIL for `benchmarks/run.py`: plain text for stdout, Markdown for
docs/performance.md. Both are made from the run's raw numbers (the `--json` file)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass
class Target:
    name: str
    requirement: str
    measured: str
    ok: bool | None  # None: a case it needs was not run (or a command was killed)
    cases: tuple[str, ...]

    @property
    def result(self) -> str:
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.ok]


def _get(results: dict, case: str, key: str) -> dict | None:
    subject = results.get(case, {}).get("subjects", {}).get(key)
    return None if subject is None or subject.get("failed") else subject


def _ratio_target(results, name, requirement, case, num, den, bar, at_most=True) -> Target:
    top, bottom = _get(results, *num), _get(results, *den)
    if top is None or bottom is None:
        return Target(name, requirement, _why_missing(results, num, den), None, (case,))
    ratio = top["seconds"] / bottom["seconds"]
    measured = f"{ratio:.2f}x"
    if results[num[0]].get("earlier") != results[den[0]].get("earlier"):
        # a ratio is meant within one run: across two, the machine's drift is in it too
        measured += f" (across runs: {num[0]} and {den[0]} were measured apart)"
    return Target(name, requirement, measured, ratio <= bar if at_most else ratio >= bar, (case,))


def _with_peer_ceiling(results: dict, case: str, target: Target) -> Target:
    """The pandas target, with the most any reader of the file could reach: the peer's time
    over the read floor's. A command that only read the file would be that much faster."""
    peer, floor = _get(results, case, "pandas"), _get(results, case, "floor")
    if peer is None or floor is None:
        return target
    ceiling = peer["seconds"] / floor["seconds"]
    return replace(
        target,
        measured=f"{target.measured} (ceiling {ceiling:.1f}x: the peer over read_ndjson alone)",
    )


def _why_missing(results: dict, *wanted: tuple[str, str]) -> str:
    for case, key in wanted:
        subject = results.get(case, {}).get("subjects", {}).get(key)
        if subject is not None and subject.get("failed"):
            return f"{subject['label']}: {subject['failed']}"
    return "not measured"


def targets(run: dict) -> list[Target]:
    """Issue #40's targets (and #15's that it kept: linear cost, memory, batch), each judged
    on numbers measured in the same run."""
    results = {r["case"]: r for r in run["results"]}
    out = []
    for ranks in ("1rank", "64ranks"):
        c1, c10, c30 = (f"jsonl-{m}m-{ranks}" for m in (1, 10, 30))
        out.append(
            _ratio_target(
                results,
                f"read-{ranks}",
                f"analyze 10M rows ({ranks}) <= 2.0x read_ndjson of the same file",
                c10,
                (c10, "stab"),
                (c10, "floor"),
                2.0,
            )
        )
        for case, size in ((c1, "1M"), (c10, "10M")):
            out.append(_pandas_target(results, case, f"pandas-{size}-{ranks}", f"{size}, {ranks}"))
        out.append(_peer_memory_target(results, c10, c1, ranks))
        out.append(
            _ratio_target(
                results,
                f"linear-10-{ranks}",
                f"10M rows cost <= 12x 1M rows ({ranks}; #15)",
                c10,
                (c10, "stab"),
                (c1, "stab"),
                12.0,
            )
        )
        out.append(
            _ratio_target(
                results,
                f"linear-30-{ranks}",
                f"30M rows cost <= 3.5x 10M rows ({ranks})",
                c30,
                (c30, "stab"),
                (c10, "stab"),
                3.5,
            )
        )
        if ranks == "1rank":
            out.append(
                _ratio_target(
                    results,
                    "linear-100-1rank",
                    "100M rows cost <= 3.5x 30M rows (1rank, Parquet: 15 GB of JSONL is not"
                    " written)",
                    "parquet-100m-1rank",
                    ("parquet-100m-1rank", "stab"),
                    (c30, "stab_parquet"),
                    3.5,
                )
            )
        out.append(_rss_target(results, c10, ranks))
    out.append(
        _ratio_target(
            results,
            "ranks",
            "stab ranks 1024 x 20,000 <= 2.5x read_ndjson of its log",
            "ranks-1024x20000",
            ("ranks-1024x20000", "stab"),
            ("ranks-1024x20000", "floor"),
            2.5,
        )
    )
    for case, what, bar in (
        ("startup-help", "stab --help", 1.5),
        ("startup-analyze", "analyze, small fixture", 1.2),
    ):
        out.append(
            _ratio_target(
                results,
                case,
                f"{what} <= {bar}x {STARTUP_FLOOR} (medians of interleaved runs)",
                case,
                (case, "stab"),
                (case, "floor"),
                bar,
            )
        )
    out.append(
        _ratio_target(
            results,
            "batch",
            "batch -j 2 >= 1.8x the rate of -j 1 (#15)",
            "batch-10000",
            ("batch-10000", "floor"),
            ("batch-10000", "stab"),
            1.8,
            at_most=False,
        )
    )
    return out


STARTUP_FLOOR = "python -c 'import polars, numpy, rich, typer'"


def _pandas_target(results: dict, case: str, name: str, where: str) -> Target:
    requirement = f"analyze >= 3x faster than the pandas peer ({where})"
    note = next((n for n in results.get(case, {}).get("notes", []) if "pandas" in n), "")
    if note and case in results:
        # the peer was not run: it would not fit in memory (the issue: "where the peer fits")
        return Target(name, requirement, note.split(": ", 1)[1], None, (case,))
    target = _ratio_target(
        results, name, requirement, case, (case, "pandas"), (case, "stab"), 3.0, at_most=False
    )
    return _with_peer_ceiling(results, case, target)


def _peer_memory_target(results: dict, c10: str, c1: str, ranks: str) -> Target:
    """The peer's peak RSS over stab's at 10M rows. Where the peer did not fit at 10M, its
    1M peak times 10 (pandas holds every row: its memory grows at least as fast as the
    rows) is shown beside, as an estimate that judges nothing."""
    name = f"peer-rss-{ranks}"
    requirement = f"the pandas peer's peak RSS >= 4x stab's at 10M rows ({ranks})"
    stab, peer = _get(results, c10, "stab"), _get(results, c10, "pandas")
    if stab is None:
        return Target(name, requirement, "not measured", None, (c10,))
    if peer is not None:
        ratio = peer["maxrss_mb"] / stab["maxrss_mb"]
        measured = f"{peer['maxrss_mb']:,.0f} MB / {stab['maxrss_mb']:,.0f} MB = {ratio:.1f}x"
        return Target(name, requirement, measured, ratio >= 4.0, (c10,))
    small = _get(results, c1, "pandas")
    if small is None:
        return Target(name, requirement, "the peer did not run at 10M", None, (c10,))
    guess = small["maxrss_mb"] * 10 / stab["maxrss_mb"]
    measured = (
        f"the peer did not fit at 10M; its 1M peak x 10 ({small['maxrss_mb'] * 10:,.0f} MB) "
        f"over stab's {stab['maxrss_mb']:,.0f} MB = {guess:.1f}x (an estimate)"
    )
    return Target(name, requirement, measured, None, (c10,))


def _rss_target(results: dict, case: str, ranks: str) -> Target:
    requirement = f"peak RSS, 10M rows ({ranks}) <= 2x the Arrow size of the columns used"
    stab, projection = _get(results, case, "stab"), _get(results, case, "projection")
    if stab is None or projection is None or "arrow_bytes" not in projection["output"]:
        return Target(f"rss-{ranks}", requirement, "not measured", None, (case,))
    arrow_mb = projection["output"]["arrow_bytes"] / 2**20
    ratio = stab["maxrss_mb"] / arrow_mb
    measured = f"{stab['maxrss_mb']:.0f} MB / {arrow_mb:.0f} MB = {ratio:.2f}x"
    return Target(f"rss-{ranks}", requirement, measured, ratio <= 2.0, (case,))


def _seconds(subject: dict | None) -> str:
    if subject is None:
        return "-"
    return "failed" if subject.get("failed") else f"{subject['seconds']:.2f}"


def _megabytes(size_mb: float) -> str:
    if not size_mb:
        return "-"
    return f"{size_mb:,.0f}" if size_mb >= 1 else f"{size_mb:.2f}"


def main_rows(run: dict) -> list[list[str]]:
    by_case: dict[str, list[str]] = {}
    for target in targets(run):
        for case in target.cases:
            by_case.setdefault(case, []).append(f"{target.name} {target.result}")
    rows = []
    results_by_case = {r["case"]: r for r in run["results"]}
    for r in run["results"]:
        s = r["subjects"]
        stab, floor, pandas = s.get("stab"), s.get("floor"), s.get("pandas")
        ratio = pandas_ratio = "-"
        if _get(results_by_case, r["case"], "stab") and _get(results_by_case, r["case"], "floor"):
            ratio = f"{stab['seconds'] / floor['seconds']:.2f}x"
        if _get(results_by_case, r["case"], "stab") and _get(results_by_case, r["case"], "pandas"):
            pandas_ratio = f"{pandas['seconds'] / stab['seconds']:.1f}x"
        rows.append(
            [
                r["case"] + (" (earlier run)" if r.get("earlier") else ""),
                f"{r['rows']:,}" if r["rows"] else "-",
                _megabytes(r["file_mb"]),
                _seconds(stab),
                floor["label"] if floor else "-",
                _seconds(floor),
                ratio,
                _seconds(pandas),
                pandas_ratio,
                f"{stab['maxrss_mb']:,.0f}" if stab else "-",
                f"{floor['maxrss_mb']:,.0f}" if floor else "-",
                "; ".join(by_case.get(r["case"], [])) or "-",
            ]
        )
    return rows


MAIN_HEADER = [
    "case",
    "rows",
    "file MB",
    "stab s",
    "floor",
    "floor s",
    "stab/floor",
    "pandas s",
    "pandas/stab",
    "RSS stab MB",
    "RSS floor MB",
    "targets",
]
BASELINE_HEADER = ["case", "command", "median s", "x stab", "peak RSS MB", "runs: seconds"]


def baseline_rows(run: dict) -> list[list[str]]:
    rows = []
    for r in run["results"]:
        stab = r["subjects"].get("stab")
        for subject in r["subjects"].values():
            versus = "-"
            if stab and not stab.get("failed") and not subject.get("failed"):
                versus = f"{subject['seconds'] / stab['seconds']:.2f}"
            rows.append(
                [
                    r["case"],
                    subject["label"],
                    _seconds(subject),
                    versus,
                    f"{subject['maxrss_mb']:,.0f}",
                    ", ".join(f"{t:.2f}" for t in subject["seconds_all"]),
                ]
            )
    return rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*row) for row in [header, *rows])


def text(run: dict) -> str:
    target_rows = [[t.name, t.requirement, t.measured, t.result] for t in targets(run)]
    return "\n\n".join(
        [
            _text_table(MAIN_HEADER, main_rows(run)),
            _text_table(["target", "requirement", "measured", "result"], target_rows),
            _text_table(BASELINE_HEADER, baseline_rows(run)),
        ]
    )


def _load_words(m: dict) -> str:
    """A load above the core count means other jobs shared the machine; at or under it, the
    benchmark's own commands (up to both cores) account for it."""
    peak = max(m["load_start"][0], m["load_end"][0])
    if peak > m["nproc"]:
        return "(over the core count: other jobs ran beside it)"
    return "(at or under the core count, which the benchmark's own commands can make)"


def _earlier(run: dict) -> list[str]:
    lines = []
    for number, e in enumerate(run.get("earlier_runs", []), start=1):
        kept = ", ".join(r["case"] for r in run["results"] if r.get("earlier") == number)
        if not kept:
            continue
        lines.append(
            f"* Cases kept from an earlier run ({e['machine']['date_utc']} UTC, load average "
            f"{e['machine']['load_start'][0]:.2f} to {e['machine']['load_end'][0]:.2f}, "
            f"`{e['command']}`, {e['machine'].get('label') or e['machine']['commit']}): {kept}"
        )
    return lines


def markdown(run: dict) -> str:
    m = run["machine"]
    found = targets(run)
    judged = [t for t in found if t.ok is not None]
    passed = sum(bool(t.ok) for t in judged)
    dirty = " (with uncommitted changes under stabilitycli/)" if m["stab_sources_dirty"] else ""
    scale = (
        ""
        if run["scale"] == 1
        else f" **Sizes scaled by {run['scale']:g} (a smoke run, not the issue's sizes).**"
    )
    notes = [n for r in run["results"] for n in r["notes"]]
    notes += [
        f"{r['case']}: `{s['label']}` failed: {s['failed']}"
        for r in run["results"]
        for s in r["subjects"].values()
        if s.get("failed")
    ]
    head = [
        "# Performance of `stab` against the floor (issues #15 and #40)",
        "",
        "Written by `benchmarks/run.py`; rerun it rather than editing this file.",
        "",
        f"* Command: `{run['command']}`.{scale}",
        *(
            ["* **Stopped before its last case: the cases below are those it finished.**"]
            if run.get("partial")
            else []
        ),
        f"* Date (UTC): {m['date_utc']} · machine: `nproc` = {m['nproc']}, Python {m['python']}, "
        f"polars {m['polars']}, pyarrow {m['pyarrow']}",
        f"* Measured: {m.get('label') or 'stab at commit ' + m['commit'] + dirty}; the console "
        f"script importing `{m['stab_imported_from']}`",
        f"* Medians of interleaved runs (the commands of a case take turns; how many runs "
        "each is in the last table; start-up cases: 5 per repeat, after a warm-up); 1-minute "
        f"load average {m['load_start'][0]:.2f} at the start, {m['load_end'][0]:.2f} at the end "
        f"{_load_words(m)}",
        *_earlier(run),
        *(
            f"* stab's environment: `{key}={value}` (its default refuses inputs over 2 GiB, "
            "and the 30M-row logs are 4.6 GB)"
            for key, value in m.get("stab_env", {}).items()
        ),
        *(f"* Note: {n}" for n in notes),
        "",
        f"**{passed} of {len(judged)} targets measured pass.**",
        "",
        "## Targets",
        "",
        _markdown_table(
            ["target", "requirement", "measured", "result"],
            [[t.name, t.requirement, t.measured, t.result] for t in found],
        ),
        "",
        "## Cases",
        "",
        "Times are wall seconds of a whole process (start-up and imports included), "
        "peak RSS that process's own. stab/floor: how many times the floor's time stab takes; "
        "pandas/stab: how many times stab's time the pandas peer takes.",
        "",
        _markdown_table(MAIN_HEADER, main_rows(run)),
        "",
        "## Every command",
        "",
        "x stab: the command's median time over stab's in the same case.",
        "",
        _markdown_table(BASELINE_HEADER, baseline_rows(run)),
        "",
    ]
    return "\n".join(head)
