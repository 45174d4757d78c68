// The TypeScript SDK's clients, unmodified, as stock clients of Aperture's /mcp for the Rust
// integration test `sdk_interop::the_typescript_sdks_read_get_and_answer_through_the_gateway`
// (issue 47, item 7). The tenant binds calls implicitly, so the client sends no echo.
//
// Environment: APERTURE_MCP_URL, APERTURE_TOKEN, APERTURE_SDK (`v1`: `@modelcontextprotocol/sdk`
// 1.x, 2025-11-25 with initialize; `v2`: `@modelcontextprotocol/client` pinned to
// 2026-07-28). Lists tools, calls `mcp__fixture__echo`, reads `docs://readme`, gets
// `mcp__fixture__greet`, and calls `mcp__fixture__ask` twice, answering the upstream's
// elicitation and sampling request through its own handlers; prints one JSON object.
const { APERTURE_MCP_URL: url, APERTURE_TOKEN: token, APERTURE_SDK: sdk } = process.env;
const asked = {};
const textOf = (content) => (Array.isArray(content) ? content : [content]).find((b) => b?.type === "text")?.text ?? null;
const onSampling = async (request) => {
  const params = request.params;
  asked.sampling = { text: textOf(params.messages[0].content), includeContext: params.includeContext ?? null };
  return { role: "assistant", content: { type: "text", text: "sunny" }, model: `typescript-${sdk}` };
};
const onElicitation = async (request) => {
  asked.elicitation = { message: request.params.message };
  return { action: "accept", content: { name: "Ada" } };
};
const capabilities = { sampling: {}, elicitation: { form: {} } };
const requestInit = { headers: { Authorization: `Bearer ${token}` } };

let client;
let transport;
if (sdk === "v1") {
  const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const { CreateMessageRequestSchema, ElicitRequestSchema } = await import("@modelcontextprotocol/sdk/types.js");
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
  client = new Client({ name: "aperture-items-v1", version: "1.0.0" }, { capabilities });
  client.setRequestHandler(CreateMessageRequestSchema, onSampling);
  client.setRequestHandler(ElicitRequestSchema, onElicitation);
} else {
  const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
  client = new Client(
    { name: "aperture-items-v2", version: "1.0.0" },
    { capabilities, versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  client.setRequestHandler("sampling/createMessage", onSampling);
  client.setRequestHandler("elicitation/create", onElicitation);
}
await client.connect(transport);

const listed = await client.listTools();
const echo = await client.callTool({ name: "mcp__fixture__echo", arguments: { text: "from typescript" } });
const read = await client.readResource({ uri: "docs://readme" });
const prompt = await client.getPrompt({ name: "mcp__fixture__greet", arguments: { name: "Ada" } });
const elicited = await client.callTool({ name: "mcp__fixture__ask", arguments: { kind: "elicitation" } });
const sampled = await client.callTool({ name: "mcp__fixture__ask", arguments: { kind: "sampling" } });
console.log(
  JSON.stringify({
    protocolVersion: client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion ?? null,
    tools: listed.tools.map((t) => t.name),
    echo,
    read,
    prompt,
    elicited,
    sampled,
    asked,
  }),
);
await client.close();
