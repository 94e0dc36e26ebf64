#!/usr/bin/env bash
# Runs on a Mac: the tests of the portable crates macOS uses, a build of
# oz0-node, and its `sandbox check` (lines, then JSON). Not run in CI (no
# Mac there): what it shows on a Mac is what the README lists as not run.
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
echo "== oz0-node sandbox check --self-test"
# Exit 1 is expected from this build on macOS: no tier is proven there yet.
target/debug/oz0-node sandbox check --self-test || [ $? -eq 1 ]
echo "== oz0-node sandbox check --json"
target/debug/oz0-node sandbox check --json || [ $? -eq 1 ]
