import { test, expect } from "./fixtures";
import type { Page } from "@playwright/test";
import { API, createToken, hydrated, mcpClient, rest, signIn } from "./helpers";

const ECHO = "mcp__fixture__echo";

/** The preview row of a tool. */
function previewRow(page: Page, tool: string) {
  return page.getByTestId("preview-table").locator(`tr[data-tool="${tool}"]`);
}

test("editing a rule changes the live preview before saving; the saved version is what the server grants", async ({
  page,
  baseURL,
}) => {
  await signIn(page);
  const agentToken = await createToken(page, "e2e-policy-agent", ["agent_tool_exposure:run"]);

  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Policies" }).click();
  await expect(page.getByRole("heading", { name: "Policies" })).toBeVisible();
  await expect(page.getByTestId("policy-table")).toContainText("builtin_safe_read");
  await page.getByLabel("Policy id").fill("e2e-support");
  await page.getByRole("button", { name: "Open editor" }).click();
  await expect(page).toHaveURL(/\/policies\/e2e-support$/);
  await expect(page.getByTestId("policy-version")).toContainText("Not saved yet");

  // The preview imagines a session of the agent; the fixture's tools have no descriptor yet,
  // so with no rule they are all hidden.
  await page.getByLabel("Actor", { exact: true }).fill("e2e-policy-agent");
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "hide");
  const unnarrowedHash = await previewRow(page, ECHO).getAttribute("data-schema-hash");

  // Add a rule for echo: the preview follows as we type, with nothing saved.
  await page.getByRole("button", { name: "Add rule" }).click();
  const rule = page.getByTestId("rule-0");
  await rule.getByLabel("Value", { exact: true }).fill(ECHO);
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "allow");
  await expect(previewRow(page, ECHO)).toContainText("rule-1");
  await rule.getByLabel("Mode", { exact: true }).selectOption("approval_required");
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "approval_required");
  await rule.getByLabel("Mode", { exact: true }).selectOption("allow");

  // Narrow the schema: the advertised schema and its hash change in the preview.
  await rule.getByText("Invocation: narrowing and limits").click();
  await rule.getByLabel("Schema overlay (JSON Schema; may only narrow)").fill(
    '{"properties": {"text": {"maxLength": 12}}}',
  );
  await expect(previewRow(page, ECHO)).not.toHaveAttribute("data-schema-hash", unnarrowedHash!);
  await expect(previewRow(page, ECHO).locator("pre.schema")).toContainText('"maxLength": 12', {
    useInnerText: false,
  });
  await expect(page.getByTestId("policy-version")).toContainText("Not saved yet");

  // An invalid entry: the error appears next to the field, the typed text stays, saving is held.
  const maxResult = rule.getByLabel("Max result (bytes)");
  await maxResult.fill("-5");
  await expect(rule.locator(`[id$="-max_result_bytes-error"]`)).toContainText("must not be negative");
  await expect(maxResult).toHaveValue("-5");
  await expect(page.getByTestId("problems")).toContainText("rules[0].invocation.max_result_bytes");
  const badJson = rule.getByLabel("Fixed arguments (JSON object)");
  await badJson.fill('{"text": ');
  await expect(rule.locator(`[id$="-fixed_arguments-error"]`)).toContainText("not valid JSON");
  await expect(badJson).toHaveValue('{"text": ');
  await page.getByRole("button", { name: "Review changes" }).click();
  await expect(page.getByRole("button", { name: "Save as version 1" })).toBeDisabled();
  await expect(page.getByTestId("review")).toContainText("Fix the 2 problem(s)");
  await maxResult.fill("");
  await badJson.fill("");
  await expect(page.getByTestId("problems")).toContainText("No problems");

  // The diff of a new policy is all additions; saving makes version 1.
  await expect(page.getByTestId("diff").locator(".add").filter({ hasText: `"name": "${ECHO}"` })).toHaveCount(1);
  await expect(page.getByTestId("diff").locator(".del")).toHaveCount(0);
  await page.getByRole("button", { name: "Save as version 1" }).click();
  await expect(page.getByTestId("policy-version")).toContainText("Version 1 saved by user:admin");
  await expect(page.getByTestId("version-table").locator("tr[data-version]")).toHaveCount(1);
  const previewedHash = await previewRow(page, ECHO).getAttribute("data-schema-hash");

  await page.getByRole("button", { name: "Activate for new sessions" }).click();
  await expect(page.getByTestId("active-in")).toHaveText("Active in: default");

  // What the browser previewed is what the server grants to that actor.
  const client = await mcpClient(baseURL!, agentToken);
  const listed = await client.listTools();
  const echo = listed.tools.find((t) => t.name === ECHO);
  expect(echo, JSON.stringify(listed.tools.map((t) => t.name))).toBeTruthy();
  expect(echo!._meta?.schemaHash).toBe(previewedHash);
  expect((echo!.inputSchema.properties as any).text.maxLength).toBe(12);
  expect(listed.tools.map((t) => t.name)).toEqual([ECHO]);
  await client.close();

  // A second version: the review shows exactly what changed against version 1.
  await rule.getByLabel("Mode", { exact: true }).selectOption("deny");
  await expect(page.getByTestId("policy-version")).toContainText("unsaved changes");
  await page.getByRole("button", { name: "Review changes" }).click();
  const diff = page.getByTestId("diff");
  await expect(page.getByTestId("review")).toContainText("Changes against version 1");
  await expect(diff.locator(".del")).toHaveCount(1);
  await expect(diff.locator(".del")).toContainText('"mode": "allow"');
  await expect(diff.locator(".add")).toHaveCount(1);
  await expect(diff.locator(".add")).toContainText('"mode": "deny"');
  await page.getByRole("button", { name: "Save as version 2" }).click();
  await expect(page.getByTestId("policy-version")).toContainText("Version 2 saved by user:admin");
  await expect(page.getByTestId("version-table").locator("tr[data-version]")).toHaveCount(2);

  // The list shows the new version and where it is active; a reload renders it on the server.
  await page.goto("/policies");
  const row = page.getByTestId("policy-table").locator('tr[data-policy-id="e2e-support"]');
  await expect(row).toContainText("2");
  await expect(row).toContainText("default");
});

