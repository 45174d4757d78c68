-- Issue 47 (item 1): a tenant's settings under `/settings/…`, one JSON document per name
-- (`mcp`: `{"binding", "tool_names", "environments"?}`). No row: the defaults hold (`echo`,
-- `prefixed`: the seed's contract).
CREATE TABLE tenant_settings (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    document    TEXT NOT NULL,
    updated_by  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,   -- ms since the epoch
    PRIMARY KEY (tenant_id, name)
);

-- A grant a `tools/call` without an echo may bind to (`binding: "implicit"`): one that
-- answered a plain `/mcp` `tools/list` of this principal (no `session_id`, `preset` or
-- `entity` hint), or was granted for such a call. NULL for every other grant. Kept here, not in
-- a node's memory, so every node binds a call alike.
ALTER TABLE manifests ADD COLUMN bindable_by TEXT;
CREATE INDEX manifests_bindable ON manifests (tenant_id, bindable_by, issued_at)
    WHERE bindable_by IS NOT NULL;

-- A settings change moves the read generation: every node's caches and `list_changed`
-- watchers see it (a change of `tool_names` changes what the next listing shows).
CREATE TRIGGER tenant_settings_move_generation AFTER INSERT OR UPDATE OR DELETE ON tenant_settings
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
