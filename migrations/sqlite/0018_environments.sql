-- Issue 23: environments are a boundary, not a hint. Tokens and users carry the environments
-- they may open sessions in (a JSON list; "*" is every environment). What existed before keeps
-- every environment; new tokens and users get the tenant's default environment unless given.
ALTER TABLE api_tokens ADD COLUMN environments TEXT NOT NULL DEFAULT '["*"]';
ALTER TABLE users ADD COLUMN environments TEXT NOT NULL DEFAULT '["*"]';
