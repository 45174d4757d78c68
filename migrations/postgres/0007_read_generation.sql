-- One counter that moves with every change to what a `tools/call` reads through the server's
-- in-memory cache (store::cache): API tokens (not their `last_used_at`), catalog tools,
-- upstreams, session revocations, manifests removed. The triggers move it in the same transaction as the change, whatever wrote it (this
-- node, another node, the CLI), so a call that reads the counter first and finds it unchanged
-- may trust what the cache holds. Inserting a session or a manifest does not move it: the cache
-- never holds what does not exist yet.
CREATE TABLE read_generation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  BIGINT NOT NULL
);
INSERT INTO read_generation (id, generation) VALUES (1, 0);

CREATE FUNCTION move_read_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE read_generation SET generation = generation + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER tokens_move_generation
    AFTER UPDATE OF id, tenant_id, actor_id, scopes, secret_sha256, created_by, expires_at, revoked_at
    OR DELETE ON api_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
CREATE TRIGGER tools_move_generation AFTER INSERT OR UPDATE OR DELETE ON tools
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
CREATE TRIGGER upstreams_move_generation AFTER INSERT OR UPDATE OR DELETE ON upstreams
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
CREATE TRIGGER sessions_move_generation AFTER UPDATE OR DELETE ON exposure_sessions
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
CREATE TRIGGER manifests_move_generation AFTER UPDATE OR DELETE ON manifests
    FOR EACH STATEMENT EXECUTE FUNCTION move_read_generation();
