"""The Python SDK (`mcp` from PyPI) as a client of Aperture's /mcp, for the Rust integration
test `mcp::the_python_sdk_speaks_both_eras` (issue 27).

Environment: APERTURE_MCP_URL, APERTURE_TOKEN, APERTURE_TOOL, APERTURE_ARGS (JSON) and
APERTURE_MODE (`legacy`: the 2025-11-25 handshake; `2026-07-28`: stateless). Lists tools, calls
APERTURE_TOOL with the manifest echo in `_meta` and a progress callback, then again with a wrong
`expected_schema_hash`; prints {"ready": true} and waits up to 15 s for
notifications/tools/list_changed (2025: on the SDK's own GET stream; 2026-07-28: on a
`subscriptions/listen` stream), then prints one JSON object:
{protocolVersion, progress, ok, denied, listChanged}.
"""

import json
import os
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> None:
    url = os.environ["APERTURE_MCP_URL"]
    token = os.environ["APERTURE_TOKEN"]
    name = os.environ["APERTURE_TOOL"]
    arguments = json.loads(os.environ["APERTURE_ARGS"])
    mode = os.environ["APERTURE_MODE"]
    changed = anyio.Event()

    async def on_message(message) -> None:
        inner = getattr(message, "root", message)
        if getattr(inner, "method", None) == "notifications/tools/list_changed":
            changed.set()

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, message_handler=on_message, cache=None) as client:
            listed = await client.list_tools()
            tool = next((t for t in listed.tools if t.name == name), None)
            if tool is None:
                print(f"{name} is not listed: {listed}", file=sys.stderr)
                sys.exit(1)
            echo = {
                "session_id": listed.meta["session_id"],
                "manifest_id": listed.meta["manifest_id"],
                "lease_id": listed.meta["lease_id"],
                "tool_version": tool.meta["toolVersion"],
                "expected_schema_hash": tool.meta["schemaHash"],
            }
            progress = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                progress.append({"progress": p, "total": total, "message": message})

            ok = await client.call_tool(name, arguments, progress_callback=on_progress, meta=echo)
            denied = await client.call_tool(
                name, arguments, meta={**echo, "expected_schema_hash": "sha256:" + "0" * 64}
            )
            heard = False
            if mode == "legacy":
                print(json.dumps({"ready": True}), flush=True)
                with anyio.move_on_after(15):
                    await changed.wait()
                    heard = True
            else:
                async with client.listen(tools_list_changed=True) as subscription:
                    print(json.dumps({"ready": True}), flush=True)
                    with anyio.move_on_after(15):
                        async for _event in subscription:
                            heard = True
                            break
            print(
                json.dumps(
                    {
                        "protocolVersion": client.protocol_version,
                        "progress": progress,
                        "ok": ok.model_dump(mode="json", by_alias=True),
                        "denied": denied.model_dump(mode="json", by_alias=True),
                        "listChanged": heard,
                    }
                ),
                flush=True,
            )


anyio.run(main)
