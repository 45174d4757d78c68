-- Issue 29: a call commits two journal records one after the other, and each commit wrote a
-- page of every B-tree of the journal table: the table, its primary key, receipt_id, and the
-- six indexes the receipts browser and the overview read (migration 0010). Those six move to
-- a table of their own, journal_facets, which the journal's writer fills off the call path
-- (between batches, in batches: crate::journal, store::journal::index_facets). Every
-- record is in journal at once and in journal_facets a little later, always as a prefix of
-- each tenant's chain (seq 1 up to the tenant's highest seq in journal_facets). Filtered reads
-- take the indexed prefix from journal_facets and the few records after it from journal
-- itself (store::journal), so nothing committed is ever missing from a filtered page.
CREATE TABLE journal_facets (
    tenant_id   TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    decision    TEXT NOT NULL,
    reason      TEXT NOT NULL,
    tool        TEXT,
    session_id  TEXT,
    actor_id    TEXT NOT NULL,
    issued_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
INSERT INTO journal_facets (tenant_id, seq, kind, decision, reason, tool, session_id, actor_id, issued_at)
    SELECT tenant_id, seq, kind, decision, reason, tool, session_id, actor_id, issued_at FROM journal;

DROP INDEX journal_by_decision;
DROP INDEX journal_by_reason;
DROP INDEX journal_by_tool;
DROP INDEX journal_by_actor;
DROP INDEX journal_by_session;
DROP INDEX journal_by_time;

CREATE INDEX journal_facets_by_decision ON journal_facets (tenant_id, decision, seq);
CREATE INDEX journal_facets_by_reason ON journal_facets (tenant_id, reason, seq);
CREATE INDEX journal_facets_by_tool ON journal_facets (tenant_id, tool, seq);
CREATE INDEX journal_facets_by_actor ON journal_facets (tenant_id, actor_id, seq);
CREATE INDEX journal_facets_by_session ON journal_facets (tenant_id, session_id, seq);
CREATE INDEX journal_facets_by_time ON journal_facets (tenant_id, issued_at, kind, decision, reason);
