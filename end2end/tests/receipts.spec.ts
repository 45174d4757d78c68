import { test, expect } from "./fixtures";
import { API, createToken, hydrated, mcpClient, signIn } from "./helpers";

const ECHO = "mcp__fixture__echo";

test("filter receipts, page through them, export them, and verify one in the browser", async ({
  page,
  request,
  baseURL,
}) => {
  await signIn(page);
  const ops = await createToken(page, "e2e-receipts-ops", ["agent_tool_exposure:admin"]);
  const actor = `e2e-receipts-${Date.now()}`;
  const agent = await createToken(page, actor, ["agent_tool_exposure:run"]);
  const auth = { authorization: `Bearer ${ops}` };
  expect(
    (
      await request.put(`${API}/policies/e2e-receipts`, {
        headers: auth,
        data: { rules: [{ id: "echo", match: { name: ECHO }, mode: "allow", reason: "receipts test" }] },
      })
    ).ok(),
  ).toBeTruthy();
  expect((await request.post(`${API}/policies/e2e-receipts:activate`, { headers: auth, data: {} })).ok()).toBeTruthy();

  // 26 allowed calls (a decision and an execution record each) and 3 denied ones.
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
  for (let i = 0; i < 26; i++) {
    const r: any = await client.callTool({ name: ECHO, arguments: { text: `call ${i}` }, _meta: meta });
    expect(r.isError ?? false).toBe(false);
  }
  for (let i = 0; i < 3; i++) {
    const r: any = await client.callTool({
      name: ECHO,
      arguments: { text: "wrong hash" },
      _meta: { ...meta, expected_schema_hash: "sha256:" + "0".repeat(64) },
    });
    expect(r.isError).toBe(true);
  }
  await client.close();

  // Filter by actor and decision in the form (a GET form: the filters are in the URL).
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Receipts" }).click();
  await hydrated(page);
  await page.getByLabel("Actor").fill(actor);
  await page.getByLabel("Decision").selectOption("deny");
  await page.getByRole("button", { name: "Apply filters" }).click();
  await expect(page).toHaveURL(/decision=deny/);
  const rows = page.getByTestId("receipt-table").locator("tbody tr");
  await expect(rows).toHaveCount(3);
  for (const decision of await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-decision")))) {
    expect(decision).toBe("deny");
  }
  await expect(rows.first()).toContainText("schema_hash_mismatch");

  // All of the actor's records: 1 manifest + 26 × 2 + 3 = 56, so two pages of 50 and 6.
  await page.getByLabel("Decision").selectOption("");
  await page.getByRole("button", { name: "Apply filters" }).click();
  await expect(page).not.toHaveURL(/decision=deny/);
  await expect(rows).toHaveCount(50);
  const firstPage = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-receipt-id")));
  await page.getByRole("link", { name: "Older →" }).click();
  await expect(rows).toHaveCount(6);
  const secondPage = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-receipt-id")));
  expect(secondPage.filter((id) => firstPage.includes(id))).toEqual([]);
  await expect(page.getByRole("link", { name: "Older →" })).toHaveCount(0);
  await page.getByRole("link", { name: "← Newest" }).click();
  await expect(rows).toHaveCount(50);

  // The export holds exactly the filtered set, one signed receipt per line.
  const exported = await page.request.get(`/ui/receipts/export.jsonl?actor_id=${encodeURIComponent(actor)}`);
  expect(exported.ok()).toBeTruthy();
  expect(exported.headers()["content-type"]).toContain("application/x-ndjson");
  const lines = (await exported.text()).trim().split("\n").map((l) => JSON.parse(l));
  expect(lines).toHaveLength(56);
  expect(new Set(lines.map((r) => r.actor_id))).toEqual(new Set([actor]));
  expect(lines.map((r) => r.receipt_id).slice(0, 50)).toEqual(firstPage);
  for (const r of lines) expect(r.signature).toMatch(/^[A-Za-z0-9_-]+$/);

  // Open a denied receipt: the wasm engine verifies signature, record hash and chain links.
  await page.getByLabel("Decision").selectOption("deny");
  await page.getByRole("button", { name: "Apply filters" }).click();
  await expect(rows).toHaveCount(3);
  await rows.first().getByRole("link").click();
  await expect(page.getByRole("heading", { name: /^Receipt rcp_/ })).toBeVisible();
  await expect(page.getByTestId("verdict")).toContainText("Valid: signature, stored columns, record hash and chain links all check out.");
  await expect(page.locator('[data-check="signature"]')).toContainText("valid Ed25519 signature by ed25519:");
  await expect(page.getByTestId("canonical")).toContainText('"reason":"schema_hash_mismatch"');

  // A reload renders the receipt on the server first (readable before hydration), then verifies.
  await page.reload();
  await hydrated(page);
  await expect(page.getByTestId("verdict")).toContainText("Valid");
});