test("rules can be reordered and removed from the keyboard; the preview follows", async ({ page }) => {
  await signIn(page);
  await page.goto("/policies/e2e-order");
  await hydrated(page);
  await page.getByLabel("Actor", { exact: true }).fill("someone");
  await page.getByRole("button", { name: "Add rule" }).click();
  await page.getByRole("button", { name: "Add rule" }).click();
  const first = page.getByTestId("rule-0");
  const second = page.getByTestId("rule-1");
  await first.getByLabel("Value", { exact: true }).fill(ECHO);
  await first.getByLabel("Mode", { exact: true }).selectOption("deny");
  await second.getByLabel("Value", { exact: true }).fill(ECHO);
  await second.getByLabel("Mode", { exact: true }).selectOption("allow");
  // First match decides.
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "deny");
  await page.getByRole("button", { name: "Move rule 2 up" }).focus();
  await page.keyboard.press("Enter");
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "allow");
  await expect(page.getByTestId("rule-0").getByLabel("Rule id")).toHaveValue("rule-2");
  await page.getByRole("button", { name: "Remove rule 1" }).click();
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "deny");
  await expect(page.locator("[data-testid^=rule-]")).toHaveCount(1);
});

test("a redaction profile made in the form decides what each destination of a rule's output gets", async ({
  page,
  baseURL,
}) => {
  await signIn(page);
  const agentToken = await createToken(page, "e2e-redaction-agent", ["agent_tool_exposure:run"]);
  await page.goto("/policies/e2e-redaction");
  await hydrated(page);
  await page.getByLabel("Actor", { exact: true }).fill("e2e-redaction-agent");

  await page.getByRole("button", { name: "Add rule" }).click();
  const rule = page.getByTestId("rule-0");
  await rule.getByLabel("Value", { exact: true }).fill(ECHO);
  await expect(previewRow(page, ECHO)).toHaveAttribute("data-mode", "allow");

  // A profile for MCP callers only, cut to 16 bytes; a bad size is named at its field.
  await page.getByRole("button", { name: "Add profile" }).click();
  const profile = page.locator(".profile.panel").last();
  await profile.getByLabel("Profile name").fill("mcp-short");
  const maxBytes = profile.getByLabel("Max bytes");
  await maxBytes.fill("sixteen");
  await expect(page.getByTestId("problems")).toContainText("redaction_profiles.mcp-short.max_bytes");
  await expect(profile).toContainText("must be a whole number");
  await maxBytes.fill("16");
  for (const d of ["llm", "transcript", "logs"]) {
    await profile.getByLabel(d, { exact: true }).uncheck();
  }
  await profile.getByLabel("mcp", { exact: true }).check();
  await rule.getByLabel("Redaction profile").selectOption("mcp-short");
  await expect(page.getByTestId("problems")).toContainText("No problems");
  await page.getByRole("button", { name: "Review changes" }).click();
  await page.getByRole("button", { name: "Save as version 1" }).click();
  await expect(page.getByTestId("policy-version")).toContainText("Version 1 saved");
  await page.getByRole("button", { name: "Activate for new sessions" }).click();
  await expect(page.getByTestId("active-in")).toHaveText("Active in: default");

  const text = "0123456789abcdefghijklmnopqrstuvwxyz";
  const callEcho = async () => {
    const client = await mcpClient(baseURL!, agentToken);
    const listed = await client.listTools();
    const echo = listed.tools.find((t) => t.name === ECHO)!;
    expect(echo, JSON.stringify(listed.tools.map((t) => t.name))).toBeTruthy();
    const result: any = await client.callTool({
      name: ECHO,
      arguments: { text },
      _meta: {
        session_id: listed._meta?.session_id,
        manifest_id: listed._meta?.manifest_id,
        lease_id: listed._meta?.lease_id,
        tool_version: echo._meta?.toolVersion,
        expected_schema_hash: echo._meta?.schemaHash,
      },
    });
    await client.close();
    expect(result.isError, JSON.stringify(result)).toBe(false);
    return result.content.map((c: any) => c.text).join("\n") as string;
  };
  // MCP callers get the first 16 bytes and a note of what was cut.
  const cut = await callEcho();
  expect(cut).toContain("0123456789abcdef");
  expect(cut).not.toContain("ghijklmnop");
  expect(cut).toContain("[truncated");

  // The profile no longer lists `mcp`: MCP callers get only the withheld notice.
  await profile.getByLabel("mcp", { exact: true }).uncheck();
  await profile.getByLabel("llm", { exact: true }).check();
  await page.getByRole("button", { name: "Review changes" }).click();
  await page.getByRole("button", { name: "Save as version 2" }).click();
  await expect(page.getByTestId("policy-version")).toContainText("Version 2 saved");
  await page.getByRole("button", { name: "Activate for new sessions" }).click();
  await expect(page.getByTestId("version-table").locator("tr[data-version]")).toHaveCount(2);
  // New sessions get version 2 once the activation has landed.
  await expect.poll(callEcho, { timeout: 10_000 }).toContain("may not be sent to mcp");
  expect(await callEcho()).not.toContain("0123456789");
});

