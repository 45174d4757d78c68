// A stock MCP client (the official TypeScript SDK) against Aperture's /mcp, for the Rust
// integration test `mcp::the_typescript_sdk_lists_and_calls_with_the_echo` (issue 4).
//
// Environment: APERTURE_MCP_URL, APERTURE_TOKEN, APERTURE_TOOL, APERTURE_ARGS (JSON).
// Lists tools, calls APERTURE_TOOL with the manifest echo in `_meta`, then again with a wrong
// `expected_schema_hash`; prints one JSON object: {protocolVersion, listMeta, tools, ok, denied}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const { APERTURE_MCP_URL: url, APERTURE_TOKEN: token, APERTURE_TOOL: name, APERTURE_ARGS: args } = process.env;
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "aperture-interop", version: "1.0.0" });
await client.connect(transport);

const list = await client.listTools();
const tool = list.tools.find((t) => t.name === name);
if (!tool) {
  console.error(`${name} is not listed: ${JSON.stringify(list)}`);
  process.exit(1);
}
const echo = {
  session_id: list._meta?.session_id,
  manifest_id: list._meta?.manifest_id,
  lease_id: list._meta?.lease_id,
  tool_version: tool._meta?.toolVersion,
  expected_schema_hash: tool._meta?.schemaHash,
};
const ok = await client.callTool({ name, arguments: JSON.parse(args), _meta: echo });
const denied = await client.callTool({
  name,
  arguments: JSON.parse(args),
  _meta: { ...echo, expected_schema_hash: "sha256:" + "0".repeat(64) },
});
console.log(
  JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    listMeta: list._meta ?? null,
    tools: list.tools.map((t) => t.name),
    ok,
    denied,
  }),
);
await client.close();
