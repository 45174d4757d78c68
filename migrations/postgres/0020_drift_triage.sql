-- Issue 25: drift triage. A tool row keeps following its upstream (so grants of an older
-- definition meet `manifest_drift`), and remembers the definition the tenant last accepted
-- while a change is held for review. A held tool is left out of manifests and refused.
--
-- accepted_definition: the stored definition the tenant last accepted, while it differs from
--   `definition` (NULL: `definition` is the accepted one).
-- held_changes: JSON array of the drift classes found (CONTRACT §14), NULL when not held.
-- held_since: when the tool was first held for the change (ms).
-- held_kept_hash: the definition hash an admin chose to keep held; the Tools page stops asking
--   until the upstream changes the tool again.
ALTER TABLE tools ADD COLUMN accepted_definition TEXT;
ALTER TABLE tools ADD COLUMN held_changes TEXT;
ALTER TABLE tools ADD COLUMN held_since BIGINT;
ALTER TABLE tools ADD COLUMN held_kept_hash TEXT;

-- A tenant's drift triage (GET/PUT /catalog/drift): {"<class>": "accept" | "hold"}. No row: the
-- default (hold everything except title-only changes).
CREATE TABLE catalog_settings (
    tenant_id   TEXT PRIMARY KEY,
    drift       TEXT NOT NULL,
    updated_by  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);
