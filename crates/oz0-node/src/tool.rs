//! One `tools/call` of one plugin tool on this node: what an edge job of
//! kind `tool` runs, and `oz0-node plugin call`. This module is what every
//! platform's call shares — the variables, the files, MCP over the
//! server's stdio and how the server is ended; where the server runs is
//! the platform's: Linux's walls below (`tool/linux.rs`), a Mac's
//! microVMs of Apple's container (`tool/mac.rs`), a Windows node's tier 0
//! (`tool/windows.rs`, which says what of the text below holds there).
//!
//! The payload is checked again (the manifest, the tool, the name, the
//! files). The call's files are placed under `.oz0-files/` in the job's
//! work folder, each created new without following a link. The tool's
//! MCP server starts behind the wall its manifest asks for — a microVM of
//! its own for `isolation: microvm` (its monitor inside tier 1), never
//! anything weaker: a node that offers no microVMs leaves the tool out and
//! says why; a command tool's server runs in the node's tier-1 sandbox; a
//! container tool's server runs in its image's root inside tier 1 (the
//! image pulled by digest from a registry the node names), where the node
//! offers `runtime.oci`, and is left out, saying why, where it does not.
//! The node then speaks MCP to it over its stdio with the bounded client of
//! `oz0_plugin::mcp`: `initialize`, `tools/list` (the tool must be listed),
//! `tools/call`. A result over the bound is refused whole. Whatever ends
//! the call — its result, an error, the call's timeout, a cancel — ends the
//! server and its VM: the end of its input first, then, after
//! [`EOF_GRACE`] or at once when the call failed, a stop
//! that kills the whole run.
//!
//! Settings and secrets travel by name: their values come from this
//! process's environment (a name it does not have refuses the call, naming
//! it), and for a microVM reach the server only inside the VM.
//!
//! A container tool's server sees its work folder at `/work`, as a microVM's
//! does. A command tool's server sees it where tier 1 mounts it, at
//! its own path on the node; so that a call reads the same for every tool,
//! `/work` (alone or at the start of a path) in the tool's command and in
//! the call's string arguments stands for that path, and
//! `_meta["oz0/files"]` names the files by it.

use oz0_plugin::job::container_refusal;
use oz0_plugin::manifest::Tool;

/// How a microVM's server sees the work folder.
pub const WORK_IN_VM: &str = "/work";
mod end;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "macos")]
pub mod mac;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
pub mod windows;
#[cfg(unix)]
use unix::{call_over, place_files};
#[cfg(any(target_os = "linux", windows))]
mod work;
#[cfg(target_os = "linux")]
pub use work::CallDir;
#[cfg(any(target_os = "linux", windows))]
use work::{args_at_work, at_work, RUN_GRACE_S};
#[cfg(any(target_os = "linux", windows))]
pub use work::{call_refused, with_stderr_end, work_folder};

pub use end::ToolEnd;
#[cfg(target_os = "linux")]
pub use linux::{run, try_server, Ctx};

/// Longest failure reason reported, bytes (the edge takes at most 4096).
const MAX_REASON_BYTES: usize = 2000;