// Issue 28, item 1: "Impact" replays the draft over the recorded calls and shows, per tool and
// actor, how many would move from one mode to another, with links to example receipts.
test("Impact replays the draft over the recorded calls and links example receipts", async ({ page, request }) => {
  await signIn(page);
  const ops = await createToken(page, "e2e-impact-ops", ["agent_tool_exposure:admin"]);
  // An environment of its own, so that no other test's policy applies to its calls.
  const bot: string = (
    await rest(request, ops, "POST", "/tokens", {
      actor_id: "e2e-impact-bot",
      scopes: ["agent_tool_exposure:run"],
      environments: ["e2e-impact"],
    })
  ).secret;
  await rest(request, ops, "PUT", "/policies/e2e-impact", {
    rules: [{ id: "echo-allowed", match: { name: ECHO }, mode: "allow" }],
  });
  await rest(request, ops, "POST", "/policies/e2e-impact:activate", { environment: "e2e-impact" });
  const listing = await rest(request, bot, "POST", "/sessions", { environment: "e2e-impact" });
  const tool = listing.tools.find((t: any) => t.name === ECHO);
  const meta = {
    session_id: listing._meta.session_id,
    manifest_id: listing._meta.manifest_id,
    lease_id: listing._meta.lease_id,
    tool_version: tool._meta.toolVersion,
    expected_schema_hash: tool._meta.schemaHash,
  };
  for (const text of ["one", "two"]) {
    const result = await rest(request, bot, "POST", `/sessions/${listing._meta.session_id}/calls`, {
      name: ECHO,
      arguments: { text },
      _meta: meta,
    });
    expect(result.isError, JSON.stringify(result)).toBe(false);
  }

  // The draft parks echo: both calls would wait for a person.
  await page.goto("/policies/e2e-impact");
  await hydrated(page);
  await page.getByTestId("rule-0").getByLabel("Mode", { exact: true }).selectOption("approval_required");
  const impact = page.getByTestId("impact");
  await impact.getByRole("button", { name: "Replay" }).click();
  const row = impact.locator(`tr[data-tool="${ECHO}"][data-actor="e2e-impact-bot"]`);
  await expect(row).toHaveAttribute("data-from", "allow");
  await expect(row).toHaveAttribute("data-to", "approval_required");
  await expect(row.locator("td").nth(4)).toHaveText("2");
  await expect(impact.getByTestId("impact-summary")).toContainText("calls replayed");
  await expect(page.getByTestId("policy-version")).toContainText("unsaved changes");

  // An example is the call's own decision receipt.
  await row.getByRole("link").first().click();
  await expect(page).toHaveURL(/\/receipts\/rcp_/);
  await expect(page.getByTestId("canonical")).toContainText('"actor_id":"e2e-impact-bot"');
  await expect(page.getByTestId("canonical")).toContainText('"kind":"decision"');
});

