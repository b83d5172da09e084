"""Errors the ledger services raise; the API turns each into `{error, code}` plus its details."""

from footprint_site.exceptions import ApiError


class LedgerError(ApiError):
    code = "ERR_LEDGER"


class BatchInvalid(LedgerError):
    """Schema violations; `details["errors"]` names the index and field of each bad event."""

    status = 422
    code = "ERR_INVALID_EVENTS"


class SeqConflict(LedgerError):
    """A (runId, seq) already stored with different content: the batch is refused whole."""

    status = 409
    code = "ERR_SEQ_CONFLICT"


class RecordingInvalid(LedgerError):
    status = 422
    code = "ERR_INVALID_RECORDING"


class RunNotFound(LedgerError):
    status = 404
    code = "ERR_RUN_NOT_FOUND"


class ReceiptsInvalid(LedgerError):
    """POST /receipts/verify with a body that is not {receipts: [...]}."""

    status = 422
    code = "ERR_INVALID_RECEIPTS"


class AskInvalid(LedgerError):
    status = 422
    code = "ERR_INVALID_ASK"


class AskNotFound(LedgerError):
    status = 404
    code = "ERR_ASK_NOT_FOUND"


class AskAlreadyDecided(LedgerError):
    """A decision on an ask that is no longer open: the answer names who decided first, and when."""

    status = 409
    code = "ERR_ALREADY_DECIDED"


class AskSuperseded(AskAlreadyDecided):
    """A decision on, or a wait for, an ask its session's later pause closed: no run waits on it."""

    code = "ERR_ASK_SUPERSEDED"

    @classmethod
    def of(cls, *, session_id: str | None, superseded_by: int | None) -> "AskSuperseded":
        later = f"ask {superseded_by}" if superseded_by is not None else "a later ask"
        return cls(
            f"This ask was superseded by {later}: session {session_id!r} paused again, and a session "
            "waits on one ask at a time, so no run waits for a decision here.",
            supersededBy=superseded_by,
        )


class AskStaleDecision(LedgerError):
    """A decision made on another artifact than the one the ask showed (spec §2.4: ERR_STALE_DECISION)."""

    status = 409
    code = "ERR_STALE_DECISION"


class AskOwnDecision(LedgerError):
    """The key that opened an ask may not decide it: the run would be approving itself."""

    status = 403
    code = "ERR_OWN_ASK"


class AskNotPermitted(LedgerError):
    """A decision by someone an approval rule does not allow: not in the group it requires, or an
    integration where the rule requires named people."""

    status = 403
    code = "ERR_NOT_PERMITTED"


class ApproverRuleInvalid(LedgerError):
    """An approver group, approval rule or standing-approval limit that cannot be kept as given."""

    status = 422
    code = "ERR_INVALID_APPROVER_RULE"


class StandingApprovalInvalid(LedgerError):
    """A standing approval wider than what its ask showed, beyond the project's limits, or gone."""

    status = 422
    code = "ERR_INVALID_STANDING_APPROVAL"


class RefusalNotFound(LedgerError):
    """No such refusal, or it belongs to a project the user is not a member of."""

    status = 404
    code = "ERR_REFUSAL_NOT_FOUND"


class AuditBundleInvalid(LedgerError):
    status = 422
    code = "ERR_INVALID_AUDIT_BUNDLE"


class AdminOnly(LedgerError):
    """An admin operation over the API by a key that acts for nobody who is an admin of its project."""

    status = 403
    code = "ERR_NOT_ADMIN"


class AdminObjectNotFound(LedgerError):
    """No such channel, rule or group in the key's project (another project's is answered the same)."""

    status = 404
    code = "ERR_NOT_FOUND"


class AdminBodyInvalid(LedgerError):
    """An admin operation's body of the wrong shape (a field it does not name, a value of the wrong type)."""

    status = 422
    code = "ERR_INVALID_ADMIN_BODY"
