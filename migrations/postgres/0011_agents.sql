-- Hosted agents (issue 7). An agent owns an exposure session whose id is the agent's own id
-- (agt_…), so its calls' receipts name it. Forks are agents with a parent; their execution
-- allowlist is the AgentMeta sidecar (`execution_allowed_tools`, a JSON array, `[]` denies
-- everything, NULL means unrestricted), kept apart from the declarations, which stay the
-- parent's.
CREATE TABLE agents (
    id                       TEXT PRIMARY KEY,      -- agt_…
    tenant_id                TEXT NOT NULL REFERENCES tenants (id),
    actor_id                 TEXT NOT NULL,         -- the principal that created it; calls run as it
    environment              TEXT NOT NULL,
    system_instruction       TEXT NOT NULL,
    max_turns                BIGINT NOT NULL,      -- model calls one turn may make
    parent_id                TEXT,                  -- agt_… of a fork's parent
    subagent_type            TEXT,                  -- fork | general-purpose (children only)
    execution_allowed_tools  TEXT,                  -- the AgentMeta sidecar (JSON array) or NULL
    status                   TEXT NOT NULL,         -- idle | running | input_required | failed
    created_at               BIGINT NOT NULL,
    updated_at               BIGINT NOT NULL
);
CREATE INDEX agents_by_tenant ON agents (tenant_id, created_at);
CREATE INDEX agents_by_parent ON agents (parent_id);

-- An agent's transcript, in order: `message` records (one chat message each), and for forks
-- the `agent_bootstrap` record (the inherited history) and the `launch_prompt` record.
CREATE TABLE agent_records (
    agent_id    TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    turn_id     TEXT,
    body        TEXT NOT NULL,                      -- JSON
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (agent_id, seq)
);

-- Turns: one user message and what the agent did about it.
CREATE TABLE agent_turns (
    id           TEXT PRIMARY KEY,                  -- trn_…
    agent_id     TEXT NOT NULL,
    status       TEXT NOT NULL,                     -- running | completed | input_required | failed | max_turns
    token_id     TEXT,                              -- the caller's token: a continued turn runs as it
    model_calls  BIGINT NOT NULL,
    error        TEXT,
    started_at   BIGINT NOT NULL,
    ended_at     BIGINT
);
CREATE INDEX agent_turns_by_agent ON agent_turns (agent_id, started_at);
