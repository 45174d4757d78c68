-- Issue 47 (item 3): what a 2025-era client declared at `initialize` that it can do for
-- servers (sampling, elicitation, elicitation_url, roots; space-separated): the gateway relays
-- an upstream's request on a call's stream only to a client that declared it.
ALTER TABLE mcp_sessions ADD COLUMN client_abilities TEXT NOT NULL DEFAULT '';
