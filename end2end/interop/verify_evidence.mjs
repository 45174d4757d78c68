// An independent verifier of Aperture evidence bundles (`aperture-evidence/v1`, docs/evidence.md),
// in plain Node.js (20+) with built-in modules only. It checks what `aperture evidence verify`
// (engine/src/evidence.rs) checks, in the same order, without sharing any code with it:
//
//   import { verifyEvidence } from "./verify_evidence.mjs";
//   const summary = verifyEvidence(text, { trustedKeys, witnesses, quorum });  // throws on failure
//
//   node verify_evidence.mjs <bundle.json|-> [trusted-jwks.json] [--witness <vkey>]... [--quorum N]
//
// A bundle that verifies proves that its receipts and manifest documents were signed by the keys
// used, and that each receipt is in the tenant's journal tree whose signed checkpoint it carries.
// It does not prove that the bundle holds every record of the session.

import crypto from "node:crypto";
import fs from "node:fs";
import { pathToFileURL } from "node:url";

/** The `format` member of a bundle. */
export const FORMAT = "aperture-evidence/v1";

// ---------------------------------------------------------------------------------------------
// RFC 8785 (JCS)
// ---------------------------------------------------------------------------------------------

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The RFC 8785 text of a JSON value (as `JSON.parse` returns it). Members sorted by their names as
 * UTF-16 code unit sequences, no whitespace, strings and numbers as ECMAScript prints them.
 * @param {unknown} value
 * @returns {string}
 */
export function canonicalize(value) {
  if (value === null || value === true || value === false) return String(value);
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) throw new Error("cannot canonicalize a non-finite number");
      return JSON.stringify(value);
    case "string":
      if (LONE_SURROGATE.test(value)) throw new Error("cannot canonicalize a lone surrogate");
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value)) return `[${value.map(canonicalize).join(",")}]`;
      // Array.prototype.sort without a comparator compares UTF-16 code units.
      const names = Object.keys(value).sort();
      return `{${names.map((n) => `${canonicalize(n)}:${canonicalize(value[n])}`).join(",")}}`;
    }
    default:
      throw new Error(`cannot canonicalize a ${typeof value}`);
  }
}

/** The RFC 8785 bytes (UTF-8) of a JSON value. */
export function canonicalBytes(value) {
  return Buffer.from(canonicalize(value), "utf8");
}

// ---------------------------------------------------------------------------------------------
// Encodings, hashes
// ---------------------------------------------------------------------------------------------

const sha256 = (...parts) => {
  const h = crypto.createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest();
};

/** Standard base64 with padding, canonical (no stray bits, no whitespace); null otherwise. */
function decodeBase64(text) {
  if (typeof text !== "string") return null;
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(text)) return null;
  const bytes = Buffer.from(text, "base64");
  return bytes.toString("base64") === text ? bytes : null;
}

/** base64url without padding, canonical; null otherwise. */
function decodeBase64Url(text) {
  if (typeof text !== "string" || !/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
    return null;
  }
  const bytes = Buffer.from(text, "base64url");
  return bytes.toString("base64url") === text ? bytes : null;
}

/** RFC 6962 leaf hash: SHA-256(0x00 ‖ leaf). */
export function leafHash(leaf) {
  return sha256(Buffer.from([0]), leaf);
}

/** RFC 6962 node hash: SHA-256(0x01 ‖ left ‖ right). */
export function nodeHash(left, right) {
  return sha256(Buffer.from([1]), left, right);
}

/**
 * RFC 9162 §2.1.3.2: checks that `leaf` (a leaf hash) is leaf `index` of the tree of `size` leaves
 * whose root is `root`. Throws an Error saying why not.
 * @param {Buffer} leaf @param {bigint|number} index @param {bigint|number} size
 * @param {Buffer[]} proof @param {Buffer} root
 */
export function verifyInclusion(leaf, index, size, proof, root) {
  let fn = BigInt(index);
  let sn = BigInt(size) - 1n;
  if (fn > sn) throw new Error("the leaf is not in the tree");
  let r = leaf;
  for (const p of proof) {
    if (sn === 0n) throw new Error("the proof has the wrong number of hashes");
    if ((fn & 1n) === 1n || fn === sn) {
      r = nodeHash(p, r);
      while ((fn & 1n) === 0n && fn !== 0n) {
        fn >>= 1n;
        sn >>= 1n;
      }
    } else {
      r = nodeHash(r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) throw new Error("the proof has the wrong number of hashes");
  if (!r.equals(root)) throw new Error("the proof does not lead to the root hash");
}

// ---------------------------------------------------------------------------------------------
// Ed25519, verified strictly (as ed25519-dalek's `verify_strict`): S < L, the public key is a
// point of the curve, and neither it nor R is of small order. OpenSSL (node:crypto) checks S and
// the equation, comparing the R it computes with the signature's R byte for byte (so an R that is
// not a canonical point encoding fails there); the small-order checks are done here: OpenSSL
// alone accepts, for instance, R = identity and S = 0 under the identity as public key.
// ---------------------------------------------------------------------------------------------

const P = (1n << 255n) - 19n;
const L = (1n << 252n) + 27742317777372353535851937790883648493n;

function modPow(base, exp, m) {
  let result = 1n;
  base %= m;
  while (exp > 0n) {
    if (exp & 1n) result = (result * base) % m;
    base = (base * base) % m;
    exp >>= 1n;
  }
  return result;
}

const mod = (a) => ((a % P) + P) % P;
const D = mod(-121665n * modPow(121666n, P - 2n, P));

function littleEndian(bytes) {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]);
  return n;
}

