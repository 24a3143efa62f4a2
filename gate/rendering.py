"""The words of the gate: every check's ``detail`` and a decision's ``reasons``, made from
the numbers the gate judged. The judging modules (``fixed.py``, ``sequential.py``) decide
on structured fields and ask here for the sentence; tests assert on the fields."""

from __future__ import annotations

from collections.abc import Sequence

from vlgate.decisions import Check, LookRecord, Rule, Verdict, Waiver
from vlgate.text import shell_command
from vlgate.versions import VersionRef

NO_RESULT = "no result (fail closed)"
EXPECTATIONS_PASSED = "passed"
METRIC_MISSING = "metric missing or undefined (fail closed)"
NO_CATEGORY_METRICS = "no per-category metrics (fail closed)"
NO_CATEGORY_RECORDS = "no per-category records (fail closed)"
NO_CHAMPION = "no champion yet: nothing to compare with"
RECORDS_MISSING = "per-sample records missing for the candidate or the champion (fail closed)"
TOO_FEW_TO_TEST = "not decided at this look: too few records to test"
UNDEFINED_AT_LOOK = "not decided at this look: the metric or its spread is undefined on these records"


def evaluator_ran(records: int) -> str:
    return f"{records} records"


def evaluator_failed(error: str) -> str:
    return f"failed: {error}"


def expectation_failures(evaluator: str, failures: Sequence[str], shown: int = 2) -> str:
    """The first failed expectations in a line (the validation report has them all)."""
    failures = [line.removeprefix(f"{evaluator} ") for line in failures]
    if not failures:
        return "failed expectations (see the validation report)"
    more = f"; {len(failures) - shown} more in the validation report" if len(failures) > shown else ""
    return "failed expectations: " + "; ".join(failures[:shown]) + more


def bound(value: float, limit: float, floor: bool, passed: bool) -> str:
    return f"{value:.4f} {'>=' if floor else '<='} {limit} {'holds' if passed else 'fails'}"


def too_few_records(records: int, min_samples: int) -> str:
    return f"skipped: {records} records < min_samples {min_samples}"


def protocols_differ(evaluator: str, candidate: str | None, champion: str | None) -> str:
    def named(protocol: str | None) -> str:
        return f"protocol {protocol}" if protocol else "no protocol"

    return (
        f"not comparable: the candidate's {evaluator} records were measured under {named(candidate)}, the champion's under {named(champion)} "
        "(fail closed; validate the champion again under the suite's protocol, or set the suite's protocol to the champion's)"
    )


def cannot_compare(n_shared: int) -> str:
    return f"cannot compare on {n_shared} shared samples (metric undefined or too few samples; fail closed)"


def _change(candidate: float, champion: float, n_shared: int, improvement: float, unit: str = "shared samples") -> str:
    return f"{candidate:.4f} vs {champion:.4f} on {n_shared} {unit}: change {improvement:+.4f}"


def _corrected(correction: str, p_value: float, family: int) -> str:
    return f"{correction}-adjusted p {p_value:.3g} over {family} comparisons" if correction != "none" and family > 1 else f"p {p_value:.3g}"


def _decide_with(samples_needed: int | None, unit: str) -> str:
    return f"about {samples_needed} {unit} would decide" if samples_needed else f"the estimate sits on the margin: no number of {unit.split()[-1]} decides"


