-- Foundation: tenants, users, API tokens, dashboard sessions, sign-in failures.
-- Timestamps are unix epoch milliseconds (INTEGER) in both backends so that one set of SQL
-- statements serves SQLite and PostgreSQL through sqlx's Any driver.

CREATE TABLE tenants (
    id          TEXT PRIMARY KEY,          -- readable name, e.g. `default`
    created_at  INTEGER NOT NULL
);

CREATE TABLE users (
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    username       TEXT NOT NULL,
    -- PHC string of an argon2id hash; never the password.
    password_hash  TEXT NOT NULL,
    -- JSON array of scope strings, sorted.
    scopes         TEXT NOT NULL,
    created_by     TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, username)
);

-- One row per failed sign-in, kept for an hour; also for unknown usernames so that the limit
-- behaves the same whether or not the account exists.
CREATE TABLE sign_in_failures (
    tenant_id  TEXT NOT NULL,
    username   TEXT NOT NULL,
    failed_at  INTEGER NOT NULL
);
CREATE INDEX sign_in_failures_by_account ON sign_in_failures (tenant_id, username, failed_at);

CREATE TABLE api_tokens (
    id             TEXT PRIMARY KEY,       -- tok_…
    tenant_id      TEXT NOT NULL REFERENCES tenants (id),
    actor_id       TEXT NOT NULL,
    name           TEXT,
    scopes         TEXT NOT NULL,          -- JSON array, sorted
    -- Lowercase hex SHA-256 of the secret; the secret itself is never stored.
    secret_sha256  TEXT NOT NULL UNIQUE,
    created_by     TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    expires_at     INTEGER,
    revoked_at     INTEGER,
    last_used_at   INTEGER
);
CREATE INDEX api_tokens_by_tenant ON api_tokens (tenant_id, created_at);

-- tower-sessions records. `data` is the JSON of the session's key/value map.
CREATE TABLE dashboard_sessions (
    id          TEXT PRIMARY KEY,
    data        TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX dashboard_sessions_by_expiry ON dashboard_sessions (expires_at);
