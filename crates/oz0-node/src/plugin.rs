//! `oz0-node plugin check` and `oz0-node plugin call`: an installed
//! plugin's tools on this node.
//!
//! `check` reads the plugin's `oz0-plugin.yaml` (never through a symbolic
//! link), asks what the node asks at its start (tier 1 by the self-test,
//! then one test VM booted inside it) and says, for each tool, whether this
//! node offers it or leaves it out, and why. `call` makes one `tools/call`
//! of one tool here, as an edge job of kind `tool` would (`crate::tool`),
//! with the caller's environment for the tool's settings and secrets.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use oz0_core::exit::Exit;
use oz0_core::Wall;
use oz0_edge::term::escape;
use oz0_plugin::job::{container_refusal, read_plugin_dir};
use oz0_plugin::manifest::{Isolation, Tool};
use oz0_plugin::mcp::{shown, Listed};
use serde_json::json;

use crate::flags::HostArgs;

/// `oz0-node plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCmd {
    /// Which of a plugin's tools this node offers, and why it leaves any out.
    ///
    /// Reads DIR/oz0-plugin.yaml (a refused manifest is named with its line
    /// and the fix), runs the self-test and the microVM probe as `oz0-node
    /// run` does at its start, and prints one line per tool: a microVM tool
    /// needs a test VM that booted inside tier 1 (and the image's
    /// architecture; without command:, its image's registry among
    /// --oci-registry, where its entrypoint is read), a command tool needs tier 1 and a server that starts
    /// there, a container tool needs tier 1 and its image's registry among
    /// --oci-registry (runtime.oci). A command or container tool's server is
    /// started as `plugin call` starts it (tier 1, a container tool's image
    /// pulled into the node's cache and its root, an empty work folder, its
    /// settings and secrets from this environment) and must answer
    /// initialize and tools/list within --server-timeout; its stderr's end
    /// is shown when it does not.
    /// Changes nothing.
    ///
    /// Exit status: 0 when this node offers every tool; 1 when it leaves one
    /// out or the manifest is refused.
    Check(CheckArgs),
    /// Make one tools/call of one of a plugin's tools on this node.
    ///
    /// Starts the tool's MCP server behind the wall its manifest asks for —
    /// a microVM of its own for isolation: microvm (never anything weaker),
    /// the tier-1 sandbox for a command tool, its image's root inside tier 1
    /// for a container tool (pulled from a registry --oci-registry names,
    /// by digest); a tool without command: runs its image's entrypoint and
    /// cmd (a microVM tool's read from that registry) — makes initialize, tools/list
    /// and the call, prints the result, and ends the server and its VM.
    /// Files given with --file are placed under /work/.oz0-files/ and named
    /// in the call's _meta["oz0/files"]. The tool's settings and secrets are
    /// read by name from this environment. SIGINT, SIGTERM or SIGHUP cancel
    /// the call and stop the server and its VM.
    ///
    /// Exit status: 0 the tool answered; 1 it answered with isError; 125 no
    /// result (refused, the server failed or the call timed out: the reason
    /// on stderr); 128+N stopped by signal N.
    ///
    /// Example:
    ///   oz0-node plugin call /opt/plugins/fs fs --name list_directory \
    ///       --arguments '{"path": "/work"}' --work "$PWD"
    #[command(verbatim_doc_comment)]
    Call(CallCliArgs),
}

/// `plugin check` flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The installed plugin's folder (holding oz0-plugin.yaml).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// One JSON document instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Do not start command tools' servers: say only whether this node has
    /// what they need (a tool whose server cannot start here is then
    /// offered, and its calls fail).
    #[arg(long)]
    pub no_start: bool,
    /// How long a command tool's server has to answer initialize and
    /// tools/list, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=600))]
    pub server_timeout: u64,
    #[command(flatten)]
    pub oci: crate::flags::OciArgs,
    #[command(flatten)]
    pub host: HostArgs,
}

/// `plugin call` flags.
#[derive(Debug, Args)]
pub struct CallCliArgs {
    #[command(flatten)]
    pub call: crate::flags::CallFlags,
    /// What runs a container tool's image: tier1 (its root inside this
    /// node's tier-1 sandbox) or gvisor (runsc: no network at all, a kernel
    /// of its own; a tool with egress is refused there).
    #[arg(long = "oci-runtime", value_name = "tier1|gvisor", default_value = "tier1",
          value_parser = ["tier1", "gvisor"])]
    pub oci_runtime: String,
    #[command(flatten)]
    pub oci: crate::flags::OciArgs,
    #[command(flatten)]
    pub host: HostArgs,
}

