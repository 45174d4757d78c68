import { test, expect } from "@playwright/test";
import { hydrated, signIn } from "./helpers";

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

test("pages need a signed-in user", async ({ page }) => {
  await page.goto("/tokens");
  await expect(page).toHaveURL(/\/sign-in$/);
  await expect(page.getByRole("heading", { name: "Sign in to Aperture" })).toBeVisible();
});

test("signing in and out", async ({ page }) => {
  await signIn(page);
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/sign-in$/);
  await page.goto("/");
  await expect(page).toHaveURL(/\/sign-in$/);
});
