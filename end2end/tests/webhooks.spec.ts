import { test, expect } from "./fixtures";
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { createToken, hydrated, mcpClient, rest, signIn } from "./helpers";

// Not echo: tools_sessions.spec.ts leaves echo held for review (its upstream changed it).
const TOOL = "mcp__fixture__getenv";
const ARGUMENT = "WEBHOOK_E2E_ARGUMENT_5C1D";

type Delivery = { headers: IncomingHttpHeaders; body: string };

/** A webhook receiver on this host that accepts everything and keeps it. */
async function receiver() {
  const got: Delivery[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      got.push({ headers: req.headers, body });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/approvals-hook`, got, close: () => server.close() };
}

/** Checks a delivery's Standard Webhooks signature with the secret, as a receiver would. */
function verify(secret: string, d: Delivery) {
  const id = String(d.headers["webhook-id"]);
  const timestamp = String(d.headers["webhook-timestamp"]);
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.${d.body}`).digest("base64");
  const offered = String(d.headers["webhook-signature"])
    .split(" ")
    .map((s) => s.split(","))
    .filter(([version]) => version === "v1")
    .map(([, sig]) => Buffer.from(sig));
  expect(
    offered.some((sig) => sig.length === expected.length && timingSafeEqual(sig, Buffer.from(expected))),
    `signature of ${id}`,
  ).toBeTruthy();
  expect(Math.abs(Date.now() / 1000 - Number(timestamp))).toBeLessThan(300);
  return JSON.parse(d.body);
}

test("an admin adds a webhook that hears parked calls, signed and without arguments; the approvals page follows events, not a timer", async ({
  page,
  request,
  baseURL,
}) => {
  const hook = await receiver();
  await signIn(page);
  const ops = await createToken(page, "e2e-webhooks-ops", ["agent_tool_exposure:admin"]);
  const agent = (
    await rest(request, ops, "POST", "/tokens", {
      actor_id: "e2e-webhooks-agent",
      scopes: ["agent_tool_exposure:run"],
    })
  ).secret as string;
  await rest(request, ops, "PUT", "/policies/e2e-webhooks", {
    default_mode: "hide",
    rules: [{ id: "getenv-waits", match: { name: TOOL }, mode: "approval_required", reason: "a person looks" }],
  });
  await rest(request, ops, "POST", "/policies/e2e-webhooks:activate", { environment: "default" });

  // The Webhooks page: a refused URL is said next to its field; a good one is added and its
  // secret shown once.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Webhooks" }).click();
  await expect(page.getByRole("heading", { name: "Webhooks", exact: true })).toBeVisible();
  await hydrated(page);
  await page.getByLabel("URL", { exact: true }).fill("ftp://files.example.com/drop");
  await page.getByRole("button", { name: "Add webhook" }).click();
  await expect(page.locator("#webhook-url-error")).toContainText("not http or https");
  await page.getByLabel("URL", { exact: true }).fill(hook.url);
  await page.getByRole("button", { name: "Add webhook" }).click();
  const secret = await page.getByTestId("new-webhook-secret").getByLabel("Webhook signing secret").inputValue();
  expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
  const card = page.locator(`[data-testid="webhook"]`, { hasText: hook.url });
  await expect(card).toBeVisible();

  // The approvals page opens its event stream and asks for the queue only when told to.
  const asked: string[] = [];
  page.on("request", (r) => {
    if (r.url().includes("/ui/approvals/")) asked.push(new URL(r.url()).pathname);
  });
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Approvals" }).click();
  await hydrated(page);
  await expect.poll(() => asked.filter((p) => p === "/ui/approvals/events").length).toBe(1);
  const waitingBefore = Number(await page.getByTestId("waiting-count").textContent());

  const client = await mcpClient(baseURL!, agent);
  const listed = await client.listTools();
  const tool = listed.tools.find((t) => t.name === TOOL)!;
  expect(tool, JSON.stringify(listed.tools.map((t) => t.name))).toBeTruthy();
  const meta = {
    session_id: listed._meta?.session_id,
    manifest_id: listed._meta?.manifest_id,
    lease_id: listed._meta?.lease_id,
    tool_version: tool._meta?.toolVersion,
    expected_schema_hash: tool._meta?.schemaHash,
  };
  const parked: any = await client.callTool({ name: TOOL, arguments: { name: ARGUMENT }, _meta: meta });
  expect(parked._meta?.status, JSON.stringify(parked)).toBe("input_required");
  const id = parked._meta.invocation_id as string;
  await client.close();

  // The page hears of it at once.
  await expect(page.getByTestId("waiting-count")).toHaveText(String(waitingBefore + 1));
  await expect(page.locator(`li[data-invocation-id="${id}"]`)).toBeVisible();

  // The receiver got it, signed, with a link and no argument values.
  await expect.poll(() => hook.got.length).toBeGreaterThanOrEqual(1);
  const delivery = hook.got.find((d) => d.body.includes(id))!;
  expect(delivery, JSON.stringify(hook.got)).toBeTruthy();
  expect(delivery.headers["webhook-id"]).toMatch(/^msg_/);
  const event = verify(secret, delivery);
  expect(event.type).toBe("invocation.parked");
  expect(event.data.tool).toBe(TOOL);
  expect(event.data.actor_id).toBe("e2e-webhooks-agent");
  expect(event.data.approval_url).toBe(`${baseURL}/approvals#${id}`);
  expect(delivery.body).not.toContain(ARGUMENT);

  // Quiet for longer than the old 3 s refresh: no request for the queue at all.
  const before = asked.filter((p) => p === "/ui/approvals/list").length;
  await page.waitForTimeout(7_000);
  expect(asked.filter((p) => p === "/ui/approvals/list").length).toBe(before);
  expect(asked.filter((p) => p === "/ui/approvals/events").length).toBe(1);

  // The link in the payload opens the approvals page at that call.
  await page.goto(event.data.approval_url);
  await hydrated(page);
  await expect(page.locator(":target")).toHaveAttribute("data-invocation-id", id);

  // The overview names the call that has waited longest, linked to its approval.
  await page.goto("/");
  await hydrated(page);
  const oldest = page.getByTestId("oldest-waiting");
  await expect(oldest).toContainText("longest waiting");
  await expect(oldest.getByRole("link")).toHaveAttribute("href", /^\/approvals#inv_/);

  // Rejecting it is announced too.
  await page.goto("/approvals");
  await hydrated(page);
  const waiting = page.locator(`li[data-invocation-id="${id}"]`);
  await waiting.getByLabel("Comment (optional)").fill("not now");
  await waiting.getByRole("button", { name: "Reject" }).click();
  await expect(waiting).toHaveCount(0);
  await expect.poll(() => hook.got.filter((d) => d.body.includes(id)).length).toBe(2);
  const decided = verify(secret, hook.got.find((d) => d.body.includes("invocation.decided") && d.body.includes(id))!);
  expect(decided.data.status).toBe("rejected");
  // The Webhooks page shows both deliveries and their attempts.
  await page.goto("/webhooks");
  await hydrated(page);
  const rows = card.locator(`tr`, { hasText: id });
  await expect(rows).toHaveCount(2);
  for (const row of await rows.all()) {
    await expect(row).toHaveAttribute("data-status", "delivered");
    await row.locator("summary").click();
    await expect(row.getByTestId("delivery-attempt")).toContainText("HTTP 204");
  }

  // Deleted: gone from the page (and journaled, as the API tests check).
  await card.getByRole("button", { name: "Delete" }).click();
  await card.getByRole("button", { name: "Confirm delete" }).click();
  await expect(card).toHaveCount(0);
  hook.close();
});
