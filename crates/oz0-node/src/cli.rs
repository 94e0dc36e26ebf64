//! The command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use oz0_core::exit::Exit;

/// OZ0 node: runs AI-agent work behind the strongest wall this machine can prove.
///
/// Tier 1 on Linux puts each run in bubblewrap namespaces with a seccomp
/// filter and Landlock: it sees the system read-only, its work directory and
/// the paths you name, and nothing else — not your home, not the node's data.
///
/// The node's settings may live in /etc/oz0/node.toml (another file with
/// --config or OZ0_NODE_CONFIG): keys named like the flags of `run`
/// (`data-dir = "/var/lib/oz0-node"`, `jobs = 4`, `tool-env = ["A"]`), read
/// by `run`, `sandbox check`, `facts` and `key rotate` for the flags they
/// have; a flag given overrides the file. `oz0-node config show` prints
/// what `run` would use and where each value came from.
#[derive(Debug, Parser)]
#[command(name = "oz0-node", version, propagate_version = true)]
pub struct Cli {
    /// The config file [default: /etc/oz0/node.toml when it exists; also
    /// OZ0_NODE_CONFIG].
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Read no config file.
    #[arg(long = "no-config", global = true, conflicts_with = "config")]
    no_config: bool,
    #[command(subcommand)]
    cmd: Top,
}

/// Which commands read the config file, and which of its keys.
pub const CONFIG: oz0_config::Spec = oz0_config::Spec {
    program: "oz0-node",
    default_path: "/etc/oz0/node.toml",
    env: "OZ0_NODE_CONFIG",
    commands: &[
        (&["run"], RUN_KEYS),
        (&["sandbox", "check"], &["data-dir", "cgroup-root", "bwrap"]),
        (&["facts"], &["data-dir"]),
        (&["key", "rotate"], &["edge", "edge-ca", "data-dir"]),
        (
            &["oci", "pull"],
            &[
                "data-dir",
                "oci-registry",
                "oci-auth",
                "oci-ca",
                "oci-cache-mib",
            ],
        ),
        // Applies the file to `run` itself; its own keys are none.
        (&["config", "show"], &[]),
    ],
};

/// The keys of `run` (every key the file may hold).
const RUN_KEYS: &[&str] = &[
    "sandbox",
    "data-dir",
    "cgroup-root",
    "bwrap",
    "edge",
    "tenant",
    "edge-ca",
    "enrolment-token-file",
    "work-root",
    "name",
    "jobs",
    "tool-env",
    "keep-jobs-days",
    "keep-jobs-mib",
    "oci-registry",
    "oci-auth",
    "oci-ca",
    "oci-cache-mib",
];

#[derive(Debug, Subcommand)]
// Parsed once per process; boxing the larger variants would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Top {
    /// Run, check and inspect sandboxes.
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// One-time machine setup that needs root.
    #[command(subcommand)]
    Setup(SetupCmd),
    /// The node daemon: probe, self-test, publish facts, stay up.
    ///
    /// Creates its data directory (mode 0700) and node key on first start,
    /// probes the machine, runs the eight-property self-test once, logs each
    /// check, writes <data-dir>/facts.json, and reports tier 1 only when the
    /// self-test passed (tier 0 with the failed property otherwise). SIGTERM
    /// or SIGINT stop it cleanly.
    Run(crate::flags::NodeArgs),
    /// The node's key: rotate it with the edge (the node keeps its id).
    #[command(subcommand)]
    Key(KeyCmd),
    /// A plugin's tools on this node: which it offers, and one call.
    #[command(subcommand)]
    Plugin(crate::plugin::PluginCmd),
    /// Container images: pulled by digest into the node's image cache.
    #[command(subcommand)]
    Oci(crate::oci::OciCmd),
    /// The config file: what `run` would use.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Print this node's facts (from <data-dir>/facts.json, written by `run`).
    ///
    /// --format nfd prints a Kubernetes Node Feature Discovery local feature
    /// file (features.d); --format kv plain key=value lines.
    Facts(crate::node::FactsArgs),
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Print the settings `oz0-node run` would start with: each key, its
    /// value and where it came from (the file and line, or the default).
    /// The file is checked as `run` checks it. No key holds a secret: the
    /// enrolment token is named by its file, never shown.
    Show {
        /// Print them as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum KeyCmd {
    /// Replace <data-dir>/identity/node.key with a new key, taken by the
    /// edge on the old one's signature: the node keeps its id, name,
    /// approval and jobs, and the old key is refused from then on. Stop
    /// `oz0-node run` first (a rotation is refused while it runs on the
    /// data directory), and start it again after.
    Rotate(crate::key::RotateArgs),
}

