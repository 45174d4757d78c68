// The official TypeScript SDK against Aperture's /mcp, for the Rust integration test
// `mcp::the_typescript_sdk_hears_progress_and_list_changed` (issue 27): a call with an
// `onprogress` callback (the SDK sends a progressToken; the gateway answers with a stream that
// carries the upstream's progress), then the SDK's own GET stream hears
// notifications/tools/list_changed after the test changes the policy.
//
// Environment: APERTURE_MCP_URL, APERTURE_TOKEN, APERTURE_TOOL, APERTURE_ARGS (JSON).
// Prints {"ready": true} once it listens, then one JSON object:
// {progress: [...], result, listChanged, relisted}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const { APERTURE_MCP_URL: url, APERTURE_TOKEN: token, APERTURE_TOOL: name, APERTURE_ARGS: args } = process.env;
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "aperture-interop-streams", version: "1.0.0" });
let changed;
const listChanged = new Promise((resolve) => {
  changed = resolve;
});
client.setNotificationHandler(ToolListChangedNotificationSchema, async (n) => changed(n));
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
const progress = [];
const result = await client.callTool({ name, arguments: JSON.parse(args), _meta: echo }, undefined, {
  onprogress: (p) => progress.push(p),
});
console.log(JSON.stringify({ ready: true }));
const timeout = new Promise((resolve) => setTimeout(() => resolve(null), 15000));
const notification = await Promise.race([listChanged, timeout]);
const relisted = notification ? (await client.listTools()).tools.map((t) => t.name) : null;
console.log(JSON.stringify({ progress, result, listChanged: notification, relisted }));
await client.close();
