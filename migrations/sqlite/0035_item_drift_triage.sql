-- Issue 47 (item 2): drift triage over the text of resources, resource templates and prompts,
-- as over tools (0020): when a sync finds an item's text changed in a way the tenant's triage
-- holds, the definition it last accepted is kept here and the item is held (neither listed nor
-- readable) until an admin accepts the change (`POST /catalog/items:accept`) or keeps it held.
ALTER TABLE catalog_items ADD COLUMN accepted_definition TEXT;
ALTER TABLE catalog_items ADD COLUMN held_changes TEXT;
ALTER TABLE catalog_items ADD COLUMN held_since INTEGER;
ALTER TABLE catalog_items ADD COLUMN held_kept_hash TEXT;
