-- Tenant policies. Every PUT stores a new immutable version, numbered from 1 per policy.
CREATE TABLE policy_versions (
    tenant_id   TEXT NOT NULL REFERENCES tenants (id),
    policy_id   TEXT NOT NULL,
    version     INTEGER NOT NULL,
    document    TEXT NOT NULL,      -- the validated policy document (JSON)
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, policy_id, version)
);

-- Which policy new sessions of an environment get. It names a policy, not a version: saving a
-- new version takes effect for the next tools/list, and each manifest records the version it
-- was built from. No row: `builtin_safe_read`.
CREATE TABLE policy_activations (
    tenant_id     TEXT NOT NULL REFERENCES tenants (id),
    environment   TEXT NOT NULL,
    policy_id     TEXT NOT NULL,
    activated_by  TEXT NOT NULL,
    activated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, environment)
);
