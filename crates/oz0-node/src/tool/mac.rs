//! A call's server on a Mac: a microVM of Apple's container, through the
//! node core's door (`oz0_macos::vm::AppleContainer`, a `Sandbox`, by
//! `oz0_macos::vm::run_tool`), as `sandbox vm` runs one.
//!
//! Only a microVM tool runs here: a Mac's self-test proves no tier 1 for a
//! command's or a container's server. Apple's VMs are not inside tier 1 on
//! any Mac (Apple's own services start them): the guest's kernel is the
//! boundary, so they are offered whatever tier the Mac proved. The image
//! is the manifest's, pinned by digest; with no `command:` the VM runs the
//! image's own entrypoint and cmd (Apple's runtime reads them). The work
//! folder is shared at `/work`, the call's files under `/work/.oz0-files/`.
//! The tool's settings and secrets reach the VM only through a private env
//! file. A tool with egress gets a run of the node's proxy of its own on
//! loopback TCP (its allowlist the manifest's `egress:`, a token of its
//! own), which the VM, still without a network device, reaches through
//! the guest's bridge — the Linux node binary fetched from the edge and
//! checked against the release key — over a socket the VM publishes to the
//! node (`oz0_macos::vm::ToolEgress`). Without that binary, or without a
//! `command:` for the bridge to start, such a tool is refused, naming why.
//! Type-checked in CI; it has not run on a Mac.

use std::collections::BTreeSet;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use oz0_core::Cancel;
use oz0_macos::container::VmTool;
use oz0_macos::vm::{run_tool, AppleContainer, ToolEgress};
use oz0_plugin::job::CheckedToolJob;
use oz0_plugin::manifest::{Isolation, DEFAULT_VM_MEMORY_MIB};
use oz0_policy::AbsPath;

use super::end::{end_of, with_run_error};
use super::{call_over, place_files, variables, ToolEnd, ToolError, WORK_IN_VM};

/// The wall a call's phases name.
const BACKEND: &str = "Apple's container (not inside tier 1: the guest's kernel is the boundary)";
/// Most processes in a tool's VM (Apple's runtime has no limit of its own).
const NPROC: u32 = 256;

/// What a call needs of a Mac node.
pub struct Ctx<'a> {
    /// The call's work folder: fresh, empty, this node's own.
    pub work: &'a Path,
    /// The node's data directory.
    pub data_dir: &'a Path,
    /// Whether this node offers microVMs: why not, when not.
    pub microvms: Result<(), String>,
    /// The node's egress proxy.
    pub egress: &'a std::sync::Arc<dyn oz0_egress::EgressService>,
    /// The guest binary its microVMs' bridge runs, when fetched.
    pub guest_bin: Option<&'a Path>,
    /// The variables of this process's environment a tool may be given
    /// (the daemon's `--tool-env`).
    pub env_allowed: Option<&'a BTreeSet<String>>,
    /// Where the server's stderr goes.
    pub errors: File,
    /// Turns readable, or hangs up, when the call must stop.
    pub cancel: OwnedFd,
}

fn abs(p: &Path, what: &'static str) -> Result<AbsPath, ToolError> {
    p.to_str()
        .and_then(|s| AbsPath::new(s).ok())
        .ok_or(ToolError::NotUtf8(what))
}

/// Runs one call to its end (blocking): the tool's server in a VM of its
/// own, MCP over its stdio, and the VM stopped and deleted however the
/// call ends.
pub fn run(ctx: Ctx<'_>, t: &CheckedToolJob) -> Result<ToolEnd, ToolError> {
    let started = Instant::now();
    let id = t.tool.id.clone();
    if t.tool.isolation != Isolation::Microvm {
        return Err(ToolError::NotAVmTool(id));
    }
    if let Err(why) = &ctx.microvms {
        return Err(ToolError::LeftOut {
            tool: id,
            why: why.clone(),
        });
    }
    let env = variables(&t.tool, ctx.env_allowed)?;
    // With egress: the tool's own run of the node's proxy, held until the
    // call ends.
    let (egress, _lease) = match egress(&ctx, t)? {
        Some((e, l)) => (Some(e), Some(l)),
        None => (None, None),
    };
    let work = abs(ctx.work, "the work folder")?;
    let data_dir = abs(ctx.data_dir, "the data directory")?;
    let package = t.tool.package.as_deref().unwrap_or_default();
    let image = package.strip_prefix("oci:").unwrap_or(package).to_string();
    let tool = VmTool {
        image,
        memory_mib: u64::from(t.tool.vm_memory_mib(DEFAULT_VM_MEMORY_MIB)),
        cpus: f64::from(t.tool.resources.vcpus().unwrap_or(1)),
        nproc: NPROC,
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        work,
        egress: None,
        command: t.tool.command.clone(),
        // Named by the launcher.
        name: String::new(),
    };
    place_files(ctx.work, &t.files)?;
    let deadline = started + Duration::from_secs(t.job.timeout_s());
    let params = t.call_params(WORK_IN_VM);
    let Ctx { cancel, errors, .. } = ctx;
    let (r, ran) = call_over(
        move |c| c.call(params),
        deadline,
        &cancel,
        errors,
        move |io, stop| {
            run_tool(
                &AppleContainer::installed(),
                tool,
                &env,
                egress,
                &data_dir,
                io,
                Some(Cancel(stop)),
            )
            .map_err(|e| e.to_string())
        },
    )?;
    Ok(end_of(
        with_run_error(r, ran.err(), "Apple's container"),
        started,
        BACKEND,
        None,
    ))
}

/// The tool's egress: its run of the node's proxy on loopback TCP and
/// what its VM needs to reach it; None without `egress:`.
fn egress(
    ctx: &Ctx<'_>,
    t: &CheckedToolJob,
) -> Result<Option<(ToolEgress, oz0_egress::Lease)>, ToolError> {
    if t.tool.egress.is_empty() {
        return Ok(None);
    }
    let refuse = |why: &str| ToolError::NoEgress {
        tool: t.tool.id.clone(),
        why: why.to_string(),
    };
    let guest_bin = ctx.guest_bin.ok_or_else(|| {
        refuse("this Mac has no guest binary for its VM's bridge (it fetches the Linux node binary of its own release from its edge at start, checked against the release key it was built with): see its log")
    })?;
    if t.tool.command.is_empty() {
        return Err(refuse(
            "no command: on a Mac the guest's bridge starts the server, and the image's own entrypoint is not known here: give the tool a command: in its manifest",
        ));
    }
    let allow: Vec<String> = t.tool.egress.iter().map(ToString::to_string).collect();
    let policy = oz0_policy::net::Egress::parse(&allow, &[]).map_err(|e| refuse(&e.to_string()))?;
    let guest_bin = abs(guest_bin, "the guest binary")?;
    ToolEgress::open(
        &**ctx.egress,
        format!("tool-{}", t.tool.id),
        policy,
        guest_bin,
    )
    .map(Some)
    .map_err(|e| refuse(&format!("the node's egress proxy: {e}")))
}
