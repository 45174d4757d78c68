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
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, kind, upstream_id, item_key)
);
CREATE INDEX catalog_items_by_key ON catalog_items (tenant_id, kind, item_key);

-- What a listing shows moves the read generation, like tools.
CREATE TRIGGER catalog_items_insert_moves_generation AFTER INSERT ON catalog_items
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER catalog_items_update_moves_generation AFTER UPDATE ON catalog_items
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER catalog_items_delete_moves_generation AFTER DELETE ON catalog_items
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
