import { test as base, expect, Page } from "@playwright/test";

export { expect };

/**
 * Every test runs with a watch on the browser's console: a page whose script, style, frame or
 * fetch the Content-Security-Policy refused fails the test (Chromium reports each refusal there).
 * A test that provokes a violation on purpose reads and clears `cspViolations`.
 */
export const test = base.extend<{ cspViolations: string[] }>({
  cspViolations: [
    async ({ context }, use) => {
      const violations: string[] = [];
      const watch = (page: Page) =>
        page.on("console", (message) => {
          const text = message.text();
          if (/Content Security Policy/i.test(text)) {
            violations.push(`${page.url()}: ${text}`);
          }
        });
      context.pages().forEach(watch);
      context.on("page", watch);
      await use(violations);
      expect(violations, "Content-Security-Policy violations").toEqual([]);
    },
    { auto: true },
  ],
});
