"""The Python SDK (`mcp` from PyPI), unmodified, as a stock client of Aperture's /mcp for the
Rust integration test `sdk_interop::the_python_sdk_reads_gets_and_answers_through_the_gateway`
(issue 47, item 7). The tenant binds calls implicitly, so the client sends no echo.

Environment: APERTURE_MCP_URL, APERTURE_TOKEN, APERTURE_MODE (`legacy`: the 2025-11-25
handshake; `2026-07-28`: stateless). Lists tools, calls `mcp__fixture__echo`, reads the
resource `docs://readme`, gets the prompt `mcp__fixture__greet`, and calls
`mcp__fixture__ask` twice, answering the upstream's elicitation and sampling request through
its own callbacks; prints one JSON object with what it saw.
"""

import json
import os

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def text_of(content) -> str | None:
    blocks = content if isinstance(content, list) else [content]
    for block in blocks:
        if getattr(block, "type", None) == "text":
            return block.text
    return None


async def main() -> None:
    url = os.environ["APERTURE_MCP_URL"]
    token = os.environ["APERTURE_TOKEN"]
    mode = os.environ["APERTURE_MODE"]
    asked: dict = {}

    async def on_sampling(_context, params):
        asked["sampling"] = {
            "text": text_of(params.messages[0].content),
            "includeContext": params.include_context,
        }
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="sunny"),
            model="python-sdk",
        )

    async def on_elicitation(_context, params):
        asked["elicitation"] = {"message": params.message}
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport,
            mode=mode,
            cache=None,
            sampling_callback=on_sampling,
            elicitation_callback=on_elicitation,
        ) as client:
            listed = await client.list_tools()
            echoed = await client.call_tool("mcp__fixture__echo", {"text": "from python"})
            read = await client.read_resource("docs://readme")
            prompt = await client.get_prompt("mcp__fixture__greet", {"name": "Ada"})
            elicited = await client.call_tool("mcp__fixture__ask", {"kind": "elicitation"})
            sampled = await client.call_tool("mcp__fixture__ask", {"kind": "sampling"})
            dump = lambda r: r.model_dump(mode="json", by_alias=True, exclude_none=True)  # noqa: E731
            print(
                json.dumps(
                    {
                        "protocolVersion": client.protocol_version,
                        "tools": [t.name for t in listed.tools],
                        "echo": dump(echoed),
                        "read": dump(read),
                        "prompt": dump(prompt),
                        "elicited": dump(elicited),
                        "sampled": dump(sampled),
                        "asked": asked,
                    }
                ),
                flush=True,
            )


anyio.run(main)
