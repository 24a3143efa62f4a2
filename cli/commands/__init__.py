"""The ``vlgate`` subcommands, one :class:`~vlgate.cli.commands.base.Command` each, in the
order ``vlgate --help`` lists them."""

from __future__ import annotations

from vlgate.cli.commands.approvals import Approve, Reject
from vlgate.cli.commands.base import Command
from vlgate.cli.commands.cache import Cache
from vlgate.cli.commands.local import Check, CheckModel, Correlate, Demo, Evaluate, Examples, Init, MakeWorld, Score, VllmLayout
from vlgate.cli.commands.reading import Diff, History, Plan, Report
from vlgate.cli.commands.registered import Drift, Gate, Notify, Register, Release, Serve, Status, Validate
from vlgate.cli.commands.stack import Stack

COMMANDS: tuple[Command, ...] = (
    Score(),
    Correlate(),
    MakeWorld(),
    Evaluate(),
    CheckModel(),
    Check(),
    VllmLayout(),
    Demo(),
    Examples(),
    Status(),
    Release(),
    Register(),
    Validate(),
    Gate(),
    Approve(),
    Reject(),
    History(),
    Diff(),
    Report(),
    Init(),
    Plan(),
    Drift(),
    Notify(),
    Serve(),
    Stack(),
    Cache(),
)