/// Runs `plugin …`; returns the exit status.
pub fn main(cmd: PluginCmd) -> i32 {
    match cmd {
        PluginCmd::Check(a) => check(&a),
        PluginCmd::Call(a) => call(a),
    }
}

/// Whether this node offers `t`, and why not: `oci` is the registries it
/// may pull images from.
fn offer(
    t: &Tool,
    tier1: Result<(), String>,
    microvm: Result<(), String>,
    oci: &[String],
) -> Result<(), String> {
    match t.isolation {
        Isolation::Container => {
            let why = |w: &str| container_refusal(&t.id, w);
            tier1.map_err(|e| why(&format!("no tier 1 to run containers in: {e}")))?;
            registry_named(t, oci).map_err(|w| why(&w))
        }
        Isolation::Sandbox => tier1.map_err(|why| {
            format!("tool {:?} is left out: its server runs in the node's tier-1 sandbox, which this node does not have ({why})", t.id)
        }),
        Isolation::Microvm => {
            microvm.map_err(|why| crate::tool::left_out(&t.id, &why))?;
            if t.command.is_empty() {
                registry_named(t, oci).map_err(|w| {
                    format!("tool {:?} is left out: it has no command:, so its VM runs its image's entrypoint and cmd, which the node reads from the image's registry, and {w}", t.id)
                })?;
            }
            match t.arch.as_deref() {
                Some(a) if a != std::env::consts::ARCH => Err(format!(
                    "tool {:?} is left out: its image is for {a}, and this node runs on {}",
                    t.id,
                    std::env::consts::ARCH
                )),
                _ => Ok(()),
            }
        }
    }
}

/// Whether `t`'s image comes from a registry among `oci` (the node's
/// `--oci-registry`), and the fix when not.
fn registry_named(t: &Tool, oci: &[String]) -> Result<(), String> {
    let registry = t
        .package
        .as_deref()
        .and_then(|p| oz0_oci::Reference::parse(p).ok())
        .map(|r| r.registry)
        .unwrap_or_default();
    if oci.iter().any(|r| r.trim().eq_ignore_ascii_case(&registry)) {
        Ok(())
    } else {
        Err(format!(
            "its image's registry {registry} is not among --oci-registry: name it to pull from it"
        ))
    }
}

fn isolation_name(i: Isolation) -> &'static str {
    match i {
        Isolation::Container => "container",
        Isolation::Microvm => "microvm",
        Isolation::Sandbox => "command (tier-1 sandbox)",
    }
}

