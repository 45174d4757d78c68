-- Issue 47 (item 4): the log level a 2025-era client set for its session with
-- `logging/setLevel` (debug … emergency; NULL: none set, no log messages reach it). The gateway
-- filters the upstreams' log messages by it; it is never sent to a shared upstream.
ALTER TABLE mcp_sessions ADD COLUMN log_level TEXT;
