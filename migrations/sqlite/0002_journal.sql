-- The tamper-evident journal and the public keys that verify it.

-- Public halves of every signing key ever used, so every node publishes all of them and old
-- receipts keep verifying after `aperture keys rotate`. Private keys never enter the database.
CREATE TABLE signing_keys (
    kid         TEXT PRIMARY KEY,          -- ed25519:<16 hex>
    x           TEXT NOT NULL,             -- base64url public key (JWK `x`)
    created_at  INTEGER NOT NULL
);

-- One append-only, hash-chained journal per tenant. A record *is* its signed receipt plus the
-- disclosures the caller never sees. (tenant_id, seq) is the primary key: two writers that
-- read the same head cannot both append, the loser retries on the new head.
CREATE TABLE journal (
    tenant_id          TEXT NOT NULL,
    seq                INTEGER NOT NULL,
    receipt_id         TEXT NOT NULL UNIQUE,
    kind               TEXT NOT NULL,
    decision           TEXT NOT NULL,
    reason             TEXT NOT NULL,
    tool               TEXT,
    session_id         TEXT,
    actor_id           TEXT NOT NULL,
    issued_at          INTEGER NOT NULL,   -- epoch ms, for time filters
    receipt            TEXT NOT NULL,      -- the signed receipt, JSON
    disclosures        TEXT NOT NULL,      -- JSON; its digest is in the receipt
    record_hash        TEXT NOT NULL,      -- sha256 of the JCS bytes of the signed receipt
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX journal_by_time ON journal (tenant_id, issued_at);
