//! Plugins: a plugin's `oz0-plugin.yaml` ([`manifest`]), the tool job one
//! `tools/call` travels as from the operator through the edge to a node
//! ([`job`]), and the bounded MCP client the node makes the call with
//! ([`mcp`]).
//!
//! Portable: the edge (any platform) routes by the manifest, and every node
//! checks it again before it starts a server. The manifest and the payload
//! are untrusted input: unknown keys, out-of-range values, images named
//! without a digest and variable names a VM must not take are refused with
//! the reason and the fix, and its YAML is bounded before any value is
//! built ([`yaml`]).

pub mod job;
pub mod manifest;
pub mod mcp;
pub mod yaml;
