import { test, expect } from "./fixtures";
import { API, createToken, mcpClient, signIn } from "./helpers";

const ECHO = "mcp__fixture__echo";

test("the overview charts decisions, lists deny reasons and says whether the journal verifies", async ({
  page,
  request,
  baseURL,
}) => {
  await signIn(page);
  const ops = await createToken(page, "e2e-overview-ops", ["agent_tool_exposure:admin"]);
  const agent = await createToken(page, `e2e-overview-${Date.now()}`, ["agent_tool_exposure:run"]);
  const auth = { authorization: `Bearer ${ops}` };
  expect(
    (
      await request.put(`${API}/policies/e2e-overview`, {
        headers: auth,
        data: { rules: [{ id: "echo", match: { name: ECHO }, mode: "allow" }] },
      })
    ).ok(),
  ).toBeTruthy();
  expect((await request.post(`${API}/policies/e2e-overview:activate`, { headers: auth, data: {} })).ok()).toBeTruthy();

  // One allowed call and two denials (a wrong schema hash, a tool the session was not granted).
  const client = await mcpClient(baseURL!, agent);
  const listed = await client.listTools();
  const echo = listed.tools.find((t) => t.name === ECHO)!;
  const meta = {
    session_id: listed._meta?.session_id,
    manifest_id: listed._meta?.manifest_id,
    lease_id: listed._meta?.lease_id,
    tool_version: echo._meta?.toolVersion,
    expected_schema_hash: echo._meta?.schemaHash,
  };
  expect(((await client.callTool({ name: ECHO, arguments: { text: "hi" }, _meta: meta })) as any).isError ?? false).toBe(false);
  const wrong: any = await client.callTool({
    name: ECHO,
    arguments: { text: "hi" },
    _meta: { ...meta, expected_schema_hash: "sha256:" + "1".repeat(64) },
  });
  expect(wrong.isError).toBe(true);
  const hidden: any = await client.callTool({ name: "mcp__fixture__getenv", arguments: { name: "HOME" }, _meta: meta });
  expect(hidden.isError).toBe(true);
  await client.close();

  await page.goto("/");
  const day = page.getByTestId("chart-day");
  await expect(day.locator("svg rect.allowed").first()).toBeVisible();
  await expect(day.locator("svg rect.denied").first()).toBeVisible();
  await expect(page.getByTestId("chart-day-summary")).toContainText(/\d+ calls in the last 24 hours: \d+ allowed, [1-9]\d* denied/);
  await expect(page.getByTestId("chart-week")).toBeVisible();
  const reasons = page.getByTestId("deny-reasons");
  await expect(reasons.locator('tr[data-reason="schema_hash_mismatch"]')).toBeVisible();
  await expect(reasons.locator('tr[data-reason="not_callable"]')).toBeVisible();

  // The background verifier has looked at the chain (its first pass runs at start-up).
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId("chain-status")).toHaveText(/^Verified up to record \d+$/, { timeout: 1000 });
  }).toPass({ timeout: 30_000 });

  // The deny-reason link opens the receipts browser filtered by it.
  await reasons.locator('tr[data-reason="schema_hash_mismatch"]').getByRole("link").click();
  await expect(page).toHaveURL(/\/receipts\?decision=deny&reason=schema_hash_mismatch/);
  await expect(page.getByTestId("receipt-table").locator("tbody tr").first()).toContainText("schema_hash_mismatch");
});
