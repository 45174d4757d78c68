import { test, expect } from "@playwright/test";
import { createToken, hydrated, mcpClient, signIn } from "../tests/helpers";

const API = "/api/v2/agent-tool-exposure";
const ECHO = "mcp__fixture__echo";
const OUT = "../docs/screenshots";

test("photograph every page with realistic data", async ({ page, request, baseURL }) => {
  test.setTimeout(180_000);
  await signIn(page);
  const ops = await createToken(page, "platform-ops", ["agent_tool_exposure:admin"]);
  const auth = { authorization: `Bearer ${ops}` };
  const agentToken = (
    await (
      await request.post(`${API}/tokens`, {
        headers: auth,
        data: { actor_id: "support-agent", scopes: ["agent_tool_exposure:run"], name: "support bot" },
      })
    ).json()
  ).secret as string;
  for (const [name, risk, family] of [
    ["mcp__fixture__echo", ["read"], "demo"],
    ["mcp__fixture__add", ["read"], "math"],
    ["mcp__fixture__read_file", ["read", "pii"], "files"],
    ["mcp__fixture__mutate", ["write"], "demo"],
    ["mcp__fixture__getenv", ["read", "secrets"], "ops"],
  ] as const) {
    await request.put(`${API}/tools/${name}`, { headers: auth, data: { risk, family } });
  }
  const policy = {
    default_mode: "hide",
    rules: [
      { id: "echo-reviewed", match: { name: ECHO }, mode: "approval_required", reason: "every echo is read by a person first" },
      { id: "reads", match: { risk_exactly: ["read"] }, mode: "allow", reason: "plain reads are safe", redaction: "safe" },
      {
        id: "files-narrowed",
        match: { family: "files" },
        mode: "allow",
        reason: "only the docs folder",
        invocation: { schema_overlay: { properties: { path: { pattern: "^docs/" } } }, max_result_bytes: 65536 },
      },
      { id: "writes", match: { risk: "write" }, mode: "staged_change", reason: "writes are applied by an admin" },
      { id: "secrets", match: { risk: "secrets" }, mode: "deny", reason: "never expose secrets" },
    ],
    redaction_profiles: { tight: { summary: "truncate", max_bytes: 2048, destinations: ["llm", "mcp"] } },
  };
  expect((await request.put(`${API}/policies/support-agents`, { headers: auth, data: policy })).ok()).toBeTruthy();
  await request.post(`${API}/policies/support-agents:activate`, { headers: auth, data: {} });

  // Traffic: allowed calls, denials, parked calls, a staged change.
  const client = await mcpClient(baseURL!, agentToken);
  const listed = await client.listTools();
  const meta = (name: string) => {
    const t = listed.tools.find((x) => x.name === name)!;
    return {
      session_id: listed._meta?.session_id,
      manifest_id: listed._meta?.manifest_id,
      lease_id: listed._meta?.lease_id,
      tool_version: t._meta?.toolVersion,
      expected_schema_hash: t._meta?.schemaHash,
    };
  };
  for (let i = 0; i < 12; i++) {
    await client.callTool({ name: "mcp__fixture__add", arguments: { a: i, b: 2 }, _meta: meta("mcp__fixture__add") });
  }
  await client.callTool({ name: "mcp__fixture__read_file", arguments: { path: "docs/guide.md" }, _meta: meta("mcp__fixture__read_file") });
  await client.callTool({ name: "mcp__fixture__read_file", arguments: { path: "/etc/passwd" }, _meta: meta("mcp__fixture__read_file") });
  await client.callTool({ name: "mcp__fixture__getenv", arguments: { name: "AWS_SECRET" }, _meta: meta("mcp__fixture__getenv") });
  await client.callTool({ name: "mcp__fixture__add", arguments: { a: 1, b: 2 }, _meta: { ...meta("mcp__fixture__add"), expected_schema_hash: "sha256:" + "0".repeat(64) } });
  await client.callTool({ name: ECHO, arguments: { text: "Refund order #4411 to the original card" }, _meta: meta(ECHO) });
  await client.callTool({ name: ECHO, arguments: { text: "Send the weekly summary to the team" }, _meta: meta(ECHO) });
  await client.callTool({ name: "mcp__fixture__mutate", arguments: { description: "Echo v2", notify: false }, _meta: meta("mcp__fixture__mutate") });
  const fork = await request.post(`${API}/sessions/${listed._meta?.session_id}/forks`, {
    headers: { authorization: `Bearer ${agentToken}` },
    data: { fork_tools: ["mcp__fixture__add"] },
  });
  expect(fork.status()).toBe(201);
  await client.close();

  // A hosted agent (against the fixture model) whose echo is approved by a person.
  const asAgent = { authorization: `Bearer ${agentToken}` };
  const hosted = await (
    await request.post(`${API}/agents`, { headers: asAgent, data: { system_instruction: "You help the support team." } })
  ).json();
  const agentId: string = hosted.agent_id;
  const turn = await (
    await request.post(`${API}/agents/${agentId}/turns`, {
      headers: asAgent,
      data: { message: "Please echo: order #4411 was refunded" },
    })
  ).json();
  expect(turn.status, JSON.stringify(turn)).toBe("input_required");
  const parkedCall = (await (await request.get(`${API}/agents/${agentId}`, { headers: asAgent })).json()).invocations[0];
  // Approved by a reviewer: neither the agent nor its token's creator.
  const reviewer = (
    await (
      await request.post(`${API}/tokens`, {
        headers: auth,
        data: { actor_id: "support-lead", scopes: ["agent_tool_exposure:approve"], name: "reviewer" },
      })
    ).json()
  ).secret as string;
  const approved = await request.post(`${API}/invocations/${parkedCall.invocation_id}:approve`, {
    headers: { authorization: `Bearer ${reviewer}` },
    data: { args_hash: parkedCall.args_hash, comment: "fine to send" },
  });
  expect(approved.ok()).toBeTruthy();
  await expect(async () => {
    const now = await (await request.get(`${API}/agents/${agentId}`, { headers: asAgent })).json();
    expect(now.agent.status).toBe("idle");
  }).toPass({ timeout: 20_000 });

  const shot = async (path: string, file: string, ready: () => Promise<void>) => {
    await page.goto(path);
    await hydrated(page);
    await ready();
    await page.screenshot({ path: `${OUT}/${file}`, fullPage: true });
  };
  // Wait until the background verifier has seen every record written above.
  const head = Number(
    (await (await request.get(`${API}/receipts?limit=1`, { headers: auth })).json()).receipts[0].seq,
  );
  await expect(async () => {
    await page.goto("/");
    const text = await page.getByTestId("chain-status").textContent();
    expect(Number(/record (\d+)/.exec(text ?? "")?.[1] ?? 0)).toBeGreaterThanOrEqual(head);
  }).toPass({ timeout: 60_000 });
  await shot("/", "overview.png", async () => {
    await expect(page.getByTestId("chart-day")).toBeVisible();
  });
  await shot("/policies", "policies.png", async () => {
    await expect(page.getByTestId("policy-table")).toContainText("support-agents");
  });
  await shot("/policies/support-agents", "policy-editor.png", async () => {
    await page.getByLabel("Actor", { exact: true }).fill("support-agent");
    await page.getByTestId("rule-0").getByLabel("Mode", { exact: true }).selectOption("confirmation_required");
    await expect(page.getByTestId("preview-table").locator(`tr[data-tool="${ECHO}"]`)).toHaveAttribute("data-mode", "confirmation_required");
    await page.getByRole("button", { name: "Review changes" }).click();
    await expect(page.getByTestId("diff")).toBeVisible();
  });
  await shot("/approvals", "approvals.png", async () => {
    await expect(page.locator("li.parked").first()).toBeVisible();
  });
  await shot("/receipts", "receipts.png", async () => {
    await expect(page.getByTestId("receipt-table")).toBeVisible();
  });
  await page.goto("/receipts?decision=deny");
  const first = page.getByTestId("receipt-table").locator("tbody tr").first().getByRole("link");
  const href = await first.getAttribute("href");
  await shot(href!, "receipt.png", async () => {
    await expect(page.getByTestId("verdict")).toContainText("Valid");
  });
  await shot("/tools", "tools.png", async () => {
    await expect(page.getByTestId("tool-table")).toBeVisible();
  });
  await shot("/sessions", "sessions.png", async () => {
    await expect(page.getByTestId("session-table")).toBeVisible();
  });
  await shot(`/sessions/${listed._meta?.session_id}`, "session.png", async () => {
    await expect(page.getByTestId("manifest-tools")).toBeVisible();
  });
  await shot(`/agents/${agentId}`, "agent.png", async () => {
    await expect(page.getByTestId("agent-status")).toHaveText("idle");
    await expect(page.getByTestId("transcript")).toContainText("The echo tool answered");
  });
});
