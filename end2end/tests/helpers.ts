import { Page, expect } from "@playwright/test";
import { adminPassword } from "../playwright.config";

/** Waits until the wasm has hydrated the page (the app marks <body data-hydrated>). */
export async function hydrated(page: Page) {
  await expect(page.locator("body[data-hydrated=true]")).toHaveCount(1);
}

/** Signs in through the form and lands on the overview. */
export async function signIn(page: Page, username = "admin", password = adminPassword) {
  await page.goto("/sign-in");
  await hydrated(page);
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Overview" })).toBeVisible();
  await expect(page.getByTestId("current-user")).toHaveText(username);
}
