"""The `stab` command line: the typer app, the sub-commands it registers, `main()`.

Each sub-command lives in `stabilitycli/commands/<name>.py` and exposes
`command`; this module only registers them (each built when first asked for: `stab
analyze` imports and builds `analyze` alone) and adds `--version`, `-h` and
shell completion (`stab --install-completion` / `--show-completion`). No
thresholds and no detection logic here, and polars is never imported at
module level (here or in `commands/`), so `stab --help` and every TAB a shell
asks to complete stay instant; nor is pydantic, which typer would import to
convert option values that need no converting (`commands/_params.py`). `main()` also
sets the memory allocators of polars and pyarrow and the block polars reads NDJSON in
(`ALLOCATOR_SETTINGS`: the command's only, and why), holds glibc's own to one arena
(`one_malloc_arena`), and sets how often the garbage collector runs (`core.collector`;
`entry.main`, the console script, sets it before typer is imported).
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import sys
from collections.abc import Callable, Iterator, MutableMapping
from typing import Annotated, Any

import typer
from typer import _click

from stabilitycli import __version__

# Command, Group: commands whose options need no pydantic when their values need no
# converting; built on typer internals, so pyproject.toml pins typer to the minor version
# tests/commands/test_cli_params.py checks them on
from stabilitycli.commands._params import Command, Group
from stabilitycli.core.collector import collect_less
from stabilitycli.core.exit_codes import ExitCode

# `-h` as well as `--help`, on `stab` and on every command
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}


class _Commands(MutableMapping[str, _click.Command]):
    """`stab`'s commands by name, in `COMMANDS` order, each built (its module imported and
    its options made) when it is first asked for: `stab analyze` builds `analyze` alone,
    where building every command took 3% of its instructions; `stab --help` and shell
    completion still build every one. A command added (`add_command`) is kept as given."""

    def __init__(self, given: dict[str, _click.Command]) -> None:
        self._names = [*COMMANDS, *(name for name in given if name not in COMMANDS)]
        self._built = dict(given)

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._built:
            self._built[name] = _build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        if name not in self._names:
            self._names.append(name)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._names:
            raise KeyError(name)
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)


class _Stab(Group):
    """`stab` itself, its commands built as they are asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(dict(self.commands))

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(self.commands)  # the names alone: nothing built to list them


app = typer.Typer(
    cls=_Stab,
    context_settings=HELP_OPTIONS,
    no_args_is_help=True,
    help="stab: read an ML training run's metric logs and say what went wrong.\n\n"
    "Exit status: 0 nothing at/above --fail-on, 1 instability found, 2 bad input or usage.",
)

# in the order `stab --help` lists them
COMMANDS: tuple[str, ...] = (
    "analyze",
    "explain",
    "ranks",
    "compare",
    "postmortem",
    "report",
    "summary",
    "watch",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"stab {__version__}")
        raise typer.Exit(ExitCode.OK)


# the options' types by name: typer reads a string annotation by evaluating it, and a name
# is compiled in a few instructions where the whole `Annotated[...]` with its help text was
# compiled anew at every start-up (~3M instructions; #40)
VersionOpt = Annotated[
    bool,
    typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
]
DebugOpt = Annotated[
    bool,
    typer.Option(
        "--debug",
        help="On an internal error or an unreadable input, print the Python traceback "
        "before the one-line message (also: STAB_DEBUG=1). The exit status stays 2.",
    ),
]
WidthOpt = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=20,
        metavar="COLUMNS",
        help="Lay the terminal output out at this width, panels included (also: COLUMNS). "
        "Piped without it: plain lines of at most 100 columns.",
    ),
]


@app.callback()
def _options(version: VersionOpt = False, debug: DebugOpt = False, width: WidthOpt = None) -> None:
    """Options of `stab` itself, given before the command."""
    from stabilitycli.commands._common import DEBUG
    from stabilitycli.report.console import WIDTH

    DEBUG.set(debug)
    WIDTH.set(width)


def _guarded(name: str, command: Callable[..., None]) -> Callable[..., None]:
    """The command behind the one error boundary: whatever escapes it (a renderer's crash,
    a native panic, a RecursionError) is one line on stderr and exit 2, never a traceback
    with exit 1 (the status CI reads as "instability found")."""

    @functools.wraps(command)
    def run(*args, **kwargs) -> None:
        from stabilitycli.commands._common import DEBUG, boundary
        from stabilitycli.report.console import WIDTH

        try:
            command(*args, **kwargs)
        except BaseException as err:
            raise boundary(err, f"stab {name}") from None
        finally:
            # --debug and --width are this invocation's: an in-process caller's next call
            # starts without them
            DEBUG.set(False)
            WIDTH.set(None)

    return run


