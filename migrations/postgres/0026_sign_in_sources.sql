-- Issue 45 (item 9): sign-in never locks out the rightful user. An address (IPv6 per /64) or a
-- device (the hash of the id in its long-lived cookie) that signed in to an account within 30
-- days is remembered here, and its attempts skip the account-wide delay that everyone else's
-- failures build up. `source` is `address:<key>` or `device:<sha256 hex>`; the device id itself
-- is never stored.
CREATE TABLE sign_in_sources (
    tenant_id     TEXT NOT NULL,
    username      TEXT NOT NULL,
    source        TEXT NOT NULL,
    signed_in_at  BIGINT NOT NULL,  -- ms since the epoch, of the latest sign-in from it
    PRIMARY KEY (tenant_id, username, source)
);
CREATE INDEX sign_in_sources_by_time ON sign_in_sources (signed_in_at);
-- A device cookie is kept at sign-in only if the server issued it (some account knows it).
CREATE INDEX sign_in_sources_by_source ON sign_in_sources (source, signed_in_at);

-- A known source's own failures still slow it down (whoever holds a copied device cookie
-- guesses no faster than the account-wide delay allows), in a slot of its own: the same
-- conditional update as `sign_in_throttle`, per (account, source).
CREATE TABLE sign_in_source_throttle (
    tenant_id  TEXT NOT NULL,
    username   TEXT NOT NULL,
    source     TEXT NOT NULL,
    next_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, username, source)
);

-- The device an attempt came from ('' when it sent no device cookie), so that a known device's
-- failures can be counted wherever it connects from.
ALTER TABLE sign_in_failures ADD COLUMN device TEXT NOT NULL DEFAULT '';
CREATE INDEX sign_in_failures_by_device ON sign_in_failures (tenant_id, username, device, failed_at);