/** The y coordinate of an encoded point (sign bit dropped, reduced mod p as decoders do). */
const yOf = (encoded) => mod(littleEndian(encoded) & ((1n << 255n) - 1n));

/** Whether an encoded point decompresses: (y² − 1) / (d·y² + 1) is a square mod p. */
function onCurve(encoded) {
  const y = yOf(encoded);
  const yy = mod(y * y);
  const w = mod((yy - 1n) * modPow(mod(D * yy + 1n), P - 2n, P));
  return w === 0n || modPow(w, (P - 1n) / 2n, P) === 1n;
}

// The y coordinates of the 8 points of small order: 1 (the identity), −1 (order 2), 0 (order 4)
// and the two of the order-8 points.
const SMALL_ORDER_Y = new Set(
  [
    "0100000000000000000000000000000000000000000000000000000000000000",
    "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  ].map((hex) => yOf(Buffer.from(hex, "hex"))),
);
const smallOrder = (encoded) => SMALL_ORDER_Y.has(yOf(encoded));

const SPKI_ED25519 = Buffer.from("302a300506032b6570032100", "hex");

/** A public key from its 32 raw bytes: {raw, key}, or null when it is not a usable point. */
function ed25519Key(raw) {
  if (raw.length !== 32 || !onCurve(raw)) return null;
  const key = crypto.createPublicKey({
    key: Buffer.concat([SPKI_ED25519, raw]),
    format: "der",
    type: "spki",
  });
  return { raw: Buffer.from(raw), key, smallOrder: smallOrder(raw) };
}

function verifyStrict(pub, message, signature) {
  if (signature.length !== 64) return false;
  if (littleEndian(signature.subarray(32)) >= L) return false;
  if (pub.smallOrder || smallOrder(signature.subarray(0, 32))) return false;
  return crypto.verify(null, message, pub.key, signature);
}

// Decoded keys by their JWK members (a bundle names a few keys many times).
const decodedJwks = new Map();

/** The public key of a JWK, or throws what is wrong with it (as the Rust verifier words it). */
function keyOfJwk(jwk) {
  const id = JSON.stringify([jwk.kty, jwk.crv, jwk.x]);
  if (!decodedJwks.has(id)) {
    if (decodedJwks.size >= 1024) decodedJwks.clear();
    try {
      decodedJwks.set(id, { key: decodeJwk(jwk) });
    } catch (error) {
      decodedJwks.set(id, { error: error.message });
    }
  }
  const { key, error } = decodedJwks.get(id);
  if (error) throw new Error(error);
  return key;
}

function decodeJwk(jwk) {
  if (jwk.kty !== "OKP") throw new Error(`unsupported kty \`${jwk.kty}\`, expected OKP`);
  if (jwk.crv !== "Ed25519") throw new Error(`unsupported crv \`${jwk.crv}\`, expected Ed25519`);
  const raw = decodeBase64Url(jwk.x);
  if (!raw || raw.length !== 32) throw new Error("x must be 32 bytes, base64url without padding");
  const key = ed25519Key(raw);
  if (!key) throw new Error("x is not a valid Ed25519 public key");
  return key;
}

/** Checks a base64url `signature` over `bytes` by the JWK whose kid is `keyId`. */
function verifySigned(bytes, signature, keyId, jwks) {
  const jwk = jwks.find((k) => k.kid === keyId);
  if (!jwk) throw new Error(`unknown key id \`${keyId}\``);
  let key;
  try {
    key = keyOfJwk(jwk);
  } catch (e) {
    throw new Error(`key \`${jwk.kid}\`: ${e.message}`);
  }
  const sig = decodeBase64Url(signature);
  if (!sig || sig.length !== 64) {
    throw new Error("the signature is not 64 bytes of base64url without padding");
  }
  if (!verifyStrict(key, bytes, sig)) throw new Error("the signature does not match");
}

// ---------------------------------------------------------------------------------------------
// C2SP signed notes, checkpoints, cosignatures
// ---------------------------------------------------------------------------------------------

const NOTE_ED25519 = 0x01;
const COSIGNATURE_V1 = 0x04;
const MAX_SIGNATURES = 100;
const DASH = "\u2014 ";
const I64_MAX = (1n << 63n) - 1n;
const U64_MAX = (1n << 64n) - 1n;

// Rust's `char::is_whitespace` (Unicode White_Space) and `char::is_control` (category Cc).
const WHITESPACE = /[\t\n\v\f\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]/;
const CONTROL_BUT_NEWLINE = /[\u0000-\u0009\u000B-\u001F\u007F-\u009F]/;

const validKeyName = (name) => name.length > 0 && !WHITESPACE.test(name) && !name.includes("+");

/** SHA-256(name ‖ 0x0A ‖ type ‖ 32-byte key)[:4]. */
export function noteKeyId(name, type, raw) {
  return sha256(Buffer.from(name, "utf8"), Buffer.from([0x0a, type]), raw).subarray(0, 4);
}

function parseSignatureLine(line) {
  if (!line.startsWith(DASH)) {
    throw new Error("malformed: a signature line starts with an em dash and a space");
  }
  const rest = line.slice(DASH.length);
  const space = rest.indexOf(" ");
  if (space < 0) throw new Error("malformed: a signature line is a name and a signature");
  const name = rest.slice(0, space);
  if (!validKeyName(name)) throw new Error(`malformed: key name ${JSON.stringify(name)}`);
  const bytes = decodeBase64(rest.slice(space + 1));
  if (!bytes) throw new Error("malformed: the signature is not base64");
  if (bytes.length < 5) throw new Error("malformed: the signature is too short");
  return { name, id: bytes.subarray(0, 4), signature: bytes.subarray(4) };
}

function checkNoteText(text) {
  if (text.length === 0 || !text.endsWith("\n")) {
    throw new Error("malformed: a note's text ends with a newline");
  }
  if (CONTROL_BUT_NEWLINE.test(text)) {
    throw new Error("malformed: a note's text has no control characters");
  }
}

/** A signed note: {text (with its final newline), signatures: [{name, id, signature}]}. */
function parseNote(note) {
  const at = note.indexOf("\n\n");
  if (at < 0) throw new Error("malformed: a note is its text, a blank line and signatures");
  const text = note.slice(0, at + 1);
  const rest = note.slice(at + 2);
  checkNoteText(text);
  if (!rest.endsWith("\n")) throw new Error("malformed: a note ends with a newline");
  const signatures = rest.slice(0, -1).split("\n").map(parseSignatureLine);
  if (signatures.length > MAX_SIGNATURES) throw new Error("malformed: too many signatures");
  return { text, signatures };
}

/** A checkpoint body: {origin, size (bigint), root (32 bytes)}. */
function parseCheckpoint(text) {
  checkNoteText(text);
  const lines = text.slice(0, -1).split("\n");
  const origin = lines[0];
  if (!origin) throw new Error("malformed: a checkpoint starts with its origin");
  const sizeText = lines[1];
  const decimal = sizeText !== undefined && /^(?:0|[1-9][0-9]*)$/.test(sizeText);
  if (!decimal || BigInt(sizeText) > U64_MAX) {
    throw new Error("malformed: the tree size is a decimal number");
  }
  const root = lines[2] === undefined ? null : decodeBase64(lines[2]);
  if (!root || root.length !== 32) {
    throw new Error("malformed: a checkpoint's third line is a base64 SHA-256 hash");
  }
  if (lines.slice(3).some((l) => l === "")) {
    throw new Error("malformed: a checkpoint has no empty lines");
  }
  return { origin, size: BigInt(sizeText), root };
}

/** Whether any signature line of `key` ({name, type, raw, key}) verifies `message(sig)`. */
function signedBy(signatures, vkey, check) {
  const id = noteKeyId(vkey.name, vkey.type, vkey.raw);
  return signatures.some((s) => s.name === vkey.name && s.id.equals(id) && check(s.signature));
}

/** The message a `cosignature/v1` of checkpoint `text` at `time` signs. */
export function cosignedMessage(text, time) {
  return Buffer.from(`cosignature/v1\ntime ${time}\n${text}`, "utf8");
}

/**
 * A note verifier key `<name>+<8 hex digits of the key id>+<base64(type ‖ 32-byte key)>`:
 * {name, type, raw, key}. Throws when it cannot be read or its key id is not its key's.
 */
export function parseVerifierKey(text) {
  const t = String(text).trim();
  const first = t.indexOf("+");
  const second = first < 0 ? -1 : t.indexOf("+", first + 1);
  if (second < 0) throw new Error("bad verifier key: expected <name>+<key id>+<key>");
  const [name, id, material] = [t.slice(0, first), t.slice(first + 1, second), t.slice(second + 1)];
  const bytes = decodeBase64(material);
  if (!bytes) throw new Error("bad verifier key: the key is not base64");
  if (bytes.length === 0) throw new Error("bad verifier key: empty key");
  const type = bytes[0];
  if (type !== NOTE_ED25519 && type !== COSIGNATURE_V1) {
    const hex = type.toString(16).padStart(2, "0");
    throw new Error(
      `bad verifier key: signature type 0x${hex} is not Ed25519 (0x01) or cosignature/v1 (0x04)`,
    );
  }
  if (bytes.length !== 33) throw new Error("bad verifier key: an Ed25519 key is 32 bytes");
  const pub = ed25519Key(bytes.subarray(1));
  if (!pub) throw new Error("bad verifier key: not an Ed25519 public key");
  if (!validKeyName(name)) throw new Error(`bad verifier key: key name ${JSON.stringify(name)}`);
  if (id.length !== 8 || noteKeyId(name, type, pub.raw).toString("hex") !== id.toLowerCase()) {
    throw new Error("bad verifier key: the key id does not match the key");
  }
  return { name, type, ...pub };
}

/** A witness given as a verifier key string or as {name, publicKeyBase64}. */
function witnessKey(w) {
  let key;
  if (typeof w === "string") {
    try {
      key = parseVerifierKey(w);
    } catch (e) {
      throw new Error(`witness ${w}: ${e.message}`);
    }
  } else if (w && typeof w === "object" && typeof w.name === "string") {
    let raw = decodeBase64(w.publicKeyBase64);
    if (raw && raw.length === 33 && raw[0] === COSIGNATURE_V1) raw = raw.subarray(1);
    const pub = raw && raw.length === 32 ? ed25519Key(raw) : null;
    if (!pub) throw new Error(`witness ${w.name}: publicKeyBase64 is not a base64 Ed25519 key`);
    if (!validKeyName(w.name)) throw new Error(`witness: key name ${JSON.stringify(w.name)}`);
    key = { name: w.name, type: COSIGNATURE_V1, ...pub };
  } else {
    throw new Error("a witness is a verifier key string or {name, publicKeyBase64}");
  }
  if (key.type !== COSIGNATURE_V1) {
    throw new Error(`witness ${key.name}: not a cosigner key (signature type 0x04)`);
  }
  return key;
}

function cosignatureVerifies(text, pub, signature) {
  if (signature.length !== 72) return false;
  const time = signature.readBigUInt64BE(0);
  if (time > I64_MAX) return false;
  return verifyStrict(pub, cosignedMessage(text, time), signature.subarray(8));
}

// ---------------------------------------------------------------------------------------------
// The bundle's shape (what the Rust verifier's deserialization refuses, refused here too)
// ---------------------------------------------------------------------------------------------

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const own = (o, name) => isObject(o) && Object.hasOwn(o, name);
const isU64 = (v) => Number.isInteger(v) && v >= 0;

/** serde_json refuses lone surrogates and nesting deeper than 127 levels. */
function checkJsonText(value, depth = 0) {
  if (typeof value === "string") {
    if (LONE_SURROGATE.test(value)) throw new Error("a string holds a lone surrogate");
    return;
  }
  if (value === null || typeof value !== "object") return;
  if (depth + 1 > 127) throw new Error("nested too deeply");
  for (const [k, v] of Object.entries(value)) {
    if (!Array.isArray(value) && LONE_SURROGATE.test(k)) {
      throw new Error("a member name holds a lone surrogate");
    }
    checkJsonText(v, depth + 1);
  }
}

/**
 * What `JSON.parse` does not tell about JSON `text` (which it must already have read): which
 * numbers are spelled as no integer is (with a fraction or an exponent, or `-0`: `JSON.parse`
 * reads `1.0` as 1, the Rust verifier refuses it where it wants an integer), and which objects
 * repeat a member name (`JSON.parse` keeps the last; the Rust verifier refuses a repeated member
 * of the bundle's fixed structures). Returns {isFloat(...path), duplicates: [[path, name]]}.
 */
function lexicalFacts(text) {
  const found = new Set();
  const duplicates = [];
  const stack = [];
  const top = () => stack[stack.length - 1];
  const path = () => JSON.stringify(stack.map((f) => (f.array ? f.index : f.key)));
  const valueStarts = () => {
    const f = top();
    if (f && f.array) f.index += 1;
  };
  const number = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
  for (let i = 0; i < text.length; ) {
    const c = text[i];
    if (c === "{" || c === "[") {
      valueStarts();
      stack.push(
        c === "["
          ? { array: true, index: -1 }
          : { array: false, key: null, wantKey: true, seen: new Set() },
      );
      i += 1;
    } else if (c === "}" || c === "]") {
      stack.pop();
      i += 1;
    } else if (c === ",") {
      if (!top().array) top().wantKey = true;
      i += 1;
    } else if (c === ":") {
      top().wantKey = false;
      i += 1;
    } else if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const f = top();
      if (f && !f.array && f.wantKey) {
        f.key = JSON.parse(text.slice(i, j + 1));
        if (f.seen.has(f.key)) {
          duplicates.push([stack.slice(0, -1).map((g) => (g.array ? g.index : g.key)), f.key]);
        }
        f.seen.add(f.key);
      } else {
        valueStarts();
      }
      i = j + 1;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      valueStarts();
      number.lastIndex = i;
      const literal = number.exec(text)[0];
      if (/[.eE]/.test(literal) || literal === "-0") found.add(path());
      else if (found.size > 0) found.delete(path()); // a repeated member: the last one counts
      i += literal.length;
    } else if (c === "t" || c === "f" || c === "n") {
      valueStarts();
      i += c === "f" ? 5 : 4;
    } else {
      i += 1; // whitespace
    }
  }
  return { isFloat: (...at) => found.has(JSON.stringify(at)), duplicates };
}

