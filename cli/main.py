"""The ``vlgate`` command line: the commands of ``vlgate.cli.commands``, each parsed,
run and printed the same way.

Errors a user can fix (bad records, a missing column, a missing file, a configuration that
does not load) print one line on stderr, ``vlgate COMMAND: what and where``, and exit with
status 2; no traceback. Every other answer is printed by :func:`render`.

What reaches the terminal as text may quote data (a question, a model's answer, a model
name): a text answer is printed through ``cli/terminal.py``'s ``visible_stdout`` and an
error line through ``vlgate/text.py``'s ``visible``, so control characters and bidi
overrides in it are shown as escapes, never acted on. ``--json`` is printed as it is.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from vlgate.cli.commands import COMMANDS
from vlgate.cli.commands.base import EXIT_BAD_INPUT, Answer, UserError, print_json
from vlgate.config import ConfigError
from vlgate.text import visible


def build_parser(command_name: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command. Given ``command_name`` (the command a command line
    names), only that command's arguments are built: the others keep their name and help,
    which is all ``vlgate --help`` and an unknown command's error show, and none of the
    imports some commands' arguments need (the evaluators' names) is paid by another."""
    from vlgate import __version__

    parser = argparse.ArgumentParser(
        prog="vlgate",
        description="Continuous validation of vision-language models: score records, correlate metrics, run the gate.",
    )
    parser.add_argument("--version", action="version", version=f"vlgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(commands, with_arguments=command_name in (None, command.name))
    return parser


def named_command(argv: Sequence[str]) -> str | None:
    """The command a command line names: its first word that is not an option (the
    top-level options, ``--help`` and ``--version``, take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def render(answer: Answer, as_json: bool) -> int:
    """An answer on stdout: its text form unless ``--json`` was asked or it has none; its exit status."""
    if answer.text is not None and not as_json:
        from vlgate.cli.terminal import visible_stdout

        with visible_stdout():
            answer.text()
    elif answer.data is not None:
        print_json(answer.data)
    return answer.status


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(named_command(words)).parse_args(words)
    try:
        answer = args.command_object.run(args)
    except (UserError, ConfigError) as exc:  # a config file read by any command is the user's input too
        for line in getattr(exc, "details", ()):
            print(visible(str(line)), file=sys.stderr)
        print(visible(f"vlgate {args.command}: {exc}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    return render(answer, getattr(args, "json", False))


def console_main() -> int:
    """The ``vlgate`` console script: :func:`main`, then everything the command built is
    left to the operating system. The interpreter's last garbage collection at exit walks
    every object MLflow, Prefect and Great Expectations made (benchmarks/RESULTS.md has
    what it cost `vlgate validate`); frozen objects are skipped. Exit handlers still run (Prefect's log and event
    workers drain in them), and vlgate closes its files and connections itself."""
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(console_main())
