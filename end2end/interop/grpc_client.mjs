// A Node gRPC client (@grpc/grpc-js + @grpc/proto-loader, the .proto read at run time) against
// Aperture's gRPC service on the server's own port, for the Rust test
// `grpc::a_node_grpc_client_calls_the_service`.
//
// Environment: APERTURE_ADDRESS (host:port), APERTURE_ADMIN, APERTURE_AGENT, APERTURE_FIXTURE
// (the fixture upstream's command, JSON). Prints one JSON object.
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";

const { APERTURE_ADDRESS: address, APERTURE_ADMIN: admin, APERTURE_AGENT: agent, APERTURE_FIXTURE: fixture } =
  process.env;
const root = fileURLToPath(new URL("../../proto", import.meta.url));
const definition = protoLoader.loadSync("agent_tool_exposure/v1/service.proto", {
  includeDirs: [root],
  keepCase: true,
  longs: Number,
  defaults: false,
  oneofs: true,
});
const { AgentToolExposureService } = grpc.loadPackageDefinition(definition).agent_tool_exposure.v1;
const client = new AgentToolExposureService(address, grpc.credentials.createInsecure());

const call = (method, message, token) =>
  new Promise((resolve, reject) => {
    const metadata = new grpc.Metadata();
    if (token) metadata.add("authorization", `Bearer ${token}`);
    client[method](message, metadata, (error, answer) => (error ? reject(error) : resolve(answer)));
  });
const failure = async (promise) => {
  try {
    await promise;
    return { code: "OK" };
  } catch (e) {
    return { code: grpc.status[e.code], details: e.message, hasDetails: e.metadata.get("grpc-status-details-bin").length > 0 };
  }
};

// google.protobuf.Struct / Value as proto-loader gives them, to and from JSON.
const toValue = (v) =>
  v === null
    ? { nullValue: "NULL_VALUE" }
    : typeof v === "boolean"
      ? { boolValue: v }
      : typeof v === "number"
        ? { numberValue: v }
        : typeof v === "string"
          ? { stringValue: v }
          : Array.isArray(v)
            ? { listValue: { values: v.map(toValue) } }
            : { structValue: toStruct(v) };
const toStruct = (o) => ({ fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, toValue(v)])) });
const fromValue = (v) =>
  v.kind === "structValue"
    ? fromStruct(v.structValue)
    : v.kind === "listValue"
      ? (v.listValue.values ?? []).map(fromValue)
      : v.kind === "nullValue"
        ? null
        : v[v.kind];
const fromStruct = (s) => Object.fromEntries(Object.entries(s.fields ?? {}).map(([k, v]) => [k, fromValue(v)]));

const errors = {
  unauthenticated: await failure(call("ListPolicies", {})),
  permission: await failure(call("ListTokens", {}, agent)),
  notFound: await failure(call("GetPolicy", { id: "nope" }, admin)),
  invalid: await failure(call("PutPolicy", { id: "p", policy: toStruct({ rules: [{ id: "r", mode: "sometimes" }] }) }, admin)),
};
const put = await call(
  "PutPolicy",
  { id: "reads", policy: toStruct({ rules: [{ id: "reads", match: { risk: "read" }, mode: "allow" }] }) },
  admin,
);
await call("ActivatePolicy", { id: "reads" }, admin);
await call("RegisterUpstream", { name: "fixture", transport: "stdio", command: JSON.parse(fixture) }, admin);
await call("PutToolDescriptor", { name: "mcp__fixture__echo", risk: ["read"] }, admin);
const listing = await call("CreateSession", {}, agent);
const meta = fromStruct(listing.meta);
const tool = listing.tools.map(fromStruct).find((t) => t.name === "mcp__fixture__echo");
const echo = {
  session_id: meta.session_id,
  manifest_id: meta.manifest_id,
  lease_id: meta.lease_id,
  tool_version: tool._meta.toolVersion,
  expected_schema_hash: tool._meta.schemaHash,
};
const called = await call(
  "CallTool",
  { session_id: meta.session_id, name: "mcp__fixture__echo", arguments: toStruct({ text: "from grpc-js" }), meta: toStruct(echo) },
  agent,
);
console.log(
  JSON.stringify({
    errors,
    put: { policy_id: put.policy_id, version: put.version },
    called: { is_error: called.is_error ?? false, text: fromStruct(called.content[0]).text, receipt: fromStruct(called.meta).receipt },
  }),
);
client.close();
