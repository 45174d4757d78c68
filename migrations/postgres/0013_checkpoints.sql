-- Evidence anyone can check (issue 22): each tenant's journal as an RFC 6962 Merkle tree,
-- signed checkpoints of it, the witnesses that cosign them.

-- Per tenant: the log's origin (`<host>/aperture/<tenant>`, fixed when its first checkpoint is
-- made and never recomputed) and how many records the stored tree holds.
CREATE TABLE journal_logs (
    tenant_id   TEXT PRIMARY KEY,
    origin      TEXT NOT NULL,
    tree_size   BIGINT NOT NULL,
    created_at  BIGINT NOT NULL
);

-- The tree's node hashes in tiles of 256, as C2SP tlog-tiles lays them out: tile (level L,
-- index i) holds the hashes of the nodes of height 8·L numbered 256·i, 256·i + 1, … that exist
-- (complete subtrees only), 32 bytes each. A node of a height in between is hashed from its
-- tile when a proof needs it.
CREATE TABLE journal_tiles (
    tenant_id   TEXT NOT NULL,
    level       BIGINT NOT NULL,
    idx         BIGINT NOT NULL,
    hashes      BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, level, idx)
);

-- Signed checkpoints (C2SP tlog-checkpoint in a signed note), as made. Also appended to a sink
-- outside the database (APERTURE_CHECKPOINT_DIR).
CREATE TABLE journal_checkpoints (
    tenant_id   TEXT NOT NULL,
    tree_size   BIGINT NOT NULL,
    note        TEXT NOT NULL,
    made_at     BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, tree_size)
);

-- Witnesses an admin registered: a name and an Ed25519 cosigner key (note verifier format).
CREATE TABLE journal_witnesses (
    tenant_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    vkey        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);

-- Their cosignatures (C2SP tlog-cosignature signature lines) of stored checkpoints.
CREATE TABLE journal_cosignatures (
    tenant_id   TEXT NOT NULL,
    tree_size   BIGINT NOT NULL,
    witness     TEXT NOT NULL,
    line        TEXT NOT NULL,
    signed_at   BIGINT NOT NULL,   -- the cosignature's own timestamp, seconds
    received_at BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, tree_size, witness)
);
