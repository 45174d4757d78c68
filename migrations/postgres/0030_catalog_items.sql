-- Issue 47 (item 2): what upstreams offer besides tools, catalogued at sync like tools:
-- resources (by their normalised URI), resource templates (by their URI template) and prompts
-- (by their canonical name, `mcp__<server>__<prompt>`). A key two upstreams offer is exposed
-- by neither (a read or get must route to exactly one upstream).
CREATE TABLE catalog_items (
    tenant_id        TEXT NOT NULL,
    upstream_id      TEXT NOT NULL,
    kind             TEXT NOT NULL,   -- resource | template | prompt
    item_key         TEXT NOT NULL,   -- normalised URI | URI template | canonical prompt name
    raw              TEXT NOT NULL,   -- as the upstream names it (URI as listed, prompt name)
    definition       TEXT NOT NULL,   -- JSON, as listed
    definition_hash  TEXT NOT NULL,
    updated_at       BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, kind, upstream_id, item_key)
);
CREATE INDEX catalog_items_by_key ON catalog_items (tenant_id, kind, item_key);

-- What a listing shows moves the read generation, like tools.
CREATE TRIGGER catalog_items_move_generation AFTER INSERT OR UPDATE OR DELETE ON catalog_items
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