const BUNDLE_MEMBERS = [
  "format",
  "session",
  "manifests",
  "receipts",
  "disclosures",
  "proofs",
  "checkpoint",
  "cosignatures",
  "keys",
];
const SIGNED_MANIFEST_MEMBERS = ["document", "manifest_signature"];
const PROOF_MEMBERS = ["receipt_id", "leaf_index", "hashes"];
const JWK_MEMBERS = ["kid", "kty", "crv", "x"];

/** A repeated member of the bundle, a signed manifest, a proof, the key set or a key. */
function checkDuplicates(duplicates) {
  for (const [at, name] of duplicates) {
    const where = at.join(".");
    const typed =
      (at.length === 0 && BUNDLE_MEMBERS.includes(name)) ||
      (at.length === 2 && at[0] === "manifests" && SIGNED_MANIFEST_MEMBERS.includes(name)) ||
      (at.length === 2 && at[0] === "proofs" && PROOF_MEMBERS.includes(name)) ||
      (at.length === 1 && at[0] === "keys" && name === "keys") ||
      (at.length === 3 && at[0] === "keys" && at[1] === "keys" && JWK_MEMBERS.includes(name));
    if (typed) throw new Error(`${where || "the bundle"}: duplicate field \`${name}\``);
  }
}

function expectMembers(obj, where, required, optional = [], closed = true) {
  if (!isObject(obj)) throw new Error(`${where} is not an object`);
  for (const name of required) {
    if (!Object.hasOwn(obj, name)) throw new Error(`${where}: missing field \`${name}\``);
  }
  if (closed) {
    for (const name of Object.keys(obj)) {
      if (!required.includes(name) && !optional.includes(name)) {
        throw new Error(`${where}: unknown field \`${name}\``);
      }
    }
  }
}

