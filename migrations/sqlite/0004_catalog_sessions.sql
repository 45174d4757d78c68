-- The tool catalog, exposure sessions and the manifests granted to them.

-- One row per tool a tenant can expose. The definition is what the tool says about itself (for
-- MCP tools: as the upstream lists it); the descriptor columns are what the tenant's admin says
-- about it (server-owned; a tool nobody described has risk ["unknown"]).
CREATE TABLE tools (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    name            TEXT NOT NULL,          -- canonical, model-visible
    upstream_id     TEXT,                   -- ups_… for MCP tools
    raw_server      TEXT,                   -- raw upstream name (fork patterns match it)
    raw_tool        TEXT,                   -- raw tool name as the upstream lists it
    definition      TEXT NOT NULL,          -- JSON {title?, description?, input_schema, output_schema?, annotations?}
    version         TEXT NOT NULL,
    family          TEXT,
    risk            TEXT NOT NULL,          -- JSON array of labels
    required_scope  TEXT,
    dry_run_argument TEXT,
    price_cents     INTEGER,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

-- An exposure session: who, where, and (for forks) the parent and the execution allowlist.
CREATE TABLE exposure_sessions (
    id           TEXT PRIMARY KEY,          -- ses_…
    tenant_id    TEXT NOT NULL REFERENCES tenants (id),
    environment  TEXT NOT NULL,
    actor_id     TEXT NOT NULL,             -- pinned at creation: calls must come from it
    preset       TEXT,
    entity       TEXT,
    parent_id    TEXT,                      -- ses_… of the parent, for forks
    fork_tools   TEXT,                      -- JSON list; NULL means unrestricted
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
CREATE INDEX exposure_sessions_by_tenant ON exposure_sessions (tenant_id, created_at);

-- Every manifest granted. `manifest` is the engine's full manifest (per tool: mode, narrowed
-- schema, hashes, limits) so calls are decided against exactly what was granted, whatever
-- happens to the catalog or the policy afterwards; `document` is the signed manifest document
-- (CONTRACT §6) and `signature` its Ed25519 signature.
CREATE TABLE manifests (
    id                TEXT PRIMARY KEY,     -- man_…
    tenant_id         TEXT NOT NULL,
    session_id        TEXT NOT NULL REFERENCES exposure_sessions (id),
    lease_id          TEXT NOT NULL UNIQUE, -- lea_…
    lease_expires_at  INTEGER NOT NULL,
    issued_at         INTEGER NOT NULL,
    manifest          TEXT NOT NULL,
    document          TEXT NOT NULL,
    signature         TEXT NOT NULL
);
CREATE INDEX manifests_by_session ON manifests (session_id, issued_at);
