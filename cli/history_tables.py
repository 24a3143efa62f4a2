"""``vlgate history`` for a person: the decision records as one table, the champion's
timeline as another. Every cell that holds data (versions, users, hosts) is shown as
written, with control characters escaped (``cli/terminal.py``)."""

from __future__ import annotations

from datetime import datetime

from vlgate.cli.terminal import data_text, terminal_console
from vlgate.history import ModelHistory


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "—"


def print_history(history: ModelHistory) -> None:
    from rich.table import Table

    records = Table(title=data_text(f"{history.model}: decision records"))
    for column in ("version", "record", "judgement", "outcome", "champion before", "after", "alias moved", "judged at", "by"):
        records.add_column(column)
    for version in history.versions:
        if not version.records:
            records.add_row(data_text(version.version), "—", "not judged yet", "", "", "", "", "", "")
        for record in version.records:
            judge = record.judged_by
            by = (judge.user or judge.process) if judge is not None else "—"
            records.add_row(
                data_text(version.version), str(record.sequence or "—"), record.kind.value if record.kind else "—", record.outcome.value,
                data_text(record.champion_before or "none"), data_text(record.champion_after or "none"), "yes" if record.alias_moved else "",
                _when(record.judged_at), data_text(by),
            )  # fmt: skip
    timeline = Table(title=data_text(f"{history.model}: who held the champion alias"))
    for column in ("version", "since", "until", "moved by"):
        timeline.add_column(column)
    for spell in history.timeline:
        moved_by = f"record {spell.record} ({spell.kind.value if spell.kind else 'judgement'}: {spell.outcome.value})"
        until = _when(spell.until) if spell.until else "holds it" if spell.version == history.champion else "— (moved outside vlgate)"
        timeline.add_row(data_text(spell.version), _when(spell.since), until, moved_by)
    console = terminal_console()
    console.print(records)
    console.print(timeline)
    if history.moved_outside:
        shown = f"v{history.champion}" if history.champion else "no version"
        console.print(data_text(f"the alias now names {shown}: moved outside vlgate since the last recorded move (no record says why)"))