def comparison(check: Check, improvement: float, confidence: float, correction: str, family: int) -> str:
    """A fixed-sample comparison's words, from its check: passed (its lower bound clears the
    margin), shown below it (failed: its ``p_value`` adjusted by ``correction`` over the
    ``family`` of comparisons), or inconclusive (the interval spans it: about how many shared
    samples would decide). ``improvement``: the candidate's estimated gain."""
    assert check.candidate is not None and check.champion is not None and check.n_shared is not None
    assert check.interval is not None and check.limit is not None and check.p_value is not None
    superiority, limit = check.rule is Rule.SUPERIORITY, check.limit
    head = _change(check.candidate, check.champion, check.n_shared, improvement)
    low, high = check.interval
    if check.verdict is Verdict.PASS:
        return f"{head}, {confidence:.0%} lower bound {low:+.4f} {'> ' if superiority else '>= '}{limit:+g} {'required' if superiority else 'allowed'}"
    corrected = _corrected(correction, check.p_value, family)
    if check.verdict is Verdict.FAIL:
        side = "not shown above" if superiority else "shown below"
        return f"{head} ({side} {limit:+g}: {corrected}), {confidence:.0%} lower bound {low:+.4f} {'<=' if superiority else '<'} {limit:+g} {'required' if superiority else 'allowed'}"
    return f"{head}, interval [{low:+.4f}, {high:+.4f}] spans {limit:+g} ({corrected}): inconclusive, {_decide_with(check.samples_needed, 'shared samples')}"


def look_place(look: LookRecord) -> str:
    return f"look {look.index + 1} of {look.of}, {look.fraction:.0%} of the items"


def not_decided_yet(detail: str) -> str:
    """A comparison that cannot be made on an interim look's few items waits for the next."""
    return f"not decided at this look: {detail}"


def look_test(check: Check, estimate: float, z: float, pass_level: float, where: str, last: bool) -> str:
    """A rule's words at a look of a sequential validation, from its check: shown beyond its
    limit (failed), shown within it (passed, at the look's ``pass_level``), inconclusive at
    the ``last`` look, or not decided yet. ``estimate``: what was tested (a ceiling's value
    negated), ``z`` its statistic, ``where`` the look (:func:`look_place`)."""
    assert check.limit is not None and check.n_shared is not None and check.p_value is not None
    items = check.n_shared
    if check.rule in (Rule.REGRESSION, Rule.SUPERIORITY) and check.candidate is not None and check.champion is not None:
        head = _change(check.candidate, check.champion, items, estimate)
    else:
        head = f"{-estimate if check.rule is Rule.CEILING else estimate:.4f} on {items} records"
    z_text = f"z {z:+.2f}"
    if check.verdict is Verdict.FAIL:
        return f"{head} ({z_text}, p {check.p_value:.3g}): shown beyond {check.limit:+g} at {where}"
    if check.verdict is Verdict.PASS:
        return f"{head} ({z_text}): shown within {check.limit:+g} at {where} (level {pass_level:.3g})"
    if last:
        return f"{head} ({z_text}): neither side of {check.limit:+g} shown at {where}: inconclusive, {_decide_with(check.samples_needed, 'items')}"
    return f"{head} ({z_text}): not decided at {where}"


def waived(detail: str, waiver: Waiver) -> str:
    return f"{detail}; WAIVED by {waiver.by} until {waiver.until.isoformat()}: {waiver.reason}"


def waiver_expired(detail: str, waiver: Waiver) -> str:
    return f"{detail} (waiver by {waiver.by} expired on {waiver.until.isoformat()})"


def alias_moved(subject: VersionRef, baseline: str | None, current: str) -> str:
    against = f"v{baseline}" if baseline else "no champion"
    command = shell_command("vlgate", "gate", subject.model, subject.version, "--against-current", "--apply")
    return f"v{current} holds the alias since this validation was judged against {against}: {command} judges it against v{current}"


def reasons(checks: Sequence[Check], look: LookRecord | None, promoted: bool) -> list[str]:
    """Every check's ``name: detail`` when promoted; otherwise the failed checks (and any
    waived ones). At an interim look a comparison not decided yet is no reason: the
    validation stopped on the others (it stays among the checks)."""
    if promoted:
        return [f"{c.name}: {c.detail}" for c in checks]
    interim = look is not None and look.index + 1 < look.of
    shown = [c for c in checks if (not c.passed and not (interim and c.verdict is Verdict.INCONCLUSIVE)) or c.waiver is not None]
    return [f"{c.name}: {c.detail}" for c in shown]

