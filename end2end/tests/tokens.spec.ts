import { test, expect } from "./fixtures";
import { hydrated, signIn } from "./helpers";

test("create a token, see it listed, revoke it, sign out", async ({ page, request, baseURL }) => {
  await signIn(page);
  // Client-side navigation (needs the wasm router) to the Tokens page.
  await page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Tokens" }).click();
  await expect(page.getByRole("heading", { name: "API tokens" })).toBeVisible();

  await page.getByLabel("Actor id").fill("e2e-tokens-agent");
  await page.getByLabel("Label (optional)").fill("browser test");
  await page.getByLabel("agent_tool_exposure:read").check();
  await page.getByRole("button", { name: "Create token" }).click();

  const secretBox = page.getByTestId("new-token-secret");
  await expect(secretBox).toBeVisible();
  const secret = await secretBox.getByLabel("Token secret").inputValue();
  expect(secret).toMatch(/^apt_[A-Za-z0-9_-]{43}$/);

  const row = page.locator("tr", { hasText: "e2e-tokens-agent" });
  await expect(row).toHaveAttribute("data-status", "active");
  await expect(row).toContainText("agent_tool_exposure:read");
  await expect(row).toContainText("agent_tool_exposure:run");

  // The secret works against the API (read is not admin: 403, but authenticated, not 401).
  const before = await request.get(`${baseURL}/api/v2/agent-tool-exposure/tokens`, {
    headers: { authorization: `Bearer ${secret}` },
  });
  expect(before.status()).toBe(403);

  await row.getByRole("button", { name: "Revoke" }).click();
  await row.getByRole("button", { name: "Confirm revoke" }).click();
  await expect(page.locator("tr", { hasText: "e2e-tokens-agent" })).toHaveAttribute("data-status", "revoked");

  const after = await request.get(`${baseURL}/api/v2/agent-tool-exposure/tokens`, {
    headers: { authorization: `Bearer ${secret}` },
  });
  expect(after.status()).toBe(401);

  // The secret is shown once: a reload lists the token without it.
  await page.reload();
  await expect(page.locator("tr", { hasText: "e2e-tokens-agent" })).toBeVisible();
  await expect(page.getByTestId("new-token-secret")).toHaveCount(0);
  expect(await page.content()).not.toContain(secret);

  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/sign-in$/);
});

test("an invalid token form shows the error inline and keeps the input", async ({ page }) => {
  await signIn(page);
  await page.goto("/tokens");
  await hydrated(page);
  await page.getByLabel("Actor id").fill("not a valid actor");
  await page.getByLabel("Other scopes (tool scopes, separated by spaces)").fill("github:read BAD");
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(page.locator("#token-actor-error")).toContainText("letters, digits");
  await expect(page.getByLabel("Actor id")).toHaveValue("not a valid actor");
  await expect(page.getByLabel("Other scopes (tool scopes, separated by spaces)")).toHaveValue("github:read BAD");
  await expect(page.getByTestId("new-token-secret")).toHaveCount(0);
});

test("a token carries the environments it may use; a token of default cannot list prod", async ({
  page,
  request,
  baseURL,
}) => {
  await signIn(page);
  await page.goto("/tokens");
  await hydrated(page);
  await page.getByLabel("Actor id").fill("e2e-env-agent");
  await expect(page.getByLabel("Environments")).toHaveValue("default");
  await page.getByLabel("Environments").fill("Prod!");
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(page.locator("#token-environments-error")).toContainText("environment");
  await expect(page.getByLabel("Environments")).toHaveValue("Prod!");
  await page.getByLabel("Environments").fill("staging, prod");
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(page.getByTestId("new-token-secret")).toBeVisible();
  const row = page.locator("tr", { hasText: "e2e-env-agent" });
  await expect(row.getByTestId("token-environments")).toHaveText(/staging\s*prod/);

  // A token made with the form's default may not open a session in prod.
  await page.getByLabel("Actor id").fill("e2e-env-default");
  await page.getByRole("button", { name: "Create token" }).click();
  await expect(page.getByTestId("new-token-secret")).toContainText("e2e-env-default");
  const secret = await page.getByTestId("new-token-secret").getByLabel("Token secret").inputValue();
  const allowed = await request.post(`${baseURL}/api/v2/agent-tool-exposure/sessions`, {
    headers: { authorization: `Bearer ${secret}` },
    data: {},
  });
  expect(allowed.status()).toBe(201);
  const refused = await request.post(`${baseURL}/api/v2/agent-tool-exposure/sessions`, {
    headers: { authorization: `Bearer ${secret}` },
    data: { environment: "prod" },
  });
  expect(refused.status()).toBe(403);
});
