#!/usr/bin/env bash
# Runs on a Mac: the tests of the portable crates macOS uses, a build of
# oz0-node, its `sandbox check --self-test` (lines, then JSON), one command
# in Seatbelt that leaves a process in a session of its own behind (which
# must be gone after), the daemon once, and where Apple's container runs,
# a tool server in a microVM of its own (OZ0_MAC_TEST_IMAGE names its
# image), with no VM left after. Not run in CI (no Mac there):
# what it shows on a Mac is what the README lists as not run.
#
#   scripts/test-macos.sh
#
# Needs Rust (rustup) on macOS 15 or later; Apple silicon and macOS 26 for
# the microVM line to say Apple's container can run tool servers.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)" != Darwin ]; then
    echo "test-macos.sh runs on macOS; on Linux run scripts/test" >&2
    exit 2
fi
cargo test -p oz0-policy -p oz0-plugin -p oz0-macos -p oz0-core
cargo build -p oz0-node
node="$PWD/target/debug/oz0-node"
echo "== oz0-node sandbox check --self-test"
# Exit 1 is expected on macOS: job_limits cannot hold there (tier 0).
"$node" sandbox check --self-test || [ $? -eq 1 ]
echo "== oz0-node sandbox check --json"
"$node" sandbox check --json || [ $? -eq 1 ]
echo "== a process that leaves for a session of its own ends with its run"
work=$(cd "$(mktemp -d)" && pwd -P)
"$node" sandbox run --work "$work" -- /bin/sh -c \
    "'$node' sandbox probe --no-syscalls --out bg.json --detach left.json --hold-ms 30000 >/dev/null 2>&1 & sleep 1"
pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$work/left.json")
sleep 1
if kill -0 "$pid" 2>/dev/null; then
    echo "FAILED: process $pid outlived its run" >&2
    kill -9 "$pid"
    exit 1
fi
echo "ok: process $pid ended with its run"
rm -rf "$work"
echo "== oz0-node run --once"
data=$(mktemp -d)
"$node" run --once --data-dir "$data"
"$node" facts --data-dir "$data"
rm -rf "$data"
echo "== microVMs: Apple's container"
if ! "$node" sandbox vm --probe; then
    echo "SKIPPED: this Mac offers no microVMs (above); the tool-server run was not checked"
    exit 0
fi
# A tool server from an image pinned by digest that speaks MCP over its
# stdio, e.g. OZ0_MAC_TEST_IMAGE=docker.io/mcp/filesystem@sha256:<digest>
# with OZ0_MAC_TEST_CMD="/projects" (its arguments after the image's own
# entrypoint). The server must answer initialize inside the VM.
if [ -z "${OZ0_MAC_TEST_IMAGE:-}" ]; then
    echo "SKIPPED: set OZ0_MAC_TEST_IMAGE (an MCP server's image, pinned by digest) to run one in a VM"
    exit 0
fi
work=$(cd "$(mktemp -d)" && pwd -P)
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"oz0-test","version":"0"}}}'
# shellcheck disable=SC2086
answer=$(printf '%s\n' "$init" | "$node" sandbox vm --work "$work" --image "$OZ0_MAC_TEST_IMAGE" -- ${OZ0_MAC_TEST_CMD:-} | head -n 1)
case "$answer" in
    *'"id":1'*'"result"'*) echo "ok: the server answered initialize from its VM" ;;
    *) echo "FAILED: no initialize answer from the VM: $answer" >&2; exit 1 ;;
esac
if container list --all 2>/dev/null | grep -q 'oz0-'; then
    echo "FAILED: a VM named oz0-… is left after its tool ended:" >&2
    container list --all >&2
    exit 1
fi
echo "ok: no oz0-… VM is left"
rm -rf "$work"
