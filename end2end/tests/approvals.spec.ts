import { test, expect } from "./fixtures";
import { createToken, hydrated, mcpClient, rest, signIn } from "./helpers";

const ECHO = "mcp__fixture__echo";

test("parked calls appear without reloading; approving runs the real upstream call, rejecting answers the agent", async ({
  page,
  browser,
  request,
  baseURL,
}) => {
  await signIn(page);
  // An operator token (made by the admin) sets things up, and makes the agent's token: the
  // admin, who will approve, is then neither the caller nor its token's creator.
  const ops = await createToken(page, "e2e-ops", ["agent_tool_exposure:admin"]);
  const created = await rest(request, ops, "POST", "/tokens", {
    actor_id: "e2e-approvals-agent",
    scopes: ["agent_tool_exposure:run"],
  });
  const agent: string = created.secret;
  await rest(request, ops, "PUT", "/policies/e2e-approvals", {
    default_mode: "hide",
    rules: [
      {
        id: "echo-needs-a-person",
        match: { name: ECHO },
        mode: "approval_required",
        reason: "a person reads every echo first",
      },
    ],
  });
  await rest(request, ops, "POST", "/policies/e2e-approvals:activate", { environment: "default" });
  await rest(request, ops, "POST", "/users", {
    username: "e2e-viewer",
    password: "e2e-viewer-password",
    scopes: ["agent_tool_exposure:read"],
  });

  // The approver opens the queue before anything is parked.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Approvals" }).click();
  await expect(page.getByRole("heading", { name: "Approvals" })).toBeVisible();
  await hydrated(page);
  const waitingBefore = Number(await page.getByTestId("waiting-count").textContent());

  // The agent calls echo three times; each call is parked.
  const client = await mcpClient(baseURL!, agent);
  const listed = await client.listTools();
  const echo = listed.tools.find((t) => t.name === ECHO)!;
  expect(echo, JSON.stringify(listed.tools.map((t) => t.name))).toBeTruthy();
  const meta = {
    session_id: listed._meta?.session_id,
    manifest_id: listed._meta?.manifest_id,
    lease_id: listed._meta?.lease_id,
    tool_version: echo._meta?.toolVersion,
    expected_schema_hash: echo._meta?.schemaHash,
  };
  const park = async (text: string) => {
    const result: any = await client.callTool({ name: ECHO, arguments: { text }, _meta: meta });
    expect(result._meta?.status, JSON.stringify(result)).toBe("input_required");
    return result._meta.invocation_id as string;
  };
  const approveId = await park("hello from the approvals test");
  const rejectId = await park("please reject me");
  const viewerId = await park("left for the viewer");

  // They appear in the open page without a reload, shown exactly as they will run.
  await expect(page.getByTestId("waiting-count")).toHaveText(String(waitingBefore + 3));
  const card = page.locator(`li[data-invocation-id="${approveId}"]`);
  await expect(card.getByTestId("arguments")).toContainText('"text": "hello from the approvals test"');
  await expect(card.getByTestId("reason")).toHaveText("a person reads every echo first");
  await expect(card).toContainText("e2e-approvals-agent");
  await expect(card).toContainText("echo-needs-a-person");
  await expect(card.getByTestId("args-hash")).toHaveText(/^sha256:[0-9a-f]{64}$/);
  // The tool as the agent was granted it: what the approval is bound to (issue 25).
  await expect(card.getByTestId("definition-hash")).toHaveText(/^sha256:[0-9a-f]{64}$/);
  await expect(card.getByTestId("tool-description")).toHaveText("Returns its text argument.");
  await expect(card.getByTestId("tool-changed")).toHaveCount(0);
  await expect(card.getByTestId("age")).toHaveText(/^\d+ (s|min)$/);

  await card.getByLabel("Comment (optional)").fill("looks harmless");
  await card.getByRole("button", { name: "Approve" }).click();
  await expect(card).toHaveCount(0);
  // The worker runs the call against the fixture upstream; its answer is the call's result.
  const done = page.getByTestId("recent-table").locator(`tr[data-invocation-id="${approveId}"]`);
  await expect(done).toHaveAttribute("data-status", "completed");
  await expect(done).toContainText("hello from the approvals test");
  await expect(done).toContainText("looks harmless");

  const other = page.locator(`li[data-invocation-id="${rejectId}"]`);
  await other.getByLabel("Comment (optional)").fill("not today");
  await other.getByRole("button", { name: "Reject" }).click();
  await expect(other).toHaveCount(0);
  const rejected = page.getByTestId("recent-table").locator(`tr[data-invocation-id="${rejectId}"]`);
  await expect(rejected).toHaveAttribute("data-status", "rejected");
  await expect(rejected).toContainText("not today");

  // The agent gets both outcomes by retrying with the invocation ids.
  const after: any = await client.callTool({
    name: ECHO,
    arguments: { text: "hello from the approvals test" },
    _meta: { ...meta, invocation_id: approveId },
  });
  expect(after.isError ?? false).toBe(false);
  expect(JSON.stringify(after.content)).toContain("hello from the approvals test");
  const refused: any = await client.callTool({
    name: ECHO,
    arguments: { text: "please reject me" },
    _meta: { ...meta, invocation_id: rejectId },
  });
  expect(refused.isError).toBe(true);
  await client.close();

  // A reader sees the queue but no approve button, and the server refuses them if they try.
  const viewerContext = await browser.newContext();
  const viewer = await viewerContext.newPage();
  await signIn(viewer, "e2e-viewer", "e2e-viewer-password");
  await viewer.goto("/approvals");
  await hydrated(viewer);
  await expect(viewer.getByTestId("no-approve-scope")).toBeVisible();
  const waiting = viewer.locator(`li[data-invocation-id="${viewerId}"]`);
  await expect(waiting).toBeVisible();
  await expect(waiting.getByRole("button", { name: "Approve" })).toHaveCount(0);
  await expect(viewer.getByRole("button", { name: "Reject" })).toHaveCount(0);
  // Not the caller and no approve scope: no cancel button either.
  await expect(waiting.getByTestId("cancel")).toHaveCount(0);
  const argsHash = await waiting.getByTestId("args-hash").textContent();
  const attempt = await viewer.evaluate(
    async ({ id, hash }) => {
      const r = await fetch("/ui/approvals/decide", {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ id, action: "approve", args_hash: hash }).toString(),
      });
      return { status: r.status, body: await r.text() };
    },
    { id: viewerId, hash: argsHash! },
  );
  expect(attempt.body).toContain("permission_denied");
  expect(attempt.status).toBeGreaterThanOrEqual(400);
  await viewer.reload();
  await expect(viewer.locator(`li[data-invocation-id="${viewerId}"]`)).toHaveAttribute("data-status", "input_required");
  await viewerContext.close();

  // The approver cancels the last one (issue 27): it leaves the queue, recorded as cancelled,
  // and nothing ran.
  const last = page.locator(`li[data-invocation-id="${viewerId}"]`);
  await last.getByTestId("cancel").click();
  await expect(last).toHaveCount(0);
  const cancelled = page.getByTestId("recent-table").locator(`tr[data-invocation-id="${viewerId}"]`);
  await expect(cancelled).toHaveAttribute("data-status", "cancelled");
  const view = await rest(request, ops, "GET", `/invocations/${viewerId}`);
  expect(view.result._meta.receipt.reason).toBe("cancelled");
});