function expectType(ok, where, what) {
  if (!ok) throw new Error(`${where} is not ${what}`);
}

/** Checks a JWK set's shape: {keys: [{kid, kty, crv, x: strings, …}]} (other members ignored). */
function checkJwkSet(set, where) {
  expectMembers(set, where, ["keys"], [], false);
  expectType(Array.isArray(set.keys), `${where}.keys`, "an array");
  set.keys.forEach((k, i) => {
    expectMembers(k, `${where}.keys[${i}]`, JWK_MEMBERS, [], false);
    for (const m of JWK_MEMBERS) {
      expectType(typeof k[m] === "string", `${where}.keys[${i}].${m}`, "a string");
    }
  });
}

function checkShape(b, spelledAsFloat) {
  expectMembers(
    b,
    "the bundle",
    BUNDLE_MEMBERS.filter((m) => m !== "disclosures"),
    ["disclosures"],
  );
  expectType(typeof b.format === "string", "format", "a string");
  expectType(Array.isArray(b.manifests), "manifests", "an array");
  b.manifests.forEach((m, i) => {
    expectMembers(m, `manifests[${i}]`, SIGNED_MANIFEST_MEMBERS);
    expectType(
      typeof m.manifest_signature === "string",
      `manifests[${i}].manifest_signature`,
      "a string",
    );
  });
  expectType(Array.isArray(b.receipts), "receipts", "an array");
  expectType(
    b.disclosures === undefined || b.disclosures === null || isObject(b.disclosures),
    "disclosures",
    "an object",
  );
  expectType(Array.isArray(b.proofs), "proofs", "an array");
  b.proofs.forEach((p, i) => {
    expectMembers(p, `proofs[${i}]`, PROOF_MEMBERS);
    expectType(typeof p.receipt_id === "string", `proofs[${i}].receipt_id`, "a string");
    expectType(
      isU64(p.leaf_index) && !spelledAsFloat("proofs", i, "leaf_index"),
      `proofs[${i}].leaf_index`,
      "a non-negative integer",
    );
    expectType(
      Array.isArray(p.hashes) && p.hashes.every((h) => typeof h === "string"),
      `proofs[${i}].hashes`,
      "an array of strings",
    );
  });
  expectType(typeof b.checkpoint === "string", "checkpoint", "a string");
  expectType(
    Array.isArray(b.cosignatures) && b.cosignatures.every((c) => typeof c === "string"),
    "cosignatures",
    "an array of strings",
  );
  checkJwkSet(b.keys, "keys");
}

