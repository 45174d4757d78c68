// The TypeScript SDK's 2026 client (`@modelcontextprotocol/client`, pinned to protocol revision
// 2026-07-28: no initialize, protocol metadata in every request) against Aperture's /mcp, for
// the Rust test `mcp::the_typescript_sdk_speaks_2026_07_28`.
//
// Environment: APERTURE_MCP_URL, APERTURE_TOKEN, APERTURE_TOOL, APERTURE_ARGS (JSON). Lists,
// calls APERTURE_TOOL with the echo and a progress callback, then with a wrong schema hash;
// opens a `subscriptions/listen` stream, prints {"ready": true}, waits up to 15 s for
// notifications/tools/list_changed, and prints {protocolVersion, progress, ok, denied,
// honored, listChanged}.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const { APERTURE_MCP_URL: url, APERTURE_TOKEN: token, APERTURE_TOOL: name, APERTURE_ARGS: args } = process.env;
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client(
  { name: "aperture-interop-2026", version: "1.0.0" },
  { versionNegotiation: { mode: { pin: "2026-07-28" } } },
);
let changed;
const listChanged = new Promise((resolve) => {
  changed = resolve;
});
client.setNotificationHandler("notifications/tools/list_changed", async (n) => changed(n));
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
const ok = await client.callTool({ name, arguments: JSON.parse(args), _meta: echo }, { onprogress: (p) => progress.push(p) });
const denied = await client.callTool({
  name,
  arguments: JSON.parse(args),
  _meta: { ...echo, expected_schema_hash: "sha256:" + "0".repeat(64) },
});
const subscription = await client.listen({ toolsListChanged: true });
console.log(JSON.stringify({ ready: true }));
const timeout = new Promise((resolve) => setTimeout(() => resolve(null), 15000));
const notification = await Promise.race([listChanged, timeout]);
console.log(
  JSON.stringify({
    protocolVersion: client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null,
    progress,
    ok,
    denied,
    honored: subscription.honoredFilter ?? null,
    listChanged: notification,
  }),
);
await subscription.close?.();
await client.close();