/// Why a call could not be made (no result to report): each names the
/// tool, the variable or the path, and where one exists the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// A container tool on a node that offers no containers.
    #[error("{}", container_refusal(tool, why))]
    NoContainers {
        /// The tool.
        tool: String,
        /// Why not.
        why: String,
    },
    /// A container tool's image could not be had or run.
    #[error("tool {tool:?}: its image {image}: {why}")]
    Image {
        /// The tool.
        tool: String,
        /// The image.
        image: String,
        /// Why, naming the blob or field and the fix.
        why: String,
    },
    /// A microVM tool on a node that offers none, or with no usable VMM.
    #[error("{}", left_out(tool, why))]
    LeftOut {
        /// The tool.
        tool: String,
        /// Why not.
        why: String,
    },
    /// A variable the node's `--tool-env` does not give tools.
    #[error("tool {tool:?} names the variable {name}, which this node gives no tool: start the node with --tool-env {name} to let tools have it")]
    VariableNotGiven {
        /// The tool.
        tool: String,
        /// The variable.
        name: String,
    },
    /// A variable this process does not have.
    #[error("tool {tool:?} names the variable {name}, and this node's environment has no {name} (or not UTF-8): set it in the node's environment (settings and secrets travel by name, never in a job)")]
    VariableMissing {
        /// The tool.
        tool: String,
        /// The variable.
        name: String,
    },
    /// A variable a run may not be given.
    #[error("variable {name}: {source}")]
    Variable {
        /// The variable.
        name: String,
        /// Why.
        source: oz0_policy::env::EnvError,
    },
    /// The call's files could not be placed.
    #[error("cannot place the call's files ({what}): {source}")]
    Files {
        /// The folder or file.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A call's file could not be written.
    #[error("cannot place the call's file {name}: {source}")]
    File {
        /// The file.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// The work folder's or data directory's path is not UTF-8.
    #[error("{0}'s path is not UTF-8")]
    NotUtf8(&'static str),
    /// A microVM tool without a command, on a node that reads no image's
    /// config.
    #[error("tool {tool:?} has no command:, so its VM runs its image's entrypoint and cmd, read from the image's registry, and this node reads none: {why}; or give the server's command: in oz0-plugin.yaml")]
    NoCommand {
        /// The tool.
        tool: String,
        /// Why the node reads no image's config.
        why: String,
    },
    /// The server's run was refused before it started.
    #[error(transparent)]
    Spec(#[from] oz0_policy::spec::SpecError),
    /// A tool that is not a microVM tool, on a Mac (whose self-test
    /// proves no tier 1 for a command's or a container's server).
    #[cfg(target_os = "macos")]
    #[error("tool {0:?} is not a microVM tool: a Mac runs only microVM tools, in Apple's container (its self-test proves no tier 1 to run a command or container tool's server in); run it on a Linux node")]
    NotAVmTool(String),
    /// A microVM tool with egress, on a Mac that cannot carry it: why.
    #[cfg(target_os = "macos")]
    #[error("tool {tool:?} has egress, and {why}")]
    NoEgress {
        /// The tool.
        tool: String,
        /// Why this Mac cannot carry it, and the fix.
        why: String,
    },
    /// A tool a Windows node cannot run at tier 0 (no wall): why.
    #[cfg(windows)]
    #[error("tool {tool:?} cannot run on this Windows node, whose tool servers run at tier 0 (no wall): {why}")]
    NotAtTier0 {
        /// The tool.
        tool: String,
        /// Why, and where it can run.
        why: String,
    },
    /// A folder a tier-0 run's spec cannot name.
    #[cfg(windows)]
    #[error("{0}")]
    Tier0Path(String),
    /// A channel to the server could not be made.
    #[error("{what}: {source}")]
    Channel {
        /// Which.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The thread that ran the server failed.
    #[error("the server's thread failed")]
    ServerThread,
    /// A server started to be tried did not answer `initialize` and
    /// `tools/list` (what it said, and how its run ended).
    #[error("{0}")]
    NoAnswer(String),
}

impl From<ToolError> for String {
    fn from(e: ToolError) -> String {
        e.to_string()
    }
}

/// The seed's words for a microVM tool on a node without microVMs.
pub fn left_out(tool: &str, why: &str) -> String {
    format!("tool {tool:?} is left out: it runs only in a microVM, which this node does not offer ({why})")
}

/// The variables the tool names, with this process's values.
fn variables(
    tool: &Tool,
    allowed: Option<&std::collections::BTreeSet<String>>,
) -> Result<Vec<(String, String)>, ToolError> {
    tool.settings
        .iter()
        .chain(tool.secrets.iter())
        .map(|n| match std::env::var(n) {
            _ if allowed.is_some_and(|a| !a.contains(n)) => Err(ToolError::VariableNotGiven {
                tool: tool.id.clone(),
                name: n.clone(),
            }),
            Ok(v) => Ok((n.clone(), v)),
            Err(_) => Err(ToolError::VariableMissing {
                tool: tool.id.clone(),
                name: n.clone(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::end::bounded;
    use super::*;

    #[test]
    fn reasons_are_bounded_and_say_so() {
        assert_eq!(bounded("short".into()), "short");
        let long = bounded("é".repeat(5000));
        assert!(
            long.ends_with("(reason cut)") && long.len() < 2100,
            "{}",
            long.len()
        );
        assert!(left_out("acme_fetch", "turned off (OZ0_MICROVM=off)").contains(
            "it runs only in a microVM, which this node does not offer (turned off (OZ0_MICROVM=off))"
        ));
    }
}