def _summary(doc: str | None) -> str | None:
    """A command's line in `stab --help`: its docstring's first paragraph as one line, so
    that it wraps at the terminal's width and never breaks where the source did."""
    if not doc:
        return None
    return " ".join(doc.strip().split("\n\n")[0].split())


def _build(name: str) -> _click.Command:
    """The command `name` as `app.command` would have registered it."""
    module = importlib.import_module(f"stabilitycli.commands.{name}")
    one = typer.Typer()
    one.command(
        name,
        cls=Command,
        short_help=_summary(module.command.__doc__),
        epilog=getattr(module, "EPILOG", None),
        context_settings=HELP_OPTIONS,
    )(_guarded(name, module.command))
    return typer.main.get_command_from_info(
        one.registered_commands[0],
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


# polars' allocator (jemalloc, read under _RJEM_MALLOC_CONF) keeps freed pages for 10 s
# by default: a rule's temporaries outlive it and stack on the next rule's, so a 10M-row
# log peaked about 0.2-0.7 GB higher. pyarrow (the Parquet and Arrow reader) defaults to
# mimalloc, whose peak while a 10M-row Parquet file is read varied from 1.5 to 1.8 GB
# between identical runs; its jemalloc returning pages at once held 1.0 GB every time. No
# slower on 10M rows. Set only where the user has not, and before either library loads;
# pyarrow ships jemalloc in its Linux wheels only.
#
# They are the `stab` command's only (and its batch workers', which inherit them), on
# purpose. Both libraries read them once, when they load, from the process environment:
# a library caller (`from stabilitycli import analyze`) has often loaded polars already,
# and setting them on `import stabilitycli` would change the memory of the caller's own
# polars and pyarrow work, and of every process it starts. A caller who wants stab's
# behaviour sets these variables before importing polars or pyarrow.
#
# polars' NDJSON reader parses a 16 MB piece of a large log (`ingest/jsonl/pieces.py`) in
# blocks of about 0.5 MB by default, a chunk of each column per block, left among the pages
# of its freed temporaries; the pieces then held 835 MB for 572 MB of columns (10M rows, 64
# ranks) unless each was copied into one chunk a column. Read 4 MB at a time it parses a
# piece into 4 chunks a column (still on every core) that pack as tightly as the copy did
# and need none (the read of 20M rows: 12.4 against 13.9 CPU s, 0.90M page faults against
# 1.08M). An internal polars setting, read at each read: where it is not honoured, the
# pieces are copied as before, the same frame either way.
ALLOCATOR_SETTINGS = {
    "_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0",
    "POLARS_FORCE_NDJSON_READ_SIZE": str(4 << 20),
    **(
        {
            "ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
            "JE_ARROW_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0",
        }
        if sys.platform == "linux"
        else {}
    ),
}

# glibc's mallopt option for the most arenas (malloc.h: M_ARENA_MAX)
_M_ARENA_MAX = -8


def one_malloc_arena() -> None:
    """Hold glibc's allocator, which numpy's arrays come from, to one arena.

    glibc gives a thread that allocates while another holds the lock an arena of its own
    (up to 8 a core), and memory freed in an arena stays with it. The reader's thread, a
    rule's chunk threads and the rules run at once each free temporaries of megabytes
    into their own arenas, which the next thread cannot reuse: a 10M-row log's peak was
    0.99-1.08 GB against 0.86-0.87 GB with one arena, the same document, and no slower
    (user and system time alike). Linux with glibc only, and only where the user has not
    set MALLOC_ARENA_MAX (glibc read it at start; this call would override it).
    """
    if sys.platform != "linux" or "MALLOC_ARENA_MAX" in os.environ:
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: nothing to set
        return
    mallopt(_M_ARENA_MAX, 1)


def main() -> None:
    if "polars" not in sys.modules and "pyarrow" not in sys.modules:
        for name, value in ALLOCATOR_SETTINGS.items():
            os.environ.setdefault(name, value)
    one_malloc_arena()
    # the command's own process only, as the allocators above: a library caller keeps its own
    # (already raised where `stab` started from `entry.main`, before typer was imported)
    collect_less()
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(ExitCode.INTERRUPTED)
    finally:
        # the interpreter's exit collects twice over everything still alive (the modules,
        # their classes and functions): a tenth of a small `stab analyze`. Frozen, they are
        # left to the exit's teardown, which frees them as it would. Not collected first: a
        # small run never reaches GC_FIRST_THRESHOLD, so all of start-up's objects were
        # still young and that one pass read some 9 * 10^4 of them to free a few hundred
        # (closures and classes imports leave in cycles, returned with the rest when the
        # process ends): 1.3% of a small `stab analyze`'s instructions but 7% of its CPU
        # time on a loaded machine, an object a cache miss. Nothing the commands write
        # waits on a collection: their files are closed where they are written
        gc.freeze()


if __name__ == "__main__":
    main()
