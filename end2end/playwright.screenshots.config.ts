import { defineConfig } from "@playwright/test";
import base from "./playwright.config";

// `scripts/screenshots`: the same server and browser as the tests, a wide window, and only the
// script that fills the dashboard with data and photographs each page into docs/screenshots.
export default defineConfig({
  ...base,
  testDir: "./screenshots",
  use: { ...base.use, viewport: { width: 1440, height: 1000 }, colorScheme: "light" },
});
