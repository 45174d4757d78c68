-- Issue 28: webhooks tell a tenant's approvers about calls that wait for them. A webhook is a
-- URL and the events it wants; `secret` is its Standard Webhooks signing secret (`whsec_…`),
-- sealed like upstream credentials (crate::secrets) and shown to its creator once.
CREATE TABLE webhooks (
    id          TEXT PRIMARY KEY,              -- whk_…
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    url         TEXT NOT NULL,
    events      TEXT NOT NULL,                 -- JSON array of event types
    secret      TEXT NOT NULL,                 -- sealed
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant_id, created_at);
-- The outbox: one row per webhook and event, inserted in the same transaction as the
-- invocation's change of status, so an event is delivered even when the node that made the
-- change stops right after it (and never twice for one change). `status`: pending (due at
-- `next_attempt_at`, which a sender also moves forward while it tries, as its claim),
-- delivered, failed (every retry used up). `data` is the event's data, never argument values.
CREATE TABLE webhook_deliveries (
    id               TEXT PRIMARY KEY,          -- msg_… (the webhook-id header)
    tenant_id        TEXT NOT NULL,
    webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event            TEXT NOT NULL,
    subject          TEXT NOT NULL,             -- inv_…
    data             TEXT NOT NULL,             -- JSON
    status           TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    last_status      INTEGER,                   -- the receiver's last HTTP status
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    delivered_at     INTEGER
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, created_at);
-- Every attempt, for admins: when, how long, what the receiver answered (or why it was not
-- reached).
CREATE TABLE webhook_attempts (
    delivery_id  TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt      INTEGER NOT NULL,
    attempted_at INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL,
    http_status  INTEGER,
    error        TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