// The signed manifest document (CONTRACT §6): exactly these members, no others.
const MANIFEST_STRINGS = [
  "manifest_id",
  "session_id",
  "tenant_id",
  "environment",
  "actor_id",
  "policy_id",
  "lease_id",
  "lease_expires_at",
  "issued_at",
  "key_id",
];
const MANIFEST_MEMBERS = [...MANIFEST_STRINGS, "policy_version", "tools"];
const TOOL_MEMBERS = ["name", "toolVersion", "schemaHash", "exposureMode"];

/** Reads a manifest document as the Rust verifier does: first the types, then no other members. */
function checkManifestDocument(doc, where, policyVersionIsFloat) {
  expectMembers(doc, where, MANIFEST_MEMBERS, [], false);
  for (const m of MANIFEST_STRINGS) {
    expectType(typeof doc[m] === "string", `${where}: ${m}`, "a string");
  }
  expectType(
    isU64(doc.policy_version) && !policyVersionIsFloat,
    `${where}: policy_version`,
    "a non-negative integer",
  );
  expectType(Array.isArray(doc.tools), `${where}: tools`, "an array");
  doc.tools.forEach((t, j) => {
    expectMembers(t, `${where}: tools[${j}]`, TOOL_MEMBERS, [], false);
    for (const m of TOOL_MEMBERS) {
      expectType(typeof t[m] === "string", `${where}: tools[${j}].${m}`, "a string");
    }
  });
  const extra =
    Object.keys(doc).some((k) => !MANIFEST_MEMBERS.includes(k)) ||
    doc.tools.some((t) => Object.keys(t).some((k) => !TOOL_MEMBERS.includes(k)));
  if (extra) throw new Error(`${where}: unknown or re-spelled members`);
}

