-- Issue 23: `requires_idempotency` de-duplicates. The first call under (tenant, actor, tool,
-- key) claims the key for its invocation until `expires_at` (APERTURE_IDEMPOTENCY_RETENTION_HOURS
-- after it); the same key again gets that invocation's outcome, with other arguments a refusal.
CREATE TABLE idempotency_keys (
    tenant_id      TEXT NOT NULL,
    actor_id       TEXT NOT NULL,
    tool           TEXT NOT NULL,
    idem_key       TEXT NOT NULL,
    invocation_id  TEXT NOT NULL,
    args_hash      TEXT NOT NULL,   -- of the effective arguments the key was first used with
    created_at     INTEGER NOT NULL,   -- epoch ms
    expires_at     INTEGER NOT NULL,   -- epoch ms
    PRIMARY KEY (tenant_id, actor_id, tool, idem_key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
