-- The two hashes every manifest needs of every tool (engine::catalog::Fingerprints), written
-- with the tool so that a `tools/list` does not recompute them. Rows written before this
-- migration have NULLs, and their fingerprints are computed when they are read.
ALTER TABLE tools ADD COLUMN definition_hash TEXT;
ALTER TABLE tools ADD COLUMN schema_hash TEXT;
