-- Events one process tells the others (crate::events): invocations parked, decided, expired,
-- finished. On SQLite every process polls this table; PostgreSQL uses NOTIFY instead and has
-- no such table. Rows are hints for live views, kept ten minutes.
CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    node        TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    body        TEXT NOT NULL,             -- crate::events::Event as JSON
    created_at  INTEGER NOT NULL
);
CREATE INDEX events_by_time ON events (created_at);
