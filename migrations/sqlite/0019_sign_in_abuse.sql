-- Issue 24: sign-in abuse without lockouts. Failures are counted per account and per
-- (account, client address): the pair is refused after 100 in an hour, the account only slowed
-- down (a delay between attempts that never exceeds 30 s), so nobody can lock the rightful user
-- out from another address.
ALTER TABLE sign_in_failures ADD COLUMN client TEXT NOT NULL DEFAULT '';
CREATE INDEX sign_in_failures_by_client ON sign_in_failures (tenant_id, username, client, failed_at);

-- Failed sign-ins for usernames a tenant does not have are journaled once per tenant and hour
-- (the first), then counted here; the count is journaled when the hour is over. Anyone can
-- make such failures, so they must not grow a tenant's journal without bound.
CREATE TABLE sign_in_unknown_users (
    tenant_id     TEXT NOT NULL,
    hour_start    INTEGER NOT NULL,  -- ms since the epoch, a multiple of an hour
    failures      INTEGER NOT NULL,
    summarizing   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hour_start)
);

-- The earliest time the next sign-in attempt at an account is taken (ms): claimed by one
-- conditional update per attempt, so parallel attempts from many addresses cannot slip between
-- the delay's check and the failure's record.
CREATE TABLE sign_in_throttle (
    tenant_id  TEXT NOT NULL,
    username   TEXT NOT NULL,
    next_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, username)
);
