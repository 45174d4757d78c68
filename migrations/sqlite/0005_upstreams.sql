-- Upstream MCP servers registered per tenant.
CREATE TABLE upstreams (
    id              TEXT PRIMARY KEY,          -- ups_…
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    name            TEXT NOT NULL,             -- [a-z0-9-]{1,32}: the <server> of mcp__<server>__<tool>
    transport       TEXT NOT NULL,             -- stdio | streamable_http
    -- The full spec including env values and headers. Write-only for callers: never returned
    -- by the API or logged; only the connector reads it.
    spec            TEXT NOT NULL,
    endpoint        TEXT NOT NULL,             -- what may be shown: command line or URL without secrets
    fingerprint     TEXT NOT NULL,             -- sha256 of the normalized endpoint, pinned by calls
    status          TEXT NOT NULL,             -- connected | error | registered
    last_error      TEXT,
    last_synced_at  INTEGER,
    created_by      TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
);
