-- Issue 23: where a bound invocation's result goes, so that the worker that runs it after an
-- approval redacts it for that destination: `mcp` (an MCP or REST caller) or `hosted_agent`
-- (a hosted agent's model, and its transcript).
ALTER TABLE invocations ADD COLUMN output_to TEXT NOT NULL DEFAULT 'mcp';
