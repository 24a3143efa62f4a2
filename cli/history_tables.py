"""``vlgate history`` for a person: the decision records as one table, the champion's
timeline as another; on output too narrow for a table (a terminal or a pipe of 80
columns), each as a list, a line per record, so that no header or value is cut. Every
value that holds data (versions, users, hosts) is shown as written, with control
characters escaped (``cli/terminal.py``)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from vlgate.cli.terminal import data_text, terminal_console
from vlgate.history import ModelHistory

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "—"


def _fits(console: Console, table: Table) -> bool:
    """Whether ``table`` shows every header and cell whole at the console's width (rich
    measures within the width it is given: asked about a wide one, it says what it needs)."""
    return console.measure(table, options=console.options.update_width(10_000)).maximum <= console.width


def print_history(history: ModelHistory) -> None:
    from rich.table import Table

    # (version, record, judgement, outcome, champion before, after, alias moved, judged at, by); None: not judged yet
    rows: list[tuple[str, tuple[str, ...] | None]] = []
    for version in history.versions:
        if not version.records:
            rows.append((version.version, None))
        for record in version.records:
            judge = record.judged_by
            by = (judge.user or judge.process) if judge is not None else "—"
            rows.append((version.version, (
                str(record.sequence or "—"), record.kind.value if record.kind else "—", record.outcome.value, record.champion_before or "none",
                record.champion_after or "none", "yes" if record.alias_moved else "", _when(record.judged_at), by,
            )))  # fmt: skip
    records = Table(title=data_text(f"{history.model}: decision records"))
    for column in ("version", "record", "judgement", "outcome", "champion before", "after", "alias moved", "judged at", "by"):
        records.add_column(column)
    for shown, row in rows:
        records.add_row(data_text(shown), *(data_text(cell) for cell in (row or ("—", "not judged yet", "", "", "", "", "", ""))))
    timeline = Table(title=data_text(f"{history.model}: who held the champion alias"))
    for column in ("version", "since", "until", "moved by"):
        timeline.add_column(column)
    spells = [
        (spell.version, _when(spell.since), _when(spell.until) if spell.until else "holds it" if spell.version == history.champion else "— (moved outside vlgate)",
         f"record {spell.record} ({spell.kind.value if spell.kind else 'judgement'}: {spell.outcome.value})")
        for spell in history.timeline
    ]  # fmt: skip
    for holder, since, until, moved_by in spells:
        timeline.add_row(data_text(holder), since, until, moved_by)
    console = terminal_console()
    if _fits(console, records):
        console.print(records)
    else:
        console.print(data_text(f"{history.model}: decision records"))
        for shown, row in rows:
            if row is None:
                console.print(data_text(f"  v{shown}: not judged yet"))
                continue
            sequence, kind, outcome, before, after, moved, when, by = row
            line = f"  v{shown} record {sequence}: {kind} → {outcome}; champion {before} → {after}{', alias moved' if moved else ''}; {when} by {by}"
            console.print(data_text(line), soft_wrap=True)  # a record a line, however long: the terminal wraps it, nothing is cut
    if _fits(console, timeline):
        console.print(timeline)
    else:
        console.print(data_text(f"{history.model}: who held the champion alias"))
        for holder, since, until, moved_by in spells:
            console.print(data_text(f"  v{holder}: since {since}, until {until}; moved by {moved_by}"), soft_wrap=True)
    if history.moved_outside:
        shown = f"v{history.champion}" if history.champion else "no version"
        console.print(data_text(f"the alias now names {shown}: moved outside vlgate since the last recorded move (no record says why)"))
