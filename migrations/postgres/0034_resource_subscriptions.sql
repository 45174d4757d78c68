-- Issue 47 (item 2): who asked to hear of a resource's changes. A row per holder and URI: the
-- holder is an MCP session (`resources/subscribe`, 2025 eras) or a listening stream
-- (`subscriptions/listen` with `resourceSubscriptions`, 2026-07-28; its row goes when the
-- stream ends). An upstream's `notifications/resources/updated` reaches each holder of a row
-- naming that upstream and URI, after the policy is asked again whether the holder's principal
-- may still read it. Rows of sessions that are gone are dropped with them.
CREATE TABLE resource_subscriptions (
    holder       TEXT NOT NULL,     -- the Mcp-Session-Id, or the listening stream's id
    uri          TEXT NOT NULL,     -- normalised, as the client asked for it
    tenant_id    TEXT NOT NULL,
    principal    TEXT NOT NULL,     -- who subscribed (tok_…, usr_…)
    environment  TEXT NOT NULL,
    upstream_id  TEXT NOT NULL,
    raw_uri      TEXT NOT NULL,     -- as the upstream lists it (what it was asked and sends)
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (holder, uri)
);
CREATE INDEX resource_subscriptions_by_upstream ON resource_subscriptions (tenant_id, upstream_id, raw_uri);
