"""A real MCP client (the `mcp` package's stdio client) for `tests/mcp_client.rs`.

Usage: python3 mcp_client.py CALLS -- SERVER_CMD...

Starts SERVER_CMD over stdio, initialises, lists the tools, makes each call
in CALLS (a JSON list of [tool, arguments] pairs) in order, and prints one
JSON object on stdout: server name, protocol version, tool names, each
call's result (is_error and text), and the seconds from start to the
initialize result. Exit 3 when `mcp` is missing.
"""

import json
import sys
import time

try:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
except ImportError as e:  # the test skips on this
    print(f"no mcp package: {e}", file=sys.stderr)
    sys.exit(3)


def field(obj, *names):
    """A result field by its name in `mcp` 2.x (snake_case) or 1.x (camelCase)."""
    for n in names:
        if hasattr(obj, n):
            return getattr(obj, n)
    raise AttributeError(f"{type(obj).__name__} has none of {names}")


async def session(calls: list, cmd: list[str]) -> dict:
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    started = time.monotonic()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            init = await s.initialize()
            first = time.monotonic() - started
            tools = await s.list_tools()
            results = []
            for name, args in calls:
                res = await s.call_tool(name, args)
                texts = [c.text for c in res.content if getattr(c, "type", "") == "text"]
                results.append(
                    {"is_error": bool(field(res, "is_error", "isError")), "text": "\n".join(texts)}
                )
            return {
                "server": field(init, "server_info", "serverInfo").name,
                "protocol": field(init, "protocol_version", "protocolVersion"),
                "tools": [t.name for t in tools.tools],
                "calls": results,
                "first_response_s": first,
            }


def main() -> int:
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    calls, cmd = json.loads(argv[0]), argv[2:]

    async def run() -> dict:
        with anyio.fail_after(300):
            return await session(calls, cmd)

    out = anyio.run(run)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
