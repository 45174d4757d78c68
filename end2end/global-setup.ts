import { FullConfig } from "@playwright/test";

// Playwright's webServer waits for /healthz; this also checks that the browser bundle is served,
// so a missing `scripts/build-site` fails here with a clear message instead of as a timeout.
export default async function globalSetup(config: FullConfig) {
  const baseURL = config.projects[0].use.baseURL as string;
  const response = await fetch(`${baseURL}/pkg/aperture.js`);
  if (!response.ok) {
    throw new Error(`the dashboard bundle is not served (${response.status}); run scripts/build-site`);
  }
}
