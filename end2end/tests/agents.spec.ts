import { test, expect } from "./fixtures";
import { createToken, hydrated, rest, signIn } from "./helpers";

const ECHO = "mcp__fixture__echo";

// Issue 7: "A hosted agent's approval-required call parks, is approved in the dashboard
// (Playwright), and the turn finishes with the real upstream result in the transcript."
test("a hosted agent's parked call is approved in the dashboard and its turn finishes with the upstream's result", async ({
  page,
  request,
}) => {
  await signIn(page);
  const ops = await createToken(page, "hosted-ops", ["agent_tool_exposure:admin"]);
  const created = await rest(request, ops, "POST", "/tokens", {
    actor_id: "hosted-bot",
    scopes: ["agent_tool_exposure:run"],
    // Environments are a boundary: the bot may use only the one its policy is active in.
    environments: ["e2e-agents"],
  });
  const bot: string = created.secret;
  // Its own environment, so no other test's policy applies to it.
  await rest(request, ops, "PUT", "/policies/e2e-agents", {
    default_mode: "hide",
    rules: [
      {
        id: "agents-echo-needs-a-person",
        match: { name: ECHO },
        mode: "approval_required",
        reason: "a person reads what the agent echoes",
      },
    ],
  });
  await rest(request, ops, "POST", "/policies/e2e-agents:activate", { environment: "e2e-agents" });
  const agent = await rest(request, bot, "POST", "/agents", {
    environment: "e2e-agents",
    system_instruction: "Echo what you are asked to echo.",
  });
  const id: string = agent.agent_id;

  // The model (the fixture model server) calls echo; the policy parks the call.
  const turn = await rest(request, bot, "POST", `/agents/${id}/turns`, {
    message: "Please echo: hello from a hosted agent",
  });
  expect(turn.status, JSON.stringify(turn)).toBe("input_required");
  const parked = turn.events.find((e: any) => e.type === "tool_result");
  expect(parked.outcome).toBe("parked");

  // The agent's page shows it waiting, with the parked call.
  await page.goto(`/agents/${id}`);
  await hydrated(page);
  await expect(page.getByTestId("agent-status")).toHaveText("input_required");
  const waiting = page.getByTestId("agent-waiting").locator("li");
  await expect(waiting).toHaveCount(1);
  await expect(waiting).toContainText(ECHO);
  await expect(waiting).toContainText("hello from a hosted agent");
  const invocation = await waiting.getAttribute("data-invocation-id");
  expect(invocation).toMatch(/^inv_/);

  // An approver approves it in the Approvals page.
  await waiting.getByRole("link", { name: "decide in Approvals" }).click();
  await expect(page.getByRole("heading", { name: "Approvals" })).toBeVisible();
  await hydrated(page);
  const card = page.locator(`li[data-invocation-id="${invocation}"]`);
  await expect(card.getByTestId("arguments")).toContainText('"text": "hello from a hosted agent"');
  await expect(card.getByTestId("reason")).toHaveText("a person reads what the agent echoes");
  await card.getByLabel("Comment (optional)").fill("fine to echo");
  await card.getByRole("button", { name: "Approve" }).click();
  await expect(card).toHaveCount(0);

  // Nobody calls again: the runtime continues the turn, and the open agent page follows it.
  await page.goto(`/agents/${id}`);
  await hydrated(page);
  await expect(page.getByTestId("agent-status")).toHaveText("idle", { timeout: 20_000 });
  const transcript = page.getByTestId("transcript");
  const result = transcript.locator('li[data-role="tool"]');
  await expect(result).toHaveCount(1);
  await expect(result).toContainText("hello from a hosted agent");
  await expect(transcript.locator('li[data-role="assistant"]').last()).toContainText(
    "The echo tool answered: hello from a hosted agent",
  );
  await expect(page.getByTestId("agent-turns").locator("tr[data-status]")).toHaveAttribute(
    "data-status",
    "completed",
  );
  // The call with its receipts: the decision and the approval.
  const call = page.getByTestId("agent-calls").locator(`tr[data-invocation-id="${invocation}"]`);
  await expect(call).toHaveAttribute("data-status", "completed");
  await call.getByRole("link", { name: "approval" }).click();
  await expect(page.getByRole("heading", { level: 1 })).toContainText("Receipt");
  await expect(page.locator("body")).toContainText("approval");

  // The agent is listed.
  await page.goto("/agents");
  await expect(page.getByTestId("agent-table").locator(`tr[data-agent-id="${id}"]`)).toHaveAttribute(
    "data-status",
    "idle",
  );
});