#[derive(Debug, Subcommand)]
enum SetupCmd {
    /// Delegate a cgroup subtree to the node's user, so that its runs can have
    /// --memory, --processes and --cpu-seconds limits. Run once, as root.
    ///
    /// cgroup v2 hosts with systemd need no setup when the node runs in a
    /// unit with Delegate=yes. Elsewhere this gives USER a folder of its own,
    /// `oz0/USER`, in each hierarchy (v1: memory, pids, cpuacct, freezer; v2:
    /// the unified one with memory, pids and cpu enabled), under an `oz0`
    /// folder that stays root's: several node users coexist, none can touch
    /// another's. --remove undoes it for USER (refused while USER's node has
    /// processes there), and removes `oz0` once no user is left in it.
    Cgroups {
        /// The node's user (a name, or a uid).
        #[arg(long)]
        user: String,
        /// Which layout: auto (v2 when it has memory and pids, else v1), v1, v2.
        #[arg(long, default_value = "auto", conflicts_with = "remove")]
        mode: String,
        /// Undo the setup for USER: remove its folders (and its leftover
        /// jobs) from every hierarchy.
        #[arg(long)]
        remove: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
enum SandboxCmd {
    /// Run one command at tier 1 (Linux: bubblewrap + seccomp + Landlock).
    ///
    /// The command sees the system read-only (/usr, /etc, /bin, /lib*), the
    /// work directory (writable, its current directory), the --read and
    /// --write paths, a private /tmp that disappears with the run (also its
    /// HOME and TMPDIR), and nothing else. It has no network but its own
    /// loopback, no capabilities, and cannot create namespaces, ptrace, mount,
    /// use io_uring, bpf or keyrings. In every writable folder agents'
    /// settings (.claude, .codex, .vscode, .mcp.json, shell rc files, ...)
    /// are read-only, and in .git everything git reads to decide what to run
    /// (config, hooks, commondir, info, alternates, worktrees, modules) is
    /// read-only while commits still work; .git cannot be renamed. After the
    /// run, what it left that host git would run or follow is renamed aside
    /// (--git-findings).
    ///
    /// When the command exits, every process it started is killed, and this
    /// returns only after they are gone.
    ///
    /// Exit status: the command's own; 128+N if it died of signal N; 124 on
    /// --timeout; 125 if the sandbox refused or could not start the run (the
    /// command never ran; the reason is on stderr); 126/127 if the command
    /// could not be executed / was not found.
    ///
    /// Example:
    ///   oz0-node sandbox run --work "$PWD" --env LANG=C.UTF-8 -- make test
    #[command(verbatim_doc_comment)]
    Run(crate::run::RunArgs),
    /// Probe this machine: which tier it can have, the facts, and the fix.
    ///
    /// Asks the system (is bubblewrap there and can it create a user
    /// namespace, seccomp, Landlock ABI, which cgroup mode can enforce job
    /// limits, /dev/kvm), never a version number. Changes nothing and needs
    /// no root. With --self-test, proves tier 1 by running the eight-property
    /// self-test through the real sandbox (exit 0 only when all eight hold).
    Check(crate::check::CheckArgs),
    /// Run one tool server in a microVM whose monitor runs inside tier 1 (tier 2).
    ///
    /// The server's stdin and stdout are this command's (MCP over stdio). The
    /// VM has no network device; with --allow/--forward the run's egress proxy
    /// is carried into the guest. The work folder is the guest's /work. The
    /// VM and its folder are removed whatever ends it.
    Vm(crate::vm::VmArgs),
    /// Report what this process can see and do (for use inside a sandbox).
    ///
    /// Prints one JSON object: capabilities, no_new_privs, seccomp mode, the
    /// errno of each refused system call, and the result of each --read,
    /// --write, --list, --connect and --link you name.
    Probe(crate::witness::ProbeArgs),
}

/// Parses the command line `args` (the program name first) and runs it;
/// returns the exit status.
pub fn main(args: Vec<std::ffi::OsString>) -> i32 {
    use clap::CommandFactory;
    let applied = match oz0_config::apply(&Cli::command(), args, &CONFIG) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    let cli: Cli = match crate::flags::parse(applied.argv.iter().cloned()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(code) = refuse_root(&cli.cmd) {
        return code;
    }
    match cli.cmd {
        Top::Sandbox(SandboxCmd::Run(a)) => crate::run::run(a),
        Top::Sandbox(SandboxCmd::Probe(a)) => crate::witness::main(a),
        Top::Sandbox(SandboxCmd::Check(a)) => crate::check::main(a),
        Top::Sandbox(SandboxCmd::Vm(a)) => crate::vm::main(a),
        Top::Run(a) => crate::node::run(a),
        Top::Facts(a) => crate::node::facts(a),
        Top::Config(ConfigCmd::Show { json }) => config_show(cli.config, cli.no_config, json),
        Top::Plugin(c) => crate::plugin::main(c),
        Top::Oci(c) => crate::oci::main(c),
        Top::Key(KeyCmd::Rotate(a)) => crate::key::rotate(a),
        Top::Setup(SetupCmd::Cgroups {
            user,
            remove: true,
            json,
            ..
        }) => remove_cgroups(&user, json),
        Top::Setup(SetupCmd::Cgroups {
            user, mode, json, ..
        }) => setup_cgroups(&user, &mode, json),
    }
}

/// Nodes never run as root: a root node's host-side work (binding, placing
/// and removing what a run may write, reading its files) would act with
/// root's rights on what its runs control, and its runs' files would be
/// root's. Every command that runs or judges sandboxes refuses uid 0 with
/// the fix; `setup` (root's, by design), `facts` and the in-sandbox probe
/// do not.
fn refuse_root(cmd: &Top) -> Option<i32> {
    let root = rustix::process::getuid().is_root() || rustix::process::geteuid().is_root();
    if !root {
        return None;
    }
    let (what, code) = match cmd {
        Top::Sandbox(SandboxCmd::Run(_)) => ("sandbox run", Exit::Sandbox),
        Top::Sandbox(SandboxCmd::Vm(_)) => ("sandbox vm", Exit::Sandbox),
        Top::Sandbox(SandboxCmd::Check(_)) => ("sandbox check", Exit::CheckFailed),
        Top::Run(_) => ("run", Exit::CheckFailed),
        Top::Key(_) => ("key rotate", Exit::CheckFailed),
        // An image unpacked as root would be root's, with the modes it
        // claims honoured by no one.
        Top::Oci(_) => ("oci pull", Exit::CheckFailed),
        Top::Plugin(crate::plugin::PluginCmd::Check(_)) => ("plugin check", Exit::CheckFailed),
        Top::Plugin(crate::plugin::PluginCmd::Call(_)) => ("plugin call", Exit::Sandbox),
        _ => return None,
    };
    let prefix = if code == Exit::Sandbox {
        "sandbox refused"
    } else {
        "refusing to run as root"
    };
    eprintln!(
        "oz0-node: {prefix}: `oz0-node {what}` runs as an unprivileged user, never as root (a root node's host-side work would act with root's rights on what its runs control): run it as the node's user, e.g. `runuser -u oz0node -- oz0-node {what} …`, after `oz0-node setup cgroups --user oz0node` once as root"
    );
    Some(code.code())
}

/// `config show`: the file applied to a bare `oz0-node run`, checked the
/// same way, and each of run's settings with its source.
fn config_show(config: Option<PathBuf>, no_config: bool, json: bool) -> i32 {
    use clap::CommandFactory;
    let mut argv: Vec<std::ffi::OsString> = vec!["oz0-node".into()];
    if let Some(c) = config {
        argv.push("--config".into());
        argv.push(c.into());
    }
    if no_config {
        argv.push("--no-config".into());
    }
    argv.push("run".into());
    let cmd = Cli::command();
    let applied = match oz0_config::apply(&cmd, argv, &CONFIG) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("oz0-node: {e}");
            return Exit::Usage.code();
        }
    };
    // Shown even when `run` would still want a flag (say --tenant with
    // --edge): `run` says so itself.
    let m = cmd
        .clone()
        .ignore_errors(true)
        .get_matches_from(&applied.argv);
    let run = cmd.find_subcommand("run").expect("run exists");
    let Some(rm) = m.subcommand_matches("run") else {
        eprintln!("oz0-node: config show: cannot read run's settings");
        return Exit::Usage.code();
    };
    let settings = oz0_config::effective(rm, &applied, RUN_KEYS, run, &|_, v| v.to_string());
    let file = applied.file.as_ref().map(|f| f.path.display().to_string());
    if json {
        crate::out::line(
            &serde_json::to_string_pretty(&serde_json::json!({
                "file": file,
                "settings": settings,
            }))
            .expect("settings serialise"),
        );
    } else {
        let head = match &file {
            Some(f) => format!("# oz0-node run, with {f}"),
            None if no_config => "# oz0-node run, with no config file (--no-config)".to_string(),
            None => format!(
                "# oz0-node run, with no config file ({} does not exist)",
                CONFIG.default_path
            ),
        };
        crate::out::print(&format!("{head}\n{}", oz0_config::render(&settings)));
    }
    Exit::Ok.code()
}

fn remove_cgroups(user: &str, json: bool) -> i32 {
    match oz0_limits::remove_delegation(user) {
        Ok(r) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("report serialises")
                );
            } else if r.removed.is_empty() {
                println!(
                    "Nothing to remove: no cgroup folder of {} was found",
                    r.user
                );
            } else {
                println!("Removed {}'s cgroup folders:", r.user);
                for p in &r.removed {
                    println!("  {}", p.display());
                }
            }
            if !json {
                for k in &r.kept {
                    println!("Kept {} ({})", k.path.display(), k.why);
                }
            }
            Exit::Ok.code()
        }
        Err(e) => {
            eprintln!("oz0-node: setup cgroups --remove: {e}");
            Exit::CheckFailed.code()
        }
    }
}

fn setup_cgroups(user: &str, mode: &str, json: bool) -> i32 {
    let mode = match mode {
        "auto" => oz0_limits::SetupMode::Auto,
        "v1" => oz0_limits::SetupMode::V1,
        "v2" => oz0_limits::SetupMode::V2,
        other => {
            eprintln!("oz0-node: --mode {other:?}: use auto, v1 or v2");
            return Exit::Usage.code();
        }
    };
    match oz0_limits::setup_delegation(user, mode) {
        Ok(r) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("report serialises")
                );
            } else {
                println!(
                    "Delegated cgroup {:?} to {} (uid {}): {}",
                    r.version,
                    r.user,
                    r.uid,
                    r.delegated
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                println!("Controllers: {}", r.controllers.join(", "));
                if !r.next.is_empty() {
                    println!("Next: {}", r.next);
                }
            }
            Exit::Ok.code()
        }
        Err(e) => {
            eprintln!("oz0-node: setup cgroups: {e}");
            Exit::CheckFailed.code()
        }
    }
}
