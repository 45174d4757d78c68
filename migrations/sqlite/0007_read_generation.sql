-- One counter that moves with every change to what a `tools/call` reads through the server's
-- in-memory cache (store::cache): API tokens (not their `last_used_at`), catalog tools,
-- upstreams, session revocations, manifests removed. The triggers move it in the same transaction as the change, whatever wrote it (this
-- server, another node, the CLI), so a call that reads the counter first and finds it unchanged
-- may trust what the cache holds. Inserting a session or a manifest does not move it: the cache
-- never holds what does not exist yet.
CREATE TABLE read_generation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  INTEGER NOT NULL
);
INSERT INTO read_generation (id, generation) VALUES (1, 0);

CREATE TRIGGER tokens_update_moves_generation
AFTER UPDATE OF id, tenant_id, actor_id, scopes, secret_sha256, created_by, expires_at, revoked_at ON api_tokens
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER tokens_delete_moves_generation AFTER DELETE ON api_tokens
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;

CREATE TRIGGER tools_insert_moves_generation AFTER INSERT ON tools
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER tools_update_moves_generation AFTER UPDATE ON tools
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER tools_delete_moves_generation AFTER DELETE ON tools
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;

CREATE TRIGGER upstreams_insert_moves_generation AFTER INSERT ON upstreams
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER upstreams_update_moves_generation AFTER UPDATE ON upstreams
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER upstreams_delete_moves_generation AFTER DELETE ON upstreams
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;

CREATE TRIGGER sessions_update_moves_generation AFTER UPDATE ON exposure_sessions
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER sessions_delete_moves_generation AFTER DELETE ON exposure_sessions
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;

CREATE TRIGGER manifests_update_moves_generation AFTER UPDATE ON manifests
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
CREATE TRIGGER manifests_delete_moves_generation AFTER DELETE ON manifests
BEGIN UPDATE read_generation SET generation = generation + 1 WHERE id = 1; END;
