import { test, expect } from "./fixtures";
import { hydrated, signIn } from "./helpers";

test("create a user, change their scopes, and they can sign in", async ({ page, browser }) => {
  await signIn(page);
  await page.goto("/users");
  await hydrated(page);
  await page.getByLabel("Username").fill("carol");
  await page.getByLabel("Initial password").fill("short");
  await page.getByRole("button", { name: "Create user" }).click();
  await expect(page.locator("#user-password-error")).toContainText("at least 12 characters");
  await expect(page.getByLabel("Username")).toHaveValue("carol");

  await page.getByLabel("Initial password").fill("carol-password-123");
  await page.getByRole("button", { name: "Create user" }).click();
  const row = page.locator("tr[data-username=carol]");
  await expect(row).toContainText("agent_tool_exposure:read");

  await row.getByRole("button", { name: "Change scopes" }).click();
  await row.getByLabel("agent_tool_exposure:approve").check();
  await row.getByRole("button", { name: "Save scopes" }).click();
  await expect(row).toContainText("agent_tool_exposure:approve");

  const other = await browser.newContext();
  const carol = await other.newPage();
  await signIn(carol, "carol", "carol-password-123");
  await carol.goto("/tokens");
  await expect(carol.getByText("Managing tokens needs the scope")).toBeVisible();
  await other.close();
});
