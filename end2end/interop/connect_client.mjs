// A stock Connect client (@connectrpc/connect + @connectrpc/connect-node) generated from the
// service's .proto (protoc-gen-es, by `buf generate --template interop/buf.gen.yaml`), against
// Aperture's Connect mount, for the Rust test `grpc::a_connect_client_generated_from_the_proto_calls_the_service`.
//
// Environment: APERTURE_URL, APERTURE_ADMIN, APERTURE_AGENT (tokens), APERTURE_FIXTURE (the
// fixture upstream's command, JSON), APERTURE_CONNECT_FORMAT (`binary`, connect-node's default,
// or `json`). Prints one JSON object: what each call answered, and the
// code of each error it provoked.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AgentToolExposureService } from "./gen/agent_tool_exposure/v1/service_pb.js";

const {
  APERTURE_URL: baseUrl,
  APERTURE_ADMIN: admin,
  APERTURE_AGENT: agent,
  APERTURE_FIXTURE: fixture,
  APERTURE_CONNECT_FORMAT: format,
} = process.env;
const transport = createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: format === "binary" });
const client = createClient(AgentToolExposureService, transport);
const as = (token) => ({ headers: { authorization: `Bearer ${token}` } });
const failure = async (call) => {
  try {
    await call();
    return { code: "ok" };
  } catch (e) {
    const error = ConnectError.from(e);
    return { code: Code[error.code], message: error.rawMessage, details: error.details.map((d) => d.type ?? d.desc?.typeName) };
  }
};

const errors = {
  unauthenticated: await failure(() => client.listPolicies({})),
  permission: await failure(() => client.listTokens({}, as(agent))),
  notFound: await failure(() => client.getPolicy({ id: "nope" }, as(admin))),
  invalid: await failure(() =>
    client.putPolicy({ id: "p", policy: { rules: [{ id: "r", mode: "sometimes" }] } }, as(admin)),
  ),
};
const put = await client.putPolicy(
  { id: "reads", policy: { rules: [{ id: "reads", match: { risk: "read" }, mode: "allow" }] } },
  as(admin),
);
const activated = await client.activatePolicy({ id: "reads" }, as(admin));
const registered = await client.registerUpstream(
  { name: "fixture", transport: "stdio", command: JSON.parse(fixture) },
  as(admin),
);
// A 64-bit integer field (JSON: a string) reaches the REST route as the number it is.
const described = await client.putToolDescriptor({ name: "mcp__fixture__echo", risk: ["read"], priceCents: 2n }, as(admin));
const listing = await client.createSession({}, as(agent));
const tool = listing.tools.find((t) => t.name === "mcp__fixture__echo");
const echo = {
  session_id: listing.meta.session_id,
  manifest_id: listing.meta.manifest_id,
  lease_id: listing.meta.lease_id,
  tool_version: tool._meta.toolVersion,
  expected_schema_hash: tool._meta.schemaHash,
};
const called = await client.callTool(
  { sessionId: listing.meta.session_id, name: "mcp__fixture__echo", arguments: { text: "from Connect" }, meta: echo },
  as(agent),
);
// The call's two receipts (its decision and its execution).
const receipts = await client.listReceipts({ tool: "mcp__fixture__echo", limit: 5n }, as(admin));
console.log(
  JSON.stringify({
    errors,
    put: { policyId: put.policyId, version: Number(put.version) },
    activeIn: activated.activeIn,
    synced: Number(registered.sync.tools),
    called: { isError: called.isError, text: called.content[0].text, receipt: called.meta.receipt },
    receipts: receipts.receipts.length,
    priceCents: Number(described.priceCents),
  }),
);
