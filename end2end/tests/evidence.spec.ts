import { test, expect } from "./fixtures";
import type { Page } from "@playwright/test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { API, createToken, hydrated, signIn } from "./helpers";

const ADD = "mcp__fixture__add";
const ECHO = "mcp__fixture__echo";
const APERTURE = resolve(__dirname, "../../target/debug/aperture");

/** `aperture evidence verify` on `text`, offline: its exit status and what it said. */
function cliVerify(text: string): { ok: boolean; said: string } {
  const dir = mkdtempSync(join(tmpdir(), "aperture-evidence-"));
  const file = join(dir, "bundle.json");
  writeFileSync(file, text);
  const run = spawnSync(APERTURE, ["evidence", "verify", file], {
    encoding: "utf8",
    env: { ...process.env, APERTURE_DATA_DIR: join(dir, "none"), APERTURE_LOG: "warn" },
  });
  return { ok: run.status === 0, said: `${run.stdout}${run.stderr}` };
}

/** Verifies `text` on the Journal page, in the browser (the wasm engine). */
async function browserVerify(page: Page, text: string): Promise<string> {
  await page.getByLabel("Evidence bundle (JSON file)").setInputFiles({
    name: "bundle.json",
    mimeType: "application/json",
    buffer: Buffer.from(text),
  });
  const verdict = page.getByTestId("evidence-verdict");
  await expect(verdict).toBeVisible();
  return (await verdict.textContent()) ?? "";
}

test("a session's evidence downloads, and verifies offline, in Node and in the browser; any change fails all three", async ({
  page,
  request,
}) => {
  // The independent verifier of docs/evidence.md, in plain Node.js (an ES module).
  const { verifyEvidence } = await import("../interop/verify_evidence.mjs");
  await signIn(page);
  const ops = await createToken(page, "e2e-evidence-ops", ["agent_tool_exposure:admin"]);
  const agent = await createToken(page, `e2e-evidence-${Date.now()}`, ["agent_tool_exposure:run"]);
  const auth = { authorization: `Bearer ${ops}` };
  const as = { authorization: `Bearer ${agent}` };
  expect(
    (
      await request.put(`${API}/policies/e2e-evidence`, {
        headers: auth,
        data: {
          rules: [
            { id: "add", match: { name: ADD }, mode: "allow" },
            { id: "echo", match: { name: ECHO }, mode: "approval_required" },
          ],
        },
      })
    ).ok(),
  ).toBeTruthy();
  expect((await request.post(`${API}/policies/e2e-evidence:activate`, { headers: auth, data: {} })).ok()).toBeTruthy();

  // A session with an allowed call, a parked one and a denied one.
  const listed = await (await request.post(`${API}/sessions`, { headers: as, data: {} })).json();
  const sessionId = listed._meta.session_id as string;
  const call = async (name: string, args: object, hash?: string) => {
    const tool = listed.tools.find((t: any) => t.name === name);
    const response = await request.post(`${API}/sessions/${sessionId}/calls`, {
      headers: as,
      data: {
        name,
        arguments: args,
        _meta: {
          manifest_id: listed._meta.manifest_id,
          lease_id: listed._meta.lease_id,
          tool_version: tool._meta.toolVersion,
          expected_schema_hash: hash ?? tool._meta.schemaHash,
        },
      },
    });
    return (await response.json())._meta.receipt.decision as string;
  };
  expect(await call(ADD, { a: 1, b: 2 })).toBe("allow");
  expect(await call(ECHO, { text: "wait for me" })).toBe("park");
  expect(await call(ADD, { a: 1, b: 2 }, `sha256:${"0".repeat(64)}`)).toBe("deny");

  // Download it from the session's page.
  await page.goto(`/sessions/${sessionId}`);
  await hydrated(page);
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByTestId("download-evidence").click(),
  ]);
  const chunks: Buffer[] = [];
  for await (const chunk of (await download.createReadStream())!) chunks.push(chunk as Buffer);
  const bundle = Buffer.concat(chunks).toString("utf8");
  const parsed = JSON.parse(bundle);
  expect(parsed.format).toBe("aperture-evidence/v1");
  expect(parsed.session.session_id).toBe(sessionId);
  expect(parsed.receipts.map((r: any) => r.decision)).toEqual(expect.arrayContaining(["allow", "park", "deny"]));

  // All three verifiers accept it.
  const node = verifyEvidence(bundle);
  expect(node.receipts).toBe(parsed.receipts.length);
  const cli = cliVerify(bundle);
  expect(cli.ok, cli.said).toBe(true);
  await page.goto("/journal");
  await hydrated(page);
  expect(await browserVerify(page, bundle)).toContain("Valid: ");

  // Any change fails all three: a signed member, a proof hash, a checkpoint line.
  const changed: [string, any][] = [];
  const signed = JSON.parse(bundle);
  signed.receipts[0].actor_id = "someone-else";
  changed.push(["a signed member", signed]);
  const proof = JSON.parse(bundle);
  const hashes = proof.proofs.find((p: any) => p.hashes.length > 0).hashes;
  const bytes = Buffer.from(hashes[0], "base64");
  bytes[3] ^= 0x01;
  hashes[0] = bytes.toString("base64");
  changed.push(["a proof hash", proof]);
  const line = JSON.parse(bundle);
  const [origin, size, ...rest] = line.checkpoint.split("\n");
  line.checkpoint = [origin, String(Number(size) + 1), ...rest].join("\n");
  changed.push(["a checkpoint line", line]);
  for (const [what, value] of changed) {
    const text = JSON.stringify(value);
    expect(() => verifyEvidence(text), what).toThrow();
    const cli = cliVerify(text);
    expect(cli.ok, `${what}: ${cli.said}`).toBe(false);
    expect(await browserVerify(page, text), what).toContain("Invalid: ");
  }

  // The journal page and the overview show the checkpoint the bundle was made against.
  await page.reload();
  await hydrated(page);
  await expect(page.getByTestId("checkpoint-table").locator("tbody tr").first()).toBeVisible();
  await page.goto("/");
  await hydrated(page);
  await expect(page.getByTestId("checkpoint-status")).toContainText("records in the latest signed checkpoint");
});
