"""What a ``vlgate`` command is: a small object naming itself, its help and its arguments
beside the handler that runs it (:class:`Command`), and what every handler returns
(:class:`Answer`): the result as JSON values, an optional text rendering of it, and the
exit status. ``vlgate.cli.main`` prints every answer the same way (``--json`` or a command
without a text form: the JSON; otherwise the text) and turns every :class:`UserError` into
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient

    from vlgate.flows.context import ServiceContext
    from vlgate.versions import VersionRef

EXIT_BAD_INPUT = 2
#: `vlgate validate` and `vlgate gate`: 0 promoted; the version was judged and rejected;
#: it could not be judged (an evaluator, a metric or the champion's records missing, or
#: the flow failed); inconclusive (a comparison with the champion too uncertain to decide:
#: more shared samples would)
EXIT_REJECTED = 3
EXIT_NOT_JUDGED = 4
EXIT_INCONCLUSIVE = 5
#: every rule passed and the policy wants a person's sign-off (``vlgate approve``)
EXIT_AWAITING_APPROVAL = 6
#: `vlgate check-model`: a fast path vlgate would use on this model is not exact
EXIT_NOT_EXACT = 1
EXIT_CODES = f"0 promoted, {EXIT_REJECTED} rejected (a rule failed on the numbers), {EXIT_NOT_JUDGED} could not judge"


def exit_status(outcome: str) -> int:
    """A decision's outcome as ``validate``'s and ``gate``'s exit status."""
    from vlgate.decisions import Outcome

    codes: dict[str, int] = {Outcome.PROMOTED: 0, Outcome.COULD_NOT_JUDGE: EXIT_NOT_JUDGED, Outcome.INCONCLUSIVE: EXIT_INCONCLUSIVE, Outcome.AWAITING_APPROVAL: EXIT_AWAITING_APPROVAL}
    return codes.get(outcome, EXIT_REJECTED)


class UserError(Exception):
    """A problem with what the user gave us: printed as one line, exit status 2. ``details``
    (one line each, e.g. every invalid record of a file) are printed on stderr before it."""

    def __init__(self, message: str, details: tuple[str, ...] = ()):
        super().__init__(message)
        self.details = details


@dataclass(frozen=True)
class Answer:
    """What a command prints and its exit status. ``data`` is the result as JSON values
    (None: the command printed what it had to itself); ``text`` prints it for a person
    (None: the JSON is the only form)."""

    data: object
    status: int = 0
    text: Callable[[], None] | None = None


def print_json(payload: object) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, allow_nan=False) + "\n")


class Command:
    """One ``vlgate`` subcommand: its name, one-line help and description, its arguments
    (:meth:`add_arguments`) and its handler (:meth:`run`). A command with a text form
    declares ``json_help`` and gets a ``--json`` flag."""

    name: ClassVar[str]
    help: ClassVar[str]
    description: ClassVar[str]
    #: what ``--json`` prints; None: the command has no text form (its output is JSON)
    json_help: ClassVar[str | None] = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The command's arguments (none by default)."""

    def run(self, args: argparse.Namespace) -> Answer:
        raise NotImplementedError

    def add_to(self, commands: argparse._SubParsersAction[argparse.ArgumentParser], *, with_arguments: bool = True) -> None:
        """This command's parser, added to the subparsers ``commands``; without its
        arguments where ``with_arguments`` is false (a command line naming another command)."""
        parser = commands.add_parser(self.name, help=self.help, description=self.description)
        parser.set_defaults(command_object=self)
        if not with_arguments:
            return
        self.add_arguments(parser)
        if self.json_help is not None:
            parser.add_argument("--json", action="store_true", help=self.json_help)


def service_context() -> ServiceContext:
    """``$VLGATE_HOME``'s service context (``flows/context.py``), its MLflow server
    answering: an operator command on a tracking server that does not answer gets one line,
    at once."""
    from vlgate import tracking
    from vlgate.flows.context import ServiceContext

    context = ServiceContext.open()
    try:
        tracking.require_reachable(tracking.tracking_uri(context.home))
    except tracking.TrackingUnreachable as error:
        raise UserError(str(error)) from None
    return context


def version_number(text: str, what: str = "version") -> str:
    """A version given on the command line in its canonical form (``vlgate/versions.py``);
    anything else is the user's mistake, found before a server starts or a claim is made."""
    from vlgate.versions import VersionError, canonical_version

    try:
        return canonical_version(text)
    except VersionError as error:
        raise UserError(f"{what} {text!r}: {str(error).split(': ', 1)[1]}") from None


def version_ref(model_name: str, text: str, what: str = "version") -> VersionRef:
    """``model_name``'s version given on the command line (:func:`version_number`), as
    vlgate hands a version down (``vlgate/versions.py``)."""
    from vlgate.versions import VersionRef

    return VersionRef(model=model_name, version=version_number(text, what))


def registered_version(client: MlflowClient, subject: VersionRef) -> ModelVersion:
    """The registry's ``ModelVersion``; a version that does not exist is the user's mistake.
    Anything else (the registry away) is raised as it is."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version(subject.model, subject.version)
    except MlflowException as error:
        if error.error_code == "RESOURCE_DOES_NOT_EXIST":
            raise UserError(f"{subject}: no such registered version") from None
        raise
