-- Background forks and their revival (issue 7, item 4). A running agent is held by one run
-- (`runner`, set by the conditional update that made it `running`), which moves `updated_at`
-- every few seconds (a heartbeat); an agent left `running` with a stale heartbeat belongs to a
-- process that stopped: another run claims it (a background fork is revived, a foreground turn
-- ends as failed), and the old run's writes, fenced by `runner`, no longer land. `paused` is a
-- background fork that cannot be revived (its parent is gone), with the reason in
-- `status_reason`.
ALTER TABLE agents ADD COLUMN background BIGINT NOT NULL DEFAULT 0;   -- 1: started with run_in_background
ALTER TABLE agents ADD COLUMN status_reason TEXT;                    -- why it is paused or failed
ALTER TABLE agents ADD COLUMN reported_at BIGINT;                      -- when a finished background fork's answer reached its parent
ALTER TABLE agents ADD COLUMN runner TEXT;                           -- the run holding it while running
CREATE INDEX agents_by_status ON agents (status, updated_at);
