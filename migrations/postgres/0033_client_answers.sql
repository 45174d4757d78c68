-- Issue 47 (item 3): a client's answer to a request of the gateway's (sampling, elicitation,
-- roots) that reached a node other than the one holding the call's stream: kept here for that
-- node, which is told by an event carrying only the id, takes the row, and delivers it only
-- when it comes from the call's own principal and session. Rows nobody takes go after ten
-- minutes.
CREATE TABLE client_answers (
    id           TEXT NOT NULL,     -- the gateway's request id (ask_…)
    tenant_id    TEXT NOT NULL,
    principal    TEXT NOT NULL,     -- who answered (tok_…, usr_…)
    mcp_session  TEXT,
    answer       TEXT NOT NULL,     -- {"result": …} or {"error": {"code", "message"}}
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (id, principal)    -- one answer per principal: another's cannot crowd it out
);
CREATE INDEX client_answers_by_age ON client_answers (created_at);
