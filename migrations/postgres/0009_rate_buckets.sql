-- Policies' rate buckets (`APERTURE_RATE_LIMITER=database`): calls counted per tenant, bucket
-- and calendar minute, in the database every node shares. One row per bucket holds the current
-- minute; taking a call is one conditional upsert, so nodes never over-admit.
CREATE TABLE rate_buckets (
    tenant_id     TEXT NOT NULL,
    name          TEXT NOT NULL,
    window_start  BIGINT NOT NULL,     -- epoch ms of the minute being counted
    used          BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
