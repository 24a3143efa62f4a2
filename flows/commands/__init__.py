"""The ``vlgate`` subcommands, one :class:`~vlgate.flows.commands.base.Command` each, in the
order ``vlgate --help`` lists them."""

from __future__ import annotations

from vlgate.flows.commands.base import Command
from vlgate.flows.commands.local import Check, CheckModel, Correlate, Demo, Evaluate, Examples, Init, MakeWorld, Score, VllmLayout
from vlgate.flows.commands.registered import Diff, Drift, Gate, Plan, Register, Release, Report, Serve, Status, Validate
from vlgate.flows.commands.stack import Stack

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
    Diff(),
    Report(),
    Init(),
    Plan(),
    Drift(),
    Serve(),
    Stack(),
)
