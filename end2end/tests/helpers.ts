import { APIRequestContext, Page, expect } from "@playwright/test";
import { adminPassword } from "../playwright.config";

/** The REST API's prefix (CONTRACT §8). */
export const API = "/api/v2/agent-tool-exposure";

/**
 * `method path` of the REST API as `token` with the JSON `data`; fails the test unless the
 * answer is a success, and returns its JSON.
 */
export async function rest(request: APIRequestContext, token: string, method: string, path: string, data?: unknown) {
  const response = await request.fetch(`${API}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}` },
    data,
  });
  expect(response.ok(), `${method} ${path}: ${response.status()} ${await response.text()}`).toBeTruthy();
  return response.json();
}

/** Waits until the wasm has hydrated the page (the app marks <body data-hydrated>). */
export async function hydrated(page: Page) {
  await expect(page.locator("body[data-hydrated=true]")).toHaveCount(1);
}

/**
 * Signs in through the form and lands on the overview, hydrated: signing in loads the overview
 * as a new document, and a link clicked before its wasm has hydrated it is followed by the
 * browser (a full page load, whose form fields hydration would then reset), not by the router.
 */
export async function signIn(page: Page, username = "admin", password = adminPassword) {
  await page.goto("/sign-in");
  await hydrated(page);
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("heading", { name: "Overview" })).toBeVisible();
  await expect(page.getByTestId("current-user")).toHaveText(username);
  await hydrated(page);
}

/** Creates an API token through the Tokens page (signed in as an admin) and returns its secret. */
export async function createToken(page: Page, actor: string, scopes: string[]): Promise<string> {
  await page.goto("/tokens");
  await hydrated(page);
  await page.getByLabel("Actor id").fill(actor);
  // The form starts with `run` checked; make the checkboxes say exactly `scopes`.
  for (const scope of ["read", "write", "run", "admin", "approve"].map((s) => `agent_tool_exposure:${s}`)) {
    const box = page.getByLabel(scope, { exact: true });
    if (scopes.includes(scope)) await box.check();
    else await box.uncheck();
  }
  await page.getByRole("button", { name: "Create token" }).click();
  const secret = await page.getByTestId("new-token-secret").getByLabel("Token secret").inputValue();
  expect(secret).toMatch(/^apt_/);
  return secret;
}

/** A stock MCP client (the official TypeScript SDK) connected to Aperture's /mcp as `token`. */
export async function mcpClient(baseURL: string, token: string) {
  const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = await import(
    "@modelcontextprotocol/sdk/client/streamableHttp.js"
  );
  const transport = new StreamableHTTPClientTransport(new URL(`${baseURL}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "aperture-e2e", version: "1.0.0" });
  await client.connect(transport);
  return client;
}
