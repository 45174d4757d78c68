import { test, expect } from "./fixtures";
import AxeBuilder from "@axe-core/playwright";
import { hydrated, signIn } from "./helpers";

// Every page, signed in as the admin, checked by axe-core against WCAG 2.1 A and AA (labels,
// names, contrast, landmarks, ARIA). Runs last (files run in name order), so the pages hold the other specs' data.
const pages = [
  "/",
  "/policies",
  "/policies/builtin_safe_read",
  "/policies/e2e-support",
  "/tools",
  "/sessions",
  "/receipts",
  "/journal",
  "/approvals",
  "/agents",
  "/tokens",
  "/users",
];

test("every page passes axe's WCAG 2.1 A and AA rules", async ({ page }) => {
  await signIn(page);
  // The check can fail: an input without a label on the page is reported.
  await page.evaluate(() => document.querySelector("main")!.insertAdjacentHTML("beforeend", '<input id="axe-probe">'));
  const probe = await new AxeBuilder({ page }).withTags(["wcag2a"]).analyze();
  expect(probe.violations.map((v) => v.id)).toContain("label");
  for (const path of pages) {
    await page.goto(path);
    await hydrated(page);
    await expect(page.locator("main h1")).toBeVisible();
    const results = await new AxeBuilder({ page }).withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]).analyze();
    const found = results.violations.map(
      (v) => `${path}: ${v.id} (${v.impact}) ${v.help}: ${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ")}`,
    );
    expect(found, found.join("\n")).toEqual([]);
  }
  // A hosted agent's page (the agents spec made one, with a transcript, calls and receipts).
  await page.goto("/agents");
  await page.getByTestId("agent-table").locator("a").first().click();
  await expect(page.getByTestId("transcript")).toBeVisible();
  await hydrated(page);
  const agentResults = await new AxeBuilder({ page }).withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]).analyze();
  const agentFound = agentResults.violations.map((v) => `${page.url()}: ${v.id} (${v.impact}) ${v.help}`);
  expect(agentFound, agentFound.join("\n")).toEqual([]);
  // The sign-in page too, signed out.
  await page.context().clearCookies();
  await page.goto("/sign-in");
  await hydrated(page);
  const signInResults = await new AxeBuilder({ page }).withTags(["wcag2a", "wcag2aa"]).analyze();
  expect(signInResults.violations.map((v) => v.id)).toEqual([]);
});
