-- Invocations: a call bound once at authorization (engine BoundCall: effective arguments,
-- limits, redaction, pinned target) and carried to its one outcome. Parked calls wait here for
-- an approver; a caller's `_meta.invocation_id` (`client_key`) makes a retry return the same
-- outcome instead of running again. `status`:
--   input_required  parked for an approver          approving  an approver is recording it
--   approved        released; the worker runs it    rejecting  a rejection is being recorded
--   running         executing now                   completed  `result` holds the tool result
--   rejected        `result` holds the approval_rejected result
--   expired         `result` holds the approval_expired result
--   staged          a staged change waiting to be applied (then `approved`)
--   confirmation_required  waiting for the same actor to repeat the call with its token
--   invalidated     the confirmation was presented with another binding; `result` says so
CREATE TABLE invocations (
    id                   TEXT PRIMARY KEY,          -- inv_…
    tenant_id            TEXT NOT NULL REFERENCES tenants (id),
    session_id           TEXT NOT NULL,
    manifest_id          TEXT NOT NULL,
    client_key           TEXT,                      -- the caller's _meta.invocation_id
    turn_id              TEXT,
    actor_id             TEXT NOT NULL,
    token_id             TEXT,                      -- the caller's token (tok_…), if any
    token_created_by     TEXT,                      -- who created that token: may not approve
    tool                 TEXT NOT NULL,
    tool_version         TEXT NOT NULL,
    schema_hash          TEXT NOT NULL,
    args_hash            TEXT NOT NULL,
    mode                 TEXT NOT NULL,
    binding              TEXT NOT NULL,             -- engine BoundCall JSON
    policy_id            TEXT NOT NULL,
    policy_version       INTEGER NOT NULL,
    decision_receipt_id  TEXT NOT NULL,
    status               TEXT NOT NULL,
    result               TEXT,                      -- the final tool result JSON
    decided_by           TEXT,
    decided_at           INTEGER,
    decision_comment     TEXT,
    approval_receipt_id  TEXT,
    confirmation_sha256  TEXT UNIQUE,               -- SHA-256 of the confirmation token
    created_at           INTEGER NOT NULL,
    expires_at           INTEGER,
    updated_at           INTEGER NOT NULL
);
CREATE UNIQUE INDEX invocations_by_client_key ON invocations (tenant_id, session_id, client_key);
CREATE INDEX invocations_by_status ON invocations (tenant_id, status, created_at);
CREATE INDEX invocations_due ON invocations (status, updated_at);
