"""A real MCP server, written with the official Python SDK (`mcp`), that
`tests/mcp_python.rs` runs inside a VM of the QEMU test backend
(`sandbox vm --image python -- python3 /work/mcp_server.py`).

Tools:
- `write_file(path, content)`: writes a file under /work (relative paths
  only), returns the number of bytes written.
- `net_interfaces()`: the guest's network interfaces, from /sys/class/net.
- `fetch(url)`: an HTTP GET with the standard library, through whatever
  proxy the environment names; returns "STATUS BODY".
"""

import os
import urllib.error
import urllib.request

from mcp.server.mcpserver import MCPServer

server = MCPServer("oz0-python-vm-test")


@server.tool()
def write_file(path: str, content: str) -> str:
    """Write CONTENT to /work/PATH (PATH relative, inside /work)."""
    full = os.path.realpath(os.path.join("/work", path))
    if os.path.isabs(path) or not full.startswith("/work/"):
        raise ValueError(f"{path!r} is not a relative path inside /work")
    with open(full, "w", encoding="utf-8") as f:
        f.write(content)
    return str(len(content.encode()))


@server.tool()
def net_interfaces() -> str:
    """The guest's network interfaces, comma-separated."""
    return ",".join(sorted(os.listdir("/sys/class/net")))


@server.tool()
def fetch(url: str) -> str:
    """GET URL through the environment's proxy; "STATUS BODY"."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return f"{r.status} {r.read(4096).decode(errors='replace')}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read(4096).decode(errors='replace')}"
    except OSError as e:
        return f"error {e}"


if __name__ == "__main__":
    server.run()
