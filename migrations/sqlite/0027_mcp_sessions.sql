-- Issue 47 (items 1 and 5): the `Mcp-Session-Id`s `initialize` hands out (2025 eras), kept so
-- that every node decides alike: a session belongs to the principal that initialized it, ends
-- after 30 minutes without a request or at `DELETE /mcp`, and a principal keeps at most 64
-- (the oldest go). Any other id is answered 404.
CREATE TABLE mcp_sessions (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    principal     TEXT NOT NULL,   -- the caller's id (tok_…, usr_…)
    created_at    INTEGER NOT NULL,     -- ms since the epoch
    last_used_at  INTEGER NOT NULL
);
CREATE INDEX mcp_sessions_by_principal ON mcp_sessions (tenant_id, principal, last_used_at);
CREATE INDEX mcp_sessions_by_use ON mcp_sessions (last_used_at);
