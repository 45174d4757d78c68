import { test, expect } from "./fixtures";
import { API, createToken, hydrated, mcpClient, signIn } from "./helpers";

const ECHO = "mcp__fixture__echo";
const MUTATE = "mcp__fixture__mutate";

test("describe a tool, re-sync its upstream, see sessions with their forks, drift and revocation", async ({
  page,
  request,
  baseURL,
}) => {
  await signIn(page);
  const ops = await createToken(page, "e2e-tools-ops", ["agent_tool_exposure:admin"]);
  const actor = `e2e-sessions-${Date.now()}`;
  const agent = await createToken(page, actor, ["agent_tool_exposure:run"]);
  const auth = { authorization: `Bearer ${ops}` };

  // Tools: the fixture upstream and its catalog.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Tools" }).click();
  await expect(page.getByRole("heading", { name: "Tools" })).toBeVisible();
  await hydrated(page);
  await expect(page.getByTestId("upstream-table").locator('tr[data-upstream="fixture"]')).toBeVisible();
  await page.getByTestId("upstream-table").getByRole("button", { name: "Re-sync" }).click();
  await expect(page.getByTestId("sync-report")).toContainText("Re-synced: 11 tools.");

  // An invalid descriptor is refused inline, the typed value kept; a valid one is shown.
  const add = page.getByTestId("tool-table").locator('tr[data-tool="mcp__fixture__add"]');
  await add.getByRole("button", { name: "Edit descriptor" }).click();
  const risk = page.getByLabel("Risk labels (comma separated)");
  await risk.fill("write, NOT A LABEL");
  await page.getByRole("button", { name: "Save descriptor" }).click();
  await expect(page.locator("form.descriptor .field-error").filter({ hasText: /./ }).first()).toBeVisible();
  await expect(risk).toHaveValue("write, NOT A LABEL");
  await risk.fill("write");
  await page.getByLabel("Family").fill("math");
  await page.getByRole("button", { name: "Save descriptor" }).click();
  await expect(add.getByTestId("risk")).toHaveText("write");
  await expect(add).toContainText("math");

  // A policy that lets the agent call echo and mutate.
  expect(
    (
      await request.put(`${API}/policies/e2e-sessions`, {
        headers: auth,
        data: {
          rules: [
            { id: "echo", match: { name: ECHO }, mode: "allow" },
            { id: "mutate", match: { name: MUTATE }, mode: "allow" },
          ],
        },
      })
    ).ok(),
  ).toBeTruthy();
  expect((await request.post(`${API}/policies/e2e-sessions:activate`, { headers: auth, data: {} })).ok()).toBeTruthy();

  const client = await mcpClient(baseURL!, agent);
  const listed = await client.listTools();
  const sessionId = listed._meta?.session_id as string;
  expect(sessionId).toMatch(/^ses_/);
  const fork = await request.post(`${API}/sessions/${sessionId}/forks`, {
    headers: { authorization: `Bearer ${agent}` },
    data: { fork_tools: [ECHO] },
  });
  expect(fork.status(), await fork.text()).toBe(201);
  const forkId = (await fork.json())._meta.session_id as string;

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Sessions" }).click();
  const parentRow = page.getByTestId("session-table").locator(`tr[data-session-id="${sessionId}"]`);
  await expect(parentRow).toHaveAttribute("data-status", "active");
  await expect(parentRow).toContainText(actor);
  const forkRow = page.getByTestId("session-table").locator(`tr[data-session-id="${forkId}"]`);
  await expect(forkRow).toContainText(`fork_tools: ${ECHO}`);

  // The upstream changes echo (and says so): the session's manifest has drifted.
  const mutate = listed.tools.find((t) => t.name === MUTATE)!;
  const changed: any = await client.callTool({
    name: MUTATE,
    arguments: { description: "Echo, changed by the sessions test." },
    _meta: {
      session_id: sessionId,
      manifest_id: listed._meta?.manifest_id,
      lease_id: listed._meta?.lease_id,
      tool_version: mutate._meta?.toolVersion,
      expected_schema_hash: mutate._meta?.schemaHash,
    },
  });
  expect(changed.isError ?? false, JSON.stringify(changed)).toBe(false);
  await client.close();

  await parentRow.getByRole("link").click();
  await expect(page.getByRole("heading", { name: `Session ${sessionId}` })).toBeVisible();
  await expect(page.getByTestId("manifest-tools").locator(`tr[data-tool="${ECHO}"]`)).toContainText("allow");
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId("drift")).toContainText(ECHO, { timeout: 1000 });
  }).toPass({ timeout: 15_000 });
  await expect(page.getByTestId("session-table").locator(`tr[data-session-id="${forkId}"]`)).toBeVisible();

  // Revoking the session revokes its fork.
  await hydrated(page);
  await page.getByRole("button", { name: "Revoke session and its forks" }).click();
  await expect(page.getByTestId("session-status")).toHaveText("revoked");
  await expect(page.getByTestId("session-table").locator(`tr[data-session-id="${forkId}"]`)).toHaveAttribute(
    "data-status",
    "revoked",
  );
});
