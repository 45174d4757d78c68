-- Issue 47 (item 1): a `/mcp` call bound implicitly (no echo) that waits — for an approver, a
-- staged apply or a worker — is found again by repeating it: the same principal, grant, tool
-- and `args_hash`. While its invocation waits the repeat gets its status; once it is settled,
-- its outcome, once (`delivered_at`); a repeat after that is a new call.
CREATE TABLE implicit_waits (
    invocation_id  TEXT PRIMARY KEY,
    tenant_id      TEXT NOT NULL,
    manifest_id    TEXT NOT NULL,
    principal      TEXT NOT NULL,   -- tok_…, usr_…
    tool           TEXT NOT NULL,   -- canonical
    args_hash      TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    delivered_at   BIGINT
);
CREATE INDEX implicit_waits_by_call
    ON implicit_waits (tenant_id, manifest_id, principal, tool, args_hash, created_at)
    WHERE delivered_at IS NULL;
