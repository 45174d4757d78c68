-- Which MCP connection (2025-era `Mcp-Session-Id`) listed a manifest, so that `GET /mcp` with
-- that id hears `notifications/tools/list_changed` about the exposure sessions it listed, on
-- whichever node it is open. NULL for manifests granted otherwise (REST, stateless `/mcp`,
-- forks, hosted agents). Inserting a manifest does not move `read_generation`.
ALTER TABLE manifests ADD COLUMN mcp_session_id TEXT;
CREATE INDEX manifests_by_mcp_session ON manifests (tenant_id, mcp_session_id, issued_at)
    WHERE mcp_session_id IS NOT NULL;
