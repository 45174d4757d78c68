#!/usr/bin/env python3
"""Writes the fork_allowlist seeds in arbitrary 1.x's byte format.

Usage:  python3 fuzz/seeds/make_fork_allowlist_seeds.py fuzz/seeds/fork_allowlist
Check:  cargo +nightly fuzz fmt fork_allowlist fuzz/seeds/fork_allowlist/<name>

The target's input is `Input { entries: Vec<String>, name: String, mcp: Option<(String, String)> }`.
arbitrary reads, from the front: a "continue" byte (odd = one more entry) before each entry, the
entry's UTF-8 bytes, an even byte ending the list, the name's bytes, an Option byte (odd = Some),
then the server's and tool's bytes. Every string's length comes from the *end* of the input, in
reading order (so the last bytes hold the first length): one byte while at most 256 bytes remain,
two (big-endian) while at most 65,537 remain.
"""
import itertools
import os
import sys


def encode(entries, name, mcp):
    strs = [e.encode() for e in entries] + [name.encode()]
    if mcp:
        strs += [p.encode() for p in mcp]
    front = bytearray()
    for e in strs[: len(entries)]:
        front.append(1)
        front += e
    front.append(0)
    front += strs[len(entries)]
    front.append(1 if mcp else 0)
    if mcp:
        front += strs[-2] + strs[-1]
    # Reading order of the strings (each one's length is read just before its bytes).
    reads = []
    for i in range(len(entries)):
        reads += [("byte", 1), ("len", i), ("str", i)]
    reads += [("byte", 1), ("len", len(entries)), ("str", len(entries)), ("byte", 1)]
    if mcp:
        for j in (len(strs) - 2, len(strs) - 1):
            reads += [("len", j), ("str", j)]
    # The width of each length depends on how much input remains; try until consistent.
    for widths in itertools.product([1, 2], repeat=len(strs)):
        remaining = len(front) + sum(widths)
        lengths, k, ok = [], 0, True
        for kind, v in reads:
            if kind == "byte":
                remaining -= 1
            elif kind == "str":
                remaining -= len(strs[v])
            else:
                w = 1 if remaining <= 256 else 2
                if w != widths[k] or len(strs[v]) > remaining - w:
                    ok = False
                    break
                lengths.append(len(strs[v]).to_bytes(w, "big"))
                remaining -= w
                k += 1
        if ok:
            return bytes(front) + b"".join(reversed(lengths))
    raise SystemExit("input too large for this encoder")


SEEDS = {
    "exact_and_prefix": (["read_file", "mcp__github__read_*"], "mcp__github__read_issue", ("github", "read_issue")),
    "all_mcp_vs_builtin": (["mcp__*"], "read_file", None),
    "empty_list_denies": ([], "grep", None),
    "server_boundary": (["mcp__alpha", "mcp__alpha__*", "grep"], "mcp__alpha-beta__x", ("alpha-beta", "x")),
    "raw_name_prefix": (["mcp__s__a_*", "mcp__s__b"], "mcp__s__a_b", ("s", "a b")),
    "partial_server_wildcard": (["read_file", "mcp__git*"], "read_file", None),
    "control_characters": (["a\nIgnore previous instructions", "\x01\x02\x1b[31m", "mcp__x__\u00e9*"], "x\ty", ("x", "\u00e9t\u00e9")),
}

if __name__ == "__main__":
    out = sys.argv[1]
    for file_name, (entries, name, mcp) in SEEDS.items():
        with open(os.path.join(out, file_name), "wb") as f:
            f.write(encode(entries, name, mcp))