// ---------------------------------------------------------------------------------------------
// The verifier
// ---------------------------------------------------------------------------------------------

/**
 * Verifies an evidence bundle (its JSON text, or its UTF-8 bytes).
 *
 * @param {string | Uint8Array} text
 * @param {{
 *   trustedKeys?: {keys: object[]},
 *   witnesses?: (string | {name: string, publicKeyBase64: string})[],
 *   quorum?: number,
 * }} [options] `trustedKeys` replaces the bundle's own keys; with `witnesses`, at least `quorum`
 *   (default: all) of them must have cosigned the checkpoint.
 * @returns {{ok: true, sessionId: string, tenantId: string, receipts: number, manifests: number,
 *   disclosures: number, treeSize: number | bigint, origin: string, checkpointKeys: string[],
 *   cosignedBy: string[], keysFrom: "trusted" | "bundle"}} `receipts`, `manifests` and
 *   `disclosures` are counts; `treeSize` is a bigint only above 2^53 − 1.
 * @throws {Error} saying what failed, naming the receipt, manifest, checkpoint or cosignature.
 */
export function verifyEvidence(text, options = {}) {
  options ??= {};
  const fail = (message) => {
    throw new Error(message);
  };
  if (text instanceof Uint8Array) {
    try {
      text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(text);
    } catch {
      fail("not an evidence bundle: not UTF-8");
    }
  }
  if (typeof text !== "string") fail("not an evidence bundle: expected JSON text");

  // Options first: a verifier asked to pin keys or witnesses must not run without them.
  let trusted = null;
  if (options.trustedKeys !== undefined && options.trustedKeys !== null) {
    try {
      checkJwkSet(options.trustedKeys, "trusted keys");
    } catch (e) {
      fail(`not a JWKS document ({"keys": [...]}): ${e.message}`);
    }
    trusted = options.trustedKeys;
  }
  const witnesses = (options.witnesses ?? []).map(witnessKey);
  const quorum = options.quorum ?? witnesses.length;
  if (!Number.isInteger(quorum) || quorum < 0 || quorum > witnesses.length) {
    fail(`quorum ${quorum} is not between 0 and the ${witnesses.length} witnesses given`);
  }

  let bundle;
  let spelledAsFloat;
  try {
    bundle = JSON.parse(text);
    checkJsonText(bundle);
    const facts = lexicalFacts(text);
    checkDuplicates(facts.duplicates);
    spelledAsFloat = facts.isFloat;
    checkShape(bundle, spelledAsFloat);
  } catch (e) {
    fail(`not an evidence bundle: ${e.message}`);
  }
  if (bundle.format !== FORMAT) {
    fail(`format is ${JSON.stringify(bundle.format)}, not ${FORMAT}`);
  }
  const keys = trusted ? trusted.keys : bundle.keys.keys;
  const keysFrom = trusted ? "trusted" : "bundle";
  const sessionText = (name) => {
    const v = own(bundle.session, name) ? bundle.session[name] : undefined;
    if (typeof v !== "string") fail(`session.${name} is missing`);
    return v;
  };
  const sessionId = sessionText("session_id");
  const tenantId = sessionText("tenant_id");

  // The checkpoint: the log's signature by one of the keys, under its origin.
  let note;
  let checkpoint;
  try {
    note = parseNote(bundle.checkpoint);
    checkpoint = parseCheckpoint(note.text);
  } catch (e) {
    fail(`checkpoint: ${e.message}`);
  }
  if (!checkpoint.origin.endsWith(`/aperture/${tenantId}`)) {
    fail(`checkpoint: origin ${checkpoint.origin} is not a log of tenant ${tenantId}`);
  }
  const noteText = Buffer.from(note.text, "utf8");
  const checkpointKeys = [];
  if (validKeyName(checkpoint.origin)) {
    for (const jwk of keys) {
      let pub;
      try {
        pub = keyOfJwk(jwk);
      } catch {
        continue;
      }
      const vkey = { name: checkpoint.origin, type: NOTE_ED25519, ...pub };
      if (signedBy(note.signatures, vkey, (sig) => verifyStrict(pub, noteText, sig))) {
        checkpointKeys.push(jwk.kid);
      }
    }
  }
  if (checkpointKeys.length === 0) {
    const which = trusted ? "trusted keys" : "bundle's keys";
    fail(`checkpoint: not signed by any of the ${which} under ${checkpoint.origin}`);
  }

  // Witnesses: their cosignature lines, here or among the checkpoint's own signature lines.
  const all = [...note.signatures];
  for (const line of bundle.cosignatures) {
    try {
      all.push(parseSignatureLine(line));
    } catch (e) {
      fail(`cosignature ${JSON.stringify(line)}: ${e.message}`);
    }
  }
  const cosignedBy = witnesses
    .filter((w) => signedBy(all, w, (sig) => cosignatureVerifies(note.text, w, sig)))
    .map((w) => w.name);
  if (cosignedBy.length < quorum) {
    fail(
      `cosignatures: ${cosignedBy.length} of the given witnesses cosigned the checkpoint, ` +
        `${quorum} asked for`,
    );
  }

  // Manifests: signed, exactly the contract's document, of this session.
  bundle.manifests.forEach((m, i) => {
    const doc = m.document;
    const floatVersion = spelledAsFloat("manifests", i, "document", "policy_version");
    checkManifestDocument(doc, `manifest ${i}`, floatVersion);
    try {
      verifySigned(canonicalBytes(doc), m.manifest_signature, doc.key_id, keys);
    } catch (e) {
      fail(`manifest ${doc.manifest_id} (${i}): ${e.message}`);
    }
    if (doc.session_id !== sessionId || doc.tenant_id !== tenantId) {
      fail(`manifest ${doc.manifest_id}: of session ${doc.session_id}, not ${sessionId}`);
    }
  });

  // Receipts: signed, of this session, in the checkpoint's tree.
  if (bundle.proofs.length !== bundle.receipts.length) {
    fail(`${bundle.receipts.length} receipts but ${bundle.proofs.length} proofs`);
  }
  let disclosures = 0;
  bundle.receipts.forEach((r, i) => {
    const proof = bundle.proofs[i];
    const id = own(r, "receipt_id") && typeof r.receipt_id === "string" ? r.receipt_id : "?";
    const what = `receipt ${i} (${id})`;
    try {
      if (!isObject(r) || typeof r.key_id !== "string") {
        fail("malformed record: `key_id` must be a string");
      }
      if (typeof r.signature !== "string") {
        fail("malformed record: `signature` must be a string");
      }
      const { signature, ...unsigned } = r;
      verifySigned(canonicalBytes(unsigned), signature, r.key_id, keys);
    } catch (e) {
      fail(`${what}: ${e.message}`);
    }
    for (const [member, want] of [
      ["session_id", sessionId],
      ["tenant_id", tenantId],
    ]) {
      if (r[member] !== want) fail(`${what}: ${member} is not ${want}`);
    }
    if (!isU64(r.seq) || spelledAsFloat("receipts", i, "seq")) {
      fail(`${what}: not journaled (no seq)`);
    }
    if (!Number.isSafeInteger(r.seq)) fail(`${what}: seq ${r.seq} is too large for this verifier`);
    if (!Number.isSafeInteger(proof.leaf_index)) {
      fail(`${what}: leaf_index ${proof.leaf_index} is too large for this verifier`);
    }
    if (proof.receipt_id !== id || proof.leaf_index + 1 !== r.seq) {
      fail(`${what}: its proof is for ${proof.receipt_id} at leaf ${proof.leaf_index}`);
    }
    const hashes = proof.hashes.map(decodeBase64);
    if (hashes.some((h) => !h || h.length !== 32)) {
      fail(`${what}: a proof hash is not base64 SHA-256`);
    }
    try {
      verifyInclusion(
        leafHash(canonicalBytes(r)),
        proof.leaf_index,
        checkpoint.size,
        hashes,
        checkpoint.root,
      );
    } catch (e) {
      fail(`${what}: not in the checkpoint's tree of ${checkpoint.size} records: ${e.message}`);
    }
    if (own(bundle.disclosures, id)) {
      // CONTRACT §6: the digest is SHA-256 of the disclosures' JCS bytes.
      const digest = `sha256:${sha256(canonicalBytes(bundle.disclosures[id])).toString("hex")}`;
      if (r.disclosures_digest !== digest) {
        fail(`${what}: the disclosures do not match its disclosures_digest`);
      }
      disclosures += 1;
    }
  });

  const size = checkpoint.size;
  return {
    ok: true,
    sessionId,
    tenantId,
    receipts: bundle.receipts.length,
    manifests: bundle.manifests.length,
    disclosures,
    treeSize: size <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(size) : size,
    origin: checkpoint.origin,
    checkpointKeys,
    cosignedBy,
    keysFrom,
  };
}

