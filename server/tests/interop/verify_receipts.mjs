// Independent receipt verification (issue 4): Node's own Ed25519 (node:crypto) over RFC 8785
// bytes made here, in JavaScript, without any Aperture code.
//
// stdin: {"keys": [JWK…], "receipts": [receipt…]}   stdout: one line per receipt,
// "<receipt_id> valid" or "<receipt_id> invalid: <why>". Exit 0 when it ran (the caller reads
// the verdicts), 2 on bad input.
import { createPublicKey, verify } from "node:crypto";

// RFC 8785: ECMAScript number and string serialization (JSON.stringify does both as the RFC
// requires), object keys sorted by UTF-16 code units (JavaScript's default string order).
function jcs(value) {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return "[" + value.map(jcs).join(",") + "]";
  const keys = Object.keys(value).sort();
  return "{" + keys.map((k) => JSON.stringify(k) + ":" + jcs(value[k])).join(",") + "}";
}

const input = await new Promise((resolve) => {
  let text = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => resolve(text));
});
let parsed;
try {
  parsed = JSON.parse(input);
} catch (e) {
  console.error("bad input: " + e.message);
  process.exit(2);
}
const keys = new Map(parsed.keys.map((jwk) => [jwk.kid, createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, format: "jwk" })]));
for (const receipt of parsed.receipts) {
  const { signature, ...unsigned } = receipt;
  const key = keys.get(receipt.key_id);
  if (!key) {
    console.log(`${receipt.receipt_id} invalid: unknown key ${receipt.key_id}`);
    continue;
  }
  const ok = verify(null, Buffer.from(jcs(unsigned), "utf8"), key, Buffer.from(signature ?? "", "base64url"));
  console.log(ok ? `${receipt.receipt_id} valid` : `${receipt.receipt_id} invalid: signature`);
}