fn check(a: &CheckArgs) -> i32 {
    let (_, manifest) = match read_plugin_dir(&a.dir) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::CheckFailed.code();
        }
    };
    let data_dir = match a.host.data.resolve() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let wall = crate::platform::platform(crate::platform::Settings::of(&a.host)).into_wall();
    let c = wall.check();
    let self_test = wall.self_test(&c, &mut |_| {});
    let tier1 = match self_test
        .as_ref()
        .map(|t| (t.tier(), t.lines.iter().find(|l| !l.ok)))
    {
        Some((1, _)) => Ok(()),
        Some((_, Some(l))) => Err(format!("the self-test failed: {}", l.text())),
        _ => Err(c.headline.clone()),
    };
    let probe = oz0_microvm::bootcheck::probe(&oz0_microvm::bootcheck::ProbeOptions::from_env(
        tier1.is_ok(),
        a.host.config(),
        data_dir,
    ));
    let microvm = if probe.microvm.ready {
        Ok(())
    } else {
        Err(probe.detail.clone())
    };
    let mut tools: Vec<(&Tool, Result<(), String>)> = manifest
        .tools
        .iter()
        .map(|t| {
            (
                t,
                offer(t, tier1.clone(), microvm.clone(), &a.oci.registries),
            )
        })
        .collect();
    // What a call needs of a command or container tool: its server
    // starts in tier 1.
    let servers = if a.no_start {
        vec![None; tools.len()]
    } else {
        start_servers(a, &mut tools)
    };
    let all = tools.iter().all(|(_, r)| r.is_ok());
    if a.json {
        let doc = json!({
            "plugin": manifest.name,
            "version": manifest.version,
            "tier1": tier1.is_ok(),
            "microvm": probe.microvm,
            "microvm_detail": probe.detail,
            "tools": tools.iter().zip(&servers).map(|((t, r), s)| json!({
                "id": t.id,
                "isolation": isolation_name(t.isolation),
                "package": t.package,
                "offered": r.is_ok(),
                "reason": r.as_ref().err(),
                "server": s.as_ref().and_then(|s| s.as_ref().ok()),
            })).collect::<Vec<_>>(),
        });
        crate::out::line(&oz0_edge::term::json(&doc).expect("serialises"));
    } else {
        crate::out::line(&format!(
            "Plugin {}: {} tool(s); tier 1: {}; MicroVMs: {}",
            escape(manifest.name.as_deref().unwrap_or("(unnamed)").as_bytes()),
            tools.len(),
            if tier1.is_ok() { "proven" } else { "none" },
            probe.detail
        ));
        for ((t, r), s) in tools.iter().zip(&servers) {
            let kind = isolation_name(t.isolation);
            crate::out::line(&match (r, s) {
                (Ok(()), Some(Ok(l))) => format!(
                    "{}: {kind}: offered (its server answered in tier 1 in {} ms and lists {})",
                    t.id,
                    l.initialize_ms,
                    escape(shown(&l.tools).as_bytes())
                ),
                (Ok(()), _) if a.no_start && t.isolation != Isolation::Microvm => {
                    format!(
                        "{}: {kind}: offered (its server was not started: --no-start)",
                        t.id
                    )
                }
                (Ok(()), _) => format!("{}: {kind}: offered", t.id),
                (Err(why), _) => format!("{}: {kind}: {}", t.id, escape(why.as_bytes())),
            });
        }
    }
    if all {
        Exit::Ok.code()
    } else {
        Exit::CheckFailed.code()
    }
}

/// Starts each offered command or container tool's server as a call
/// would, leaving out those that do not answer: what each listed.
fn start_servers(
    a: &CheckArgs,
    tools: &mut [(&Tool, Result<(), String>)],
) -> Vec<Option<Result<Listed, String>>> {
    let mut servers: Vec<Option<Result<Listed, String>>> = vec![None; tools.len()];
    // Opened once, when a server is to be tried.
    let mut host = None;
    for (i, (t, r)) in tools.iter_mut().enumerate() {
        if r.is_ok() && matches!(t.isolation, Isolation::Sandbox | Isolation::Container) {
            let host = host.get_or_insert_with(|| {
                crate::platform::platform(crate::platform::Settings::of(&a.host))
                    .tier1()
                    .map_err(|e| e.to_string())
            });
            let tried = match host {
                Ok(h) => try_server(a, h, t),
                Err(e) => Err(e.clone()),
            };
            if let Err(why) = &tried {
                *r = Err(format!("tool {:?} is left out: its server did not answer in the node's tier-1 sandbox: {why}", t.id));
                // (A container tool's image is pulled first: a pull's
                // failure is said here too, naming the blob.)
            }
            servers[i] = Some(tried);
        }
    }
    servers
}

/// Starts a command tool's server in tier 1 in a work folder of its own
/// and asks it `initialize` and `tools/list`: what it lists, or why it did
/// not answer, with the end of what it wrote to stderr.
fn try_server(a: &CheckArgs, host: &oz0_linux::Tier1, t: &Tool) -> Result<Listed, String> {
    let dir = crate::tool::CallDir::new().map_err(|e| {
        format!(
            "a work folder under {}: {e}",
            std::env::temp_dir().display()
        )
    })?;
    let errors = rustix::fs::memfd_create("oz0-check-stderr", rustix::fs::MemfdFlags::CLOEXEC)
        .map(std::fs::File::from)
        .map_err(|e| format!("a buffer for the server's stderr: {e}"))?;
    let kept = errors
        .try_clone()
        .map_err(|e| format!("a buffer for the server's stderr: {e}"))?;
    let (cancel, _signalled) =
        signal_cancel().map_err(|e| format!("cannot watch for signals: {e}"))?;
    let data_dir = host.data_dir().to_path_buf();
    let r = crate::tool::try_server(
        crate::tool::Ctx {
            host,
            work: &dir.0,
            data_dir: &data_dir,
            microvms: Ok(()),
            // offer() found its registry among --oci-registry.
            images: Ok(&a.oci),
            gvisor: false,
            env_allowed: None,
            errors,
            cancel,
        },
        t,
        std::time::Duration::from_secs(a.server_timeout),
    );
    r.map_err(|e| crate::tool::with_stderr_end(e.to_string(), kept))
}

