"""A person's sign-off on a version awaiting approval: ``vlgate approve`` and ``vlgate reject``
(``flows/approval.py``)."""

from __future__ import annotations

import argparse

from vlgate.cli.commands.base import EXIT_CODES, Answer, Command, UserError, exit_status, service_context, version_ref


class _SignOff(Command):
    approve = True
    json_help = "the record appended, as one JSON object (with the re-judgement made first, if one was)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("name")
        parser.add_argument("version")
        parser.add_argument("--reason", required=True, help="why: kept in the record (note)")
        parser.add_argument("--by", help="who signs (default: the operating-system user); recorded as unverified unless the deployment authenticates")

    def run(self, args: argparse.Namespace) -> Answer:
        from mlflow.exceptions import MlflowException

        from vlgate.flows.approval import SignOffInput, sign_off, sign_off_suspended, suspended_flow_run
        from vlgate.flows.judgement import ValidationError
        from vlgate.tracking.permissions import AuthError

        subject = version_ref(args.name, args.version)
        if not args.reason.strip():
            raise UserError("--reason: say why (it is kept in the record)")
        answer = SignOffInput(approve=self.approve, reason=args.reason.strip(), by=args.by or "")
        context = service_context()
        try:
            # in the deployment the version's flow run is suspended for this answer: resumed once it is on record
            waiting = suspended_flow_run(context, subject)
            if waiting is not None:
                signed = sign_off_suspended(context, waiting, subject, answer)
            else:
                signed = sign_off(context, subject, answer)
        except (ValidationError, AuthError) as error:
            raise UserError(str(error)) from None
        except MlflowException as error:
            raise UserError(f"{subject}: not in the registry ({error.error_code})") from None
        record = signed.record

        def text() -> None:
            from vlgate.text import visible

            if signed.rejudged is not None and signed.rejudged is not record:
                print(visible(f"{subject}: judged again against today's champion first: {signed.rejudged.outcome.value}"))
            print(visible(f"{subject}: {record.outcome.value} ({record.kind.value if record.kind else '-'}, record {record.sequence}); champion: {record.champion_after or 'none'}"))

        return Answer(signed.as_json(), status=exit_status(record.outcome), text=text)


class Approve(_SignOff):
    name = "approve"
    help = "sign off a version awaiting approval: the alias moves (from the champion it was judged against)"
    description = (
        "Appends an approval record (who, when, why) to the version's validation run and moves the champion alias under the gate "
        "lock. If another version took the alias since it was judged, it is judged again against today's champion first, and the "
        "approval applies only if that passes too. Too late (the policy's approval.expires_after) is recorded as expired. "
        "In the deployment, the version's flow run, suspended for the sign-off, is resumed once the sign-off is on record. "
        f"Exit status: {EXIT_CODES}, 6 awaiting approval again, 2 not awaiting approval or not an approver."
    )
    approve = True


class Reject(_SignOff):
    name = "reject"
    help = "refuse a version awaiting approval: recorded with who and why; the alias stays"
    description = "Appends a rejection record (who, when, why) to the version's validation run; nothing else changes. Exit status 3; 2 not awaiting approval or not an approver."
    approve = False
