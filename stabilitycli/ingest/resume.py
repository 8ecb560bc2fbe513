"""Which of several run folders continue an earlier one, and which are runs of their own.

Trackers that start a new folder each time a job starts (Lightning's
`version_N`, the Hugging Face Trainer's `runs/<date>_<host>`, any TensorBoard
log dir per launch) leave a resumed job in two folders, and a job started again
from scratch in two folders too. Only the steps tell them apart:

* a folder that starts from the beginning - its first step no later than its
  own logging interval (0, or the first logging step), or no later than where
  the earlier run started - is a new run;
* a folder that starts later, inside an earlier run's steps (or right after its
  last one, within two logging intervals: the checkpoint may be the last thing
  the killed job wrote), continues that run: a resume;
* a folder that starts later but outside every earlier run's steps has lost its
  beginning; it is read as a run of its own rather than glued to a run it may
  not belong to.

Each decision carries its reason in words, for the notes a user reads.
"""

from __future__ import annotations

from dataclasses import field
from itertools import pairwise

from stabilitycli.core.records import dataclass


@dataclass(frozen=True)
class Part:
    """One folder's step range, in the order the folders were written."""

    name: str
    first: int
    last: int
    interval: int  # the usual gap between logged steps (1 when unknown)

    def span(self) -> str:
        return f"steps {self.first}–{self.last}"

    def starts_fresh(self) -> bool:
        return self.first <= max(self.interval, 0)


@dataclass
class Group:
    """Folders read as one run: the first started it, each later one resumed it."""

    parts: list[Part]
    lost_start: bool = False  # started after step 0 with nothing here to resume
    why: list[str] = field(default_factory=list)  # one reason per resumed part

    @property
    def first(self) -> int:
        return min(p.first for p in self.parts)

    @property
    def last(self) -> int:
        return max(p.last for p in self.parts)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parts]

    def label(self) -> str:
        """The run by its last folder, the one that names it to `--run` or a path."""
        if len(self.parts) == 1:
            return self.parts[0].name
        return f"{self.parts[-1].name} (resumes {', '.join(self.names[:-1])})"


def interval_of(steps: list[int]) -> int:
    """The median gap between distinct logged steps: a run's logging interval."""
    distinct = sorted(set(steps))
    gaps = sorted(b - a for a, b in pairwise(distinct))
    return gaps[len(gaps) // 2] if gaps else 1


def part_of(name: str, steps: list[int]) -> Part | None:
    """A folder's Part from the steps it logged in file order; None when it logged none."""
    if not steps:
        return None
    return Part(name, steps[0], max(steps), interval_of(steps))


def _continues(group: Group, part: Part) -> bool:
    slack = 2 * max(max(p.interval for p in group.parts), part.interval, 1)
    return group.first < part.first <= group.last + slack


def chain(parts: list[Part]) -> list[Group]:
    """Group folders, given in the order they were written, into runs."""
    groups: list[Group] = []
    for part in parts:
        if not groups or part.starts_fresh() or part.first <= min(g.first for g in groups):
            groups.append(Group([part]))
            continue
        # the most recent run whose steps it falls in: a resume of that run
        home = next((g for g in reversed(groups) if _continues(g, part)), None)
        if home is None:
            groups.append(Group([part], lost_start=True))
            continue
        before = home.parts[-1]
        where = (
            f"its first step {part.first} is inside {before.name}'s {before.span()}"
            if part.first <= home.last
            else f"it starts at step {part.first}, right after {before.name}'s {before.span()}"
        )
        home.parts.append(part)
        home.why.append(f"{part.name} resumes {before.name}: {where}")
    return groups


def describe(groups: list[Group]) -> list[str]:
    """What was taken for a resume and what for a new run, and why, in a few lines."""
    notes = [why for g in groups for why in g.why]
    fresh = [g.parts[0] for g in groups[1:] if not g.lost_start]
    if fresh:
        steps = sorted({p.first for p in fresh})
        notes.append(
            f"{_names([p.name for p in fresh])}: new run(s), not resumes: each starts from the "
            f"beginning (step {', '.join(map(str, steps))}), so no checkpoint was loaded"
        )
    lost = [g.parts[0] for g in groups if g.lost_start]
    if lost:
        notes.append(
            f"{_names([p.name for p in lost])}: read as run(s) of their own: each starts "
            "after step 0 but outside the steps of every earlier folder, so what it resumed "
            "is not here"
        )
    return notes


def _names(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def group_of(groups: list[Group], name: str) -> Group | None:
    return next((g for g in groups if name in g.names), None)