// Issue 28, item 3: the preview stays in view (beside the form, sticky, on wide screens; pinned
// by a toggle on narrow ones) and marks what the last edit changed, tool by tool.
test("editing a rule near the top of a long policy marks the change in the preview, in view", async ({
  page,
  request,
}) => {
  await signIn(page);
  const ops = await createToken(page, "e2e-sticky-ops", ["agent_tool_exposure:admin"]);
  const rules = [{ id: "echo-rule", match: { name: ECHO }, mode: "allow" }];
  for (let i = 0; i < 14; i++) {
    rules.push({ id: `other-${i}`, match: { name: `mcp__elsewhere__tool_${i}` }, mode: "hide" });
  }
  const put = await request.fetch(`${API}/policies/e2e-sticky`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ops}` },
    data: { rules },
  });
  expect(put.ok(), await put.text()).toBeTruthy();

  await page.setViewportSize({ width: 1400, height: 900 });
  await page.goto("/policies/e2e-sticky");
  await hydrated(page);
  await expect(page.getByTestId("rule-14")).toBeAttached();
  const row = previewRow(page, ECHO);
  await expect(row).toHaveAttribute("data-mode", "allow");
  await expect(row).not.toHaveAttribute("data-changed", "true");
  await page.getByTestId("rule-0").getByLabel("Mode", { exact: true }).selectOption("approval_required");
  await expect(row).toHaveAttribute("data-changed", "true");
  await expect(row.locator(".what-changed")).toHaveText("mode allow → approval_required");
  await expect(page.getByTestId("preview-changes")).toHaveText("1 tool changed by the last edit (marked).");
  // Beside the rule just edited, without scrolling.
  await expect(row).toBeInViewport();
  await expect(page.getByTestId("rule-0").getByLabel("Mode", { exact: true })).toBeInViewport();
  // The next edit marks what it changed, and only that.
  await page.getByTestId("rule-0").getByLabel("Value", { exact: true }).fill(`${ECHO}-not`);
  await expect(row).toHaveAttribute("data-changed", "true");
  await expect(row.locator(".what-changed")).toHaveText("mode approval_required → hide; rule echo-rule → default");

  // Far down the form, the preview is still beside it (sticky).
  await page.getByTestId("rule-14").getByLabel("Mode", { exact: true }).scrollIntoViewIfNeeded();
  await page.getByTestId("rule-14").getByLabel("Mode", { exact: true }).selectOption("deny");
  await expect(page.getByTestId("rule-14").getByLabel("Mode", { exact: true })).toBeInViewport();
  await expect(page.getByTestId("preview").getByRole("heading", { name: "Live preview" })).toBeInViewport();

  // Narrow: the preview is below the form until pinned over it.
  await page.setViewportSize({ width: 800, height: 900 });
  await page.evaluate(() => window.scrollTo(0, 0));
  await expect(page.getByTestId("preview")).not.toBeInViewport();
  await page.getByRole("button", { name: "Pin the preview" }).click();
  await expect(page.getByTestId("preview")).toBeInViewport();
  await expect(page.getByRole("button", { name: "Unpin the preview" })).toHaveAttribute("aria-pressed", "true");
});

test("a rule for resources or prompts previews them as it is typed, and survives saving", async ({ page, request }) => {
  await signIn(page);
  await page.goto("/policies/e2e-items");
  await hydrated(page);
  const resource = (uri: string) => page.getByTestId("preview-resources").locator(`tr[data-item="${uri}"]`);
  const prompt = (name: string) => page.getByTestId("preview-prompts").locator(`tr[data-item="${name}"]`);
  // No rule names them: every resource and prompt is hidden, whatever default_mode says.
  await page.getByLabel("Mode of tools no rule matches").selectOption("allow");
  await expect(resource("docs://readme")).toHaveAttribute("data-mode", "hide");
  await expect(prompt("mcp__fixture__greet")).toHaveAttribute("data-mode", "hide");

  await page.getByRole("button", { name: "Add rule" }).click();
  const docs = page.getByTestId("rule-0");
  await docs.getByLabel("Selects").selectOption("resources");
  await docs.getByLabel("URI (exact, or a prefix ending *)").fill("docs://*");
  await expect(resource("docs://readme")).toHaveAttribute("data-mode", "allow");
  await expect(resource("docs://readme")).toContainText("rule-1");
  await expect(page.getByTestId("preview-templates").locator('tr[data-item="docs://pages/{page}"]')).toHaveAttribute(
    "data-listed",
    "true",
  );
  await expect(resource("secret://keys/one")).toHaveAttribute("data-mode", "hide");
  // A tool condition does not belong on a resource rule: the error is next to the rule.
  await docs.getByRole("button", { name: "Add condition" }).click();
  await docs.getByLabel("Condition", { exact: true }).selectOption("family");
  await docs.getByLabel("Value", { exact: true }).fill("x");
  await expect(page.getByTestId("problems")).toContainText("rules[0].match");
  await docs.getByRole("button", { name: "Remove condition" }).click();
  await expect(page.getByTestId("problems")).toContainText("No problems");

  await page.getByRole("button", { name: "Add rule" }).click();
  const greet = page.getByTestId("rule-1");
  await greet.getByLabel("Selects").selectOption("prompts");
  await greet.getByLabel("Prompt (canonical name, or a prefix ending *)").fill("mcp__fixture__greet");
  await expect(prompt("mcp__fixture__greet")).toHaveAttribute("data-mode", "allow");
  await greet.getByLabel("Mode", { exact: true }).selectOption("deny");
  await expect(prompt("mcp__fixture__greet")).toHaveAttribute("data-mode", "deny");
  await expect(prompt("mcp__fixture__greet")).toHaveAttribute("data-changed", "true");

  // A tool rule says what its tools may ask of the client.
  await page.getByRole("button", { name: "Add rule" }).click();
  const ask = page.getByTestId("rule-2");
  await ask.getByLabel("Value", { exact: true }).fill(ECHO);
  await ask.getByLabel("elicitation", { exact: true }).check();

  await page.getByRole("button", { name: "Review changes" }).click();
  await page.getByRole("button", { name: "Save as version 1" }).click();
  await expect(page.getByTestId("policy-version")).toContainText("Version 1 saved by user:admin");

  // Rendered again by the server: the rules are still what they select.
  await page.reload();
  await hydrated(page);
  await expect(page.getByTestId("rule-0").getByLabel("Selects")).toHaveValue("resources");
  await expect(page.getByTestId("rule-0").getByLabel("URI (exact, or a prefix ending *)")).toHaveValue("docs://*");
  await expect(page.getByTestId("rule-1").getByLabel("Selects")).toHaveValue("prompts");
  await expect(page.getByTestId("rule-2").getByLabel("elicitation", { exact: true })).toBeChecked();
  await expect(resource("docs://readme")).toHaveAttribute("data-mode", "allow");
  await expect(page.getByTestId("policy-version")).not.toContainText("unsaved changes");
});
