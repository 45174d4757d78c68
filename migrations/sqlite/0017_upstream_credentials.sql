-- Issue 23: credentials of an upstream (HTTP headers, a stdio process's environment) can be
-- replaced in place (`PUT /upstreams/{id}/credentials`). Each replacement counts up
-- `credential_version`; manifests pin it with the execution target, so calls under grants made
-- with the old credentials are `target_drift` and a fresh `tools/list` re-pins.
ALTER TABLE upstreams ADD COLUMN credential_version INTEGER NOT NULL DEFAULT 0;
