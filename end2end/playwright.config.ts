import { defineConfig } from "@playwright/test";

// The server under test: a fresh data folder per run, a known bootstrap admin password, a
// port of its own. scripts/test builds the binary and the site before this runs.
const port = Number(process.env.APERTURE_E2E_PORT ?? 3107);
export const baseURL = `http://127.0.0.1:${port}`;
export const adminPassword = "e2e-admin-password";

export default defineConfig({
  testDir: "./tests",
  timeout: 60_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: [["list"]],
  globalSetup: "./global-setup.ts",
  use: {
    baseURL,
    trace: "retain-on-failure",
    launchOptions: {
      executablePath: "/usr/bin/chromium",
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
      ],
    },
  },
  webServer: {
    command: `bash ../scripts/e2e-server ${port} ${adminPassword}`,
    url: `${baseURL}/healthz`,
    reuseExistingServer: false,
    timeout: 120_000,
    stdout: "pipe",
    stderr: "pipe",
  },
});
