-- The receipts browser filters the journal by decision, reason, tool, actor and session and
-- pages newest first by seq. Each index serves one filter in seq order, so a page of a rare
-- value reads only its own rows instead of scanning the tenant's whole journal.
CREATE INDEX journal_by_decision ON journal (tenant_id, decision, seq);
CREATE INDEX journal_by_reason ON journal (tenant_id, reason, seq);
CREATE INDEX journal_by_tool ON journal (tenant_id, tool, seq);
CREATE INDEX journal_by_actor ON journal (tenant_id, actor_id, seq);
CREATE INDEX journal_by_session ON journal (tenant_id, session_id, seq);

-- The overview counts decisions per hour and the reasons of denials over the last days: with
-- kind, decision and reason in the time index, those counts read the index alone, not every
-- record of the period.
DROP INDEX journal_by_time;
CREATE INDEX journal_by_time ON journal (tenant_id, issued_at, kind, decision, reason);
