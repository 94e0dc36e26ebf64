#!/usr/bin/env bash
# Runs on a Mac with Apple's container (macOS 26, Apple silicon): what a
# microVM tool's VM holds, as the Mac node starts it, and its egress.
# Not run in CI (no Mac there); what it shows is what docs/macos.md lists
# as not run yet.
#
#   OZ0_MAC_TEST_SHELL_IMAGE=<image with /bin/sh and curl, pinned by digest> \
#   OZ0_MAC_TEST_GUEST_BIN=<oz0-node of this release for Linux on arm64> \
#       scripts/test-macos-microvm.sh
#
# The guest binary is what the node's daemon fetches from its edge, signed
# (`oz0 release sign`); build it on a Linux arm64 machine with
# `scripts/build-node --release`. Needs network access to example.com.
#
# Checks, each printing ok or FAILED:
# - the VM has no network device but loopback, its root is read-only, it
#   runs as this user's uid;
# - with --allow example.com the server reaches https://example.com through
#   the node's proxy (over the socket the VM publishes), and is refused
#   https://example.org (403 from the proxy); it never sees the token's
#   variable;
# - no oz0-… VM and no run folder is left after.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(uname -s)" != Darwin ]; then
    echo "test-macos-microvm.sh runs on macOS 26 with Apple's container" >&2
    exit 2
fi
: "${OZ0_MAC_TEST_SHELL_IMAGE:?name an image with /bin/sh and curl, pinned by digest (name@sha256:...)}"
: "${OZ0_MAC_TEST_GUEST_BIN:?name the Linux arm64 oz0-node of this release}"
cargo build -p oz0-node
node="$PWD/target/debug/oz0-node"
"$node" sandbox vm --probe
failed=0
check() { # check WHAT EXPECTED GOT
    if [ "$2" = "$3" ]; then
        echo "ok: $1"
    else
        echo "FAILED: $1: expected $2, got $3" >&2
        failed=1
    fi
}
work=$(cd "$(mktemp -d)" && pwd -P)
before=$(ls -d "${TMPDIR:-/tmp}"/oz0-run-* 2>/dev/null | wc -l | tr -d ' ')

echo "== the VM without egress"
out=$("$node" sandbox vm --work "$work" --image "$OZ0_MAC_TEST_SHELL_IMAGE" -- /bin/sh -c \
    'echo "links=$(ls /sys/class/net | tr "\n" " ")"; touch /usr/oz0-x 2>/dev/null && echo root=rw || echo root=ro; echo "uid=$(id -u)"' </dev/null)
check "only loopback" "links=lo " "$(echo "$out" | grep '^links=')"
check "read-only root" "root=ro" "$(echo "$out" | grep '^root=')"
check "this user's uid" "uid=$(id -u)" "$(echo "$out" | grep '^uid=')"

echo "== the VM with --allow example.com"
out=$("$node" sandbox vm --work "$work" --image "$OZ0_MAC_TEST_SHELL_IMAGE" \
    --allow example.com --guest-bin "$OZ0_MAC_TEST_GUEST_BIN" -- /bin/sh -c \
    'echo "token=${OZ0_EGRESS_TOKEN:-none}"; echo "links=$(ls /sys/class/net | tr "\n" " ")";
     curl -s -o /dev/null -w "allowed=%{http_code}\n" https://example.com/;
     curl -s -o /dev/null -w "other=%{http_connect}\n" https://example.org/ || true' </dev/null)
check "the token's variable is not the server's" "token=none" "$(echo "$out" | grep '^token=')"
check "still only loopback" "links=lo " "$(echo "$out" | grep '^links=')"
check "example.com through the proxy" "allowed=200" "$(echo "$out" | grep '^allowed=')"
check "example.org refused by the proxy" "other=403" "$(echo "$out" | grep '^other=')"

echo "== nothing left"
if container list --all 2>/dev/null | grep -q 'oz0-'; then
    echo "FAILED: a VM named oz0-… is left:" >&2
    container list --all >&2
    failed=1
else
    echo "ok: no oz0-… VM is left"
fi
after=$(ls -d "${TMPDIR:-/tmp}"/oz0-run-* 2>/dev/null | wc -l | tr -d ' ')
check "no run folder (env file, published socket) is left" "$before" "$after"
rm -rf "$work"
exit "$failed"
