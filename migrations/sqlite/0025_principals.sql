-- Receipts name the principal that acted (CONTRACT §15).
--
-- Users gain an immutable public id (`usr_` and 32 hex characters), the principal their
-- receipts name; existing users get theirs here.
ALTER TABLE users ADD COLUMN id TEXT;
UPDATE users SET id = 'usr_' || lower(hex(randomblob(16))) WHERE id IS NULL;
CREATE UNIQUE INDEX users_by_id ON users (id);

-- Tokens record the principal that created them in `created_by` (`tok_…`, `usr_…`, `operator`)
-- and the person behind it here, whom approvals of the token's calls refuse (CONTRACT §1).
-- Tokens created before keep the person in `created_by` and nothing here.
ALTER TABLE api_tokens ADD COLUMN created_by_actor TEXT;

-- The principal that approved, rejected or cancelled an invocation: its receipt names it.
ALTER TABLE invocations ADD COLUMN decided_by_principal TEXT;
