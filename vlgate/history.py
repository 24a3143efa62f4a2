"""A model's decisions over time (``vlgate history``): every version's decision records in
order, and the champion alias's moves made from them — which version held it from when to
when, and the record that moved it there.

The records are the history: each one that moved the alias says so (``alias_moved``, with
``judged_at``), so the timeline is read from them alone. An alias moved outside vlgate (by
hand in MLflow's UI, or by another tool) has no record; where today's champion is not the
version the latest recorded move of any version put there, the history says so instead of
inventing a move. The timeline and that verdict are always read from every version's
records, also where one version's records alone are shown: the move that explains today's
champion (a later version promoted, an approval, a re-judgement) is often another's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, JsonValue

from vlgate.decisions import DecisionKind, DecisionRecord, Outcome

_VALUE = ConfigDict(frozen=True, extra="forbid")


class VersionHistory(BaseModel):
    """One version's decision records, the first first (``run_id``: its validation run; None: none yet)."""

    model_config = _VALUE

    version: str
    run_id: str | None
    records: list[DecisionRecord]


class ChampionSpell(BaseModel):
    """A version holding the champion alias: since the record that moved it there (its
    number on the version's run, which judgement it was and its outcome), until the next
    recorded move (None: it holds it still, or it was moved outside vlgate)."""

    model_config = _VALUE

    version: str
    since: datetime
    until: datetime | None
    record: int | None
    kind: DecisionKind | None
    outcome: Outcome


class ModelHistory(BaseModel):
    """What ``vlgate history NAME [VERSION]`` shows: every version's records (or the asked
    version's alone), the champion's spells and today's champion, and whether the alias
    was moved outside vlgate since the latest recorded move (``moved_outside``); the last
    two read from every version's records."""

    model_config = _VALUE

    model: str
    versions: list[VersionHistory]
    timeline: list[ChampionSpell]
    champion: str | None
    moved_outside: bool

    def as_json(self) -> dict[str, JsonValue]:
        return self.model_dump(mode="json")


def champion_timeline(versions: Sequence[VersionHistory]) -> list[ChampionSpell]:
    """The alias's recorded moves in time order, each a spell until the next one."""
    moves = sorted(
        ((record.judged_at, history.version, record) for history in versions for record in history.records if record.alias_moved and record.judged_at is not None),
        key=lambda move: (move[0], int(move[1]) if move[1].isdigit() else 0),
    )
    spells = []
    for n, (since, version, record) in enumerate(moves):
        until = moves[n + 1][0] if n + 1 < len(moves) else None
        spells.append(ChampionSpell(version=version, since=since, until=until, record=record.sequence, kind=record.kind, outcome=record.outcome))
    return spells


def model_history(model: str, versions: Sequence[VersionHistory], champion: str | None, only: str | None = None) -> ModelHistory:
    """The history of ``model`` from every one of its versions' records (``versions``: all
    of them, never a selection) and today's ``champion``; ``only``: that version's records
    alone are listed, the timeline and ``moved_outside`` still read from every version's."""
    timeline = champion_timeline(versions)
    recorded = timeline[-1].version if timeline else None
    shown = [history for history in versions if only is None or history.version == only]
    return ModelHistory(model=model, versions=shown, timeline=timeline, champion=champion, moved_outside=champion != recorded)