/** One line saying what a verified bundle proved. */
export function summarize(v) {
  const keys =
    v.keysFrom === "trusted"
      ? "trusted keys"
      : "the bundle's own keys (not pinned: give trusted keys)";
  const parts = [
    `ok: session ${v.sessionId} (tenant ${v.tenantId}): ${v.receipts} receipts and ` +
      `${v.manifests} manifest documents signed by ${keys}`,
    `receipts in the journal tree of ${v.treeSize} records of ${v.origin}, ` +
      `checkpoint signed by ${v.checkpointKeys.join(", ")}`,
  ];
  if (v.disclosures > 0) parts.push(`${v.disclosures} disclosures match their receipts`);
  if (v.cosignedBy.length > 0) parts.push(`cosigned by ${v.cosignedBy.join(", ")}`);
  parts.push("this proves authenticity and inclusion, not that the bundle holds every record");
  return parts.join("; ");
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

const USAGE =
  "usage: node verify_evidence.mjs <bundle.json|-> [trusted-jwks.json] " +
  "[--witness <vkey>]... [--quorum N]";

class UsageError extends Error {}

function main(argv) {
  const files = [];
  const witnesses = [];
  let quorum;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--witness" && i + 1 < argv.length) witnesses.push(argv[++i]);
    else if (a === "--quorum" && i + 1 < argv.length) quorum = Number(argv[++i]);
    else if (a === "-h" || a === "--help") return console.log(USAGE);
    else if (a.startsWith("--")) throw new UsageError(`unknown option ${a}\n${USAGE}`);
    else files.push(a);
  }
  if (files.length < 1 || files.length > 2) throw new UsageError(USAGE);
  const [bundleFile, jwksFile] = files;
  const bytes = fs.readFileSync(bundleFile === "-" ? 0 : bundleFile);
  let trustedKeys;
  if (jwksFile !== undefined) {
    try {
      trustedKeys = JSON.parse(fs.readFileSync(jwksFile, "utf8"));
      checkJwkSet(trustedKeys, "trusted keys");
      for (const k of trustedKeys.keys) {
        try {
          keyOfJwk(k);
        } catch (e) {
          throw new Error(`key ${k.kid}: ${e.message}`);
        }
      }
    } catch (e) {
      throw new UsageError(`reading keys from ${jwksFile}: ${e.message}`);
    }
    // Keys the bundle carries that were not pinned (on stderr: stdout is the one-line summary).
    try {
      const carried = JSON.parse(bytes.toString("utf8")).keys?.keys ?? [];
      for (const k of carried) {
        if (!trustedKeys.keys.some((t) => t.kid === k?.kid && t.x === k?.x)) {
          console.error(`key ${k?.kid} is in the bundle but not among the trusted keys`);
        }
      }
    } catch {
      // verifyEvidence says what is wrong with the bundle.
    }
  }
  const verified = verifyEvidence(bytes, { trustedKeys, witnesses, quorum });
  console.log(summarize(verified));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    main(process.argv.slice(2));
  } catch (e) {
    // Usage and file errors as they are; anything else is the bundle's failure.
    const plain = e instanceof UsageError || e.code !== undefined;
    console.error(plain ? e.message : `the evidence does not verify: ${e.message}`);
    process.exitCode = 1;
  }
}