fn call(a: CallCliArgs) -> i32 {
    let fail = crate::tool::call_refused;
    let checked = match a.call.checked() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let host = match crate::platform::platform(crate::platform::Settings::of(&a.host)).tier1() {
        Ok(h) => h,
        Err(e) => return fail(e.to_string()),
    };
    let (_own, work) = match crate::tool::work_folder(a.call.work.as_deref()) {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let (cancel, signalled) = match signal_cancel() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot watch for signals: {e}")),
    };
    let errors = match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => return fail(format!("stderr: {e}")),
    };
    let data_dir = host.data_dir().to_path_buf();
    let end = crate::tool::run(
        crate::tool::Ctx {
            host: &host,
            work: &work,
            data_dir: &data_dir,
            // Asked for by name: whatever VMM this environment selects
            // (OZ0_MICROVM, pinned or named) runs it, or it is left out.
            microvms: Ok(()),
            images: if a.oci.registries.is_empty() {
                Err(oz0_policy::facts::OciReason::NoRegistry.words().to_string())
            } else {
                Ok(&a.oci)
            },
            gvisor: a.oci_runtime == "gvisor",
            // The caller's own environment, asked for by the caller.
            env_allowed: None,
            errors,
            cancel,
        },
        &checked,
    );
    let end = match end {
        Ok(e) => e,
        Err(e) => return fail(e.to_string()),
    };
    let cancelled = signalled.get().map(|sig| {
        (
            format!("the call was cancelled by signal {sig}; its server was stopped"),
            128 + sig,
        )
    });
    end.show(a.call.json, cancelled)
}

/// The signal that cancelled the call, once one did.
struct Signalled(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Signalled {
    fn get(&self) -> Option<i32> {
        match self.0.load(std::sync::atomic::Ordering::SeqCst) {
            0 => None,
            n => i32::try_from(n).ok(),
        }
    }
}

/// A cancel descriptor that turns readable on SIGINT, SIGTERM or SIGHUP.
fn signal_cancel() -> std::io::Result<(OwnedFd, Signalled)> {
    let (r, w) = UnixStream::pair()?;
    let which = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::low_level::pipe::register(sig, w.try_clone()?)?;
        let which = which.clone();
        let n = usize::try_from(sig).unwrap_or(15);
        let _ = signal_hook::flag::register_usize(sig, which, n);
    }
    Ok((OwnedFd::from(r), Signalled(which)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "oci:ghcr.io/acme/fetch@sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn tool(rest: &str) -> Tool {
        let m = oz0_plugin::manifest::Manifest::parse(&format!(
            "tools:\n  - id: t\n    package: {P}\n    isolation: microvm\n{rest}"
        ))
        .unwrap();
        m.tools.into_iter().next().unwrap()
    }

    #[test]
    fn a_microvm_tool_without_a_command_needs_its_images_registry() {
        let registries = ["ghcr.io".to_string()];
        let bare = tool("");
        assert_eq!(offer(&bare, Ok(()), Ok(()), &registries), Ok(()));
        let why = offer(&bare, Ok(()), Ok(()), &[]).unwrap_err();
        assert!(
            why.contains("has no command:") && why.contains("ghcr.io is not among --oci-registry"),
            "{why}"
        );
        // With a command, the VM needs nothing of the registry.
        let given = tool("    command: [/app/server]\n");
        assert_eq!(offer(&given, Ok(()), Ok(()), &[]), Ok(()));
        // No microVMs: that reason first.
        let why = offer(&bare, Ok(()), Err("no VMM".into()), &registries).unwrap_err();
        assert!(
            why.contains("runs only in a microVM") && why.contains("no VMM"),
            "{why}"
        );
    }
}
