"""The output formats of `stab analyze`, each mapped to its renderers.

One table instead of a branch per format in the command: adding a format is
one member here and one entry in `_RENDERERS`, and the test that renders a
real Analysis in every member of `Format` fails until both exist.

A renderer returns either the exact text to write (trailing newline
included) or, for the terminal, a rich renderable the caller prints on its
console (rich picks colours and width from the terminal it writes to). The
renderer modules are imported on first use: `stab --help` imports this module
for the option's choices and must stay instant.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from stabilitycli.core.model import Analysis, Severity
from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from rich.console import RenderableType

    from stabilitycli.pipeline.batch import RunResult

    Rendered = str | RenderableType


class Format(StrEnum):
    terminal = "terminal"
    json = "json"
    github = "github"
    junit = "junit"
    markdown = "markdown"
    concise = "concise"

    def render(
        self, analysis: Analysis, fail_on: Severity = Severity.ERROR, verbosity: str = "normal"
    ) -> Rendered:
        """One run. `fail_on` decides which findings JUnit counts as failures; `verbosity`
        ("quiet", "normal", "verbose") how much the terminal and concise formats say."""
        return _RENDERERS[self].one(analysis, fail_on, verbosity)

    def render_many(self, results: list[RunResult]) -> Rendered:
        """Several runs (`stab analyze a b c`, `--recursive`): a summary plus each run's part."""
        return _RENDERERS[self].many(results)

    def fragment_renderer(self, fail_on: Severity) -> Callable[[Any], str] | None:
        """For batch workers: a picklable renderer of one run's CI fragment, or None.

        The CI formats render each run in its worker, where the Analysis is; the
        others need only the run's JSON document, which every worker sends back.
        """
        if not _RENDERERS[self].fragment:
            return None
        from stabilitycli.report.batch_report import fragment_renderer

        return fragment_renderer(self.value, str(fail_on))


@dataclass(frozen=True)
class _Renderers:
    one: Callable[[Analysis, Severity, str], Rendered]
    many: Callable[[list[RunResult]], Rendered]
    fragment: bool = False


def _terminal(analysis: Analysis, fail_on: Severity, verbosity: str) -> Rendered:
    from stabilitycli.report import terminal

    return terminal.build(analysis, verbosity)


def _concise(analysis: Analysis, fail_on: Severity, verbosity: str) -> Rendered:
    from stabilitycli.report import concise

    return concise.render(analysis, quiet=verbosity == "quiet")


def _json(analysis: Analysis, fail_on: Severity, verbosity: str) -> Rendered:
    from stabilitycli.report import json_report

    return json_report.render(analysis) + "\n"


def _github(analysis: Analysis, fail_on: Severity, verbosity: str) -> Rendered:
    from stabilitycli.report import github

    return github.render(analysis)


def _junit(analysis: Analysis, fail_on: Severity, verbosity: str) -> Rendered:
    from stabilitycli.report import junit

    return junit.render(analysis, fail_on)


def _markdown(analysis: Analysis, fail_on: Severity, verbosity: str) -> Rendered:
    from stabilitycli.report import markdown

    return markdown.render(analysis)


def _many(name: str) -> Callable[[list[RunResult]], Rendered]:
    def render(results: list[RunResult]) -> Rendered:
        from stabilitycli.report import batch_report

        renderer: Callable[[list[RunResult]], Rendered] = getattr(batch_report, name)
        return renderer(results)

    return render


_RENDERERS: dict[Format, _Renderers] = {
    Format.terminal: _Renderers(_terminal, _many("terminal_table")),
    Format.json: _Renderers(_json, _many("jsonl")),
    Format.github: _Renderers(_github, _many("github"), fragment=True),
    Format.junit: _Renderers(_junit, _many("junit"), fragment=True),
    Format.markdown: _Renderers(_markdown, _many("markdown"), fragment=True),
    Format.concise: _Renderers(_concise, _many("concise"), fragment=True),
}
