import { test, expect } from "./fixtures";
import { hydrated, signIn } from "./helpers";
import { adminPassword } from "../playwright.config";

test("a wrong password shows an error and keeps what was typed", async ({ page }) => {
  await page.goto("/sign-in");
  await hydrated(page);
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill("definitely-wrong");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByTestId("sign-in-error")).toHaveText("wrong username or password");
  await expect(page.getByLabel("Username")).toHaveValue("admin");
  await expect(page).toHaveURL(/\/sign-in$/);
});

test("pages need a signed-in user, and signing in returns to the page asked for", async ({ page }) => {
  await page.goto("/tokens");
  await expect(page).toHaveURL(/\/sign-in\?next=%2Ftokens$/);
  await expect(page.getByRole("heading", { name: "Sign in to Aperture" })).toBeVisible();
  await hydrated(page);
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(adminPassword);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/tokens$/);
  await expect(page.getByRole("heading", { name: "API tokens" })).toBeVisible();
});

test("without JavaScript, a signed-out page is a real redirect and the form returns there", async ({
  browser,
}) => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const response = await page.goto("/receipts?decision=deny");
  // The browser followed a 303; the first answer was not a blank 200.
  expect(response?.request().redirectedFrom()?.url()).toMatch(/\/receipts\?decision=deny$/);
  await expect(page).toHaveURL(/\/sign-in\?next=%2Freceipts%3Fdecision%3Ddeny$/);
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill(adminPassword);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/receipts\?decision=deny$/);
  // The page itself, signed in (its streamed parts need the wasm to be moved into place).
  await expect(page).toHaveTitle("Aperture");
  await expect(page.getByRole("heading", { name: "Sign in to Aperture" })).toHaveCount(0);
  // A `next` that leaves the site is not followed.
  await page.goto("/sign-in?next=%2F%2Fevil.example%2F");
  await expect(page).toHaveURL(/127\.0\.0\.1:\d+\/$/);
  await context.close();
});

test("signing in and out", async ({ page }) => {
  await signIn(page);
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/sign-in$/);
  await page.goto("/");
  await expect(page).toHaveURL(/\/sign-in$/);
});

test("the page's Content-Security-Policy refuses an inline script without its nonce", async ({
  page,
  cspViolations,
}) => {
  await page.goto("/sign-in");
  await hydrated(page);
  // What a stored-XSS payload would be: an inline script the server did not sign with the nonce.
  await page
    .addScriptTag({ content: "document.body.dataset.injected = 'ran';" })
    .catch(() => undefined);
  await expect(page.locator("body")).not.toHaveAttribute("data-injected", "ran");
  await expect.poll(() => cspViolations.length).toBeGreaterThan(0);
  cspViolations.length = 0;
});
