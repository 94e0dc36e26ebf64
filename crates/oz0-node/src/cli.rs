//! The command line: one tree for every platform. A command or flag that
//! only one platform has is gated by `cfg`, and so is help text that says
//! what the wall is there; each command's handler is in its own module
//! (Linux's at the top, `mac::` and `win::` for the others).

#[cfg(target_os = "linux")]
use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[cfg(target_os = "linux")]
use oz0_core::exit::Exit;

#[derive(Debug, Parser)]
#[command(name = "oz0-node", version, propagate_version = true)]
#[cfg_attr(
    target_os = "linux",
    doc = "OZ0 node: runs AI-agent work behind the strongest wall this machine can prove.

Tier 1 on Linux puts each run in bubblewrap namespaces with a seccomp
filter and Landlock: it sees the system read-only, its work directory and
the paths you name, and nothing else — not your home, not the node's data.

The node's settings may live in /etc/oz0/node.toml (another file with
--config or OZ0_NODE_CONFIG): keys named like the flags of `run`
(`data-dir = \"/var/lib/oz0-node\"`, `jobs = 4`, `tool-env = [\"A\"]`), read
by `run`, `sandbox check`, `facts` and `key rotate` for the flags they
have; a flag given overrides the file. `oz0-node config show` prints
what `run` would use and where each value came from."
)]
#[cfg_attr(
    target_os = "macos",
    doc = "OZ0 node for macOS: probes this Mac's sandbox (Seatbelt) and microVMs
(Apple's container), proves what holds with its self-test, runs
commands in Seatbelt, and takes tier-0 work from an edge.

A tier is reported only when the self-test showed it on this Mac. macOS
cannot limit the memory or the processes of a whole run, so the
self-test fails at job_limits and a Mac is routed at tier 0; `sandbox
check --self-test` shows which properties hold."
)]
#[cfg_attr(
    windows,
    doc = "OZ0 node for Windows: probes Windows' process security environment
(PSEC), reports what it found, and registers with an edge.

Windows nodes are routed at sandbox tier 0: work that needs tier 1
(every job an outside event starts) goes to Linux or macOS nodes.
`sandbox check` shows what this machine has; `run --sandbox psec` tests
PSEC on this node at start. No command needs an administrator."
)]
pub struct Cli {
    /// The config file [default: /etc/oz0/node.toml when it exists; also
    /// OZ0_NODE_CONFIG].
    #[cfg(target_os = "linux")]
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Read no config file.
    #[cfg(target_os = "linux")]
    #[arg(long = "no-config", global = true, conflicts_with = "config")]
    no_config: bool,
    #[command(subcommand)]
    cmd: Top,
}

/// Which commands read the config file, and which of its keys.
#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
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
    #[cfg_attr(target_os = "linux", doc = "Run, check and inspect sandboxes.")]
    #[cfg_attr(
        target_os = "macos",
        doc = "Check this Mac's sandbox, run commands and tool servers in it."
    )]
    #[cfg_attr(windows, doc = "Check this machine's sandbox, and the PSEC preview.")]
    #[command(subcommand)]
    Sandbox(SandboxCmd),
    /// One-time machine setup that needs root.
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Setup(SetupCmd),
    /// The node daemon: probe, self-test, publish facts, stay up.
    ///
    /// Creates its data directory (mode 0700) and node key on first start,
    /// probes the machine, runs the eight-property self-test once, logs each
    /// check, writes <data-dir>/facts.json, and reports tier 1 only when the
    /// self-test passed (tier 0 with the failed property otherwise). SIGTERM
    /// or SIGINT stop it cleanly.
    #[cfg(target_os = "linux")]
    Run(crate::flags::NodeArgs),
    /// The node daemon: probe, self-test, publish the facts, take work.
    ///
    /// Creates its data directory (0700) and node key (0600) on first
    /// start, probes this Mac, runs the self-test of Seatbelt, writes
    /// <data-dir>/facts.json with the tier it proved, and with --edge
    /// registers with the edge, reports the facts and takes tier-0 shell
    /// jobs, one at a time, with no wall (a job that asks for egress or
    /// limits is refused); every process a job starts ends with it.
    /// Ctrl-C or SIGTERM stops it.
    #[cfg(target_os = "macos")]
    Run(crate::mac::node::RunArgs),
    /// The node daemon: probe, publish the facts, stay up.
    ///
    /// Creates its data directory and node key on first start, probes
    /// PSEC, writes <data-dir>\facts.json, and with --edge registers with
    /// the edge, reports the facts and takes tier-0 shell jobs, one at a
    /// time, with no wall (a job that asks for egress or limits is
    /// refused). The edge routes a Windows node at tier 0. Ctrl-C stops it.
    #[cfg(windows)]
    Run(crate::win::node::RunArgs),
    /// The node's key: rotate it with the edge (the node keeps its id).
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Key(KeyCmd),
    /// A plugin's tools on this node: which it offers, and one call.
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Plugin(crate::plugin::PluginCmd),
    /// A plugin's command tools, checked and called here at tier 0 (no wall).
    #[cfg(windows)]
    #[command(subcommand)]
    Plugin(crate::win::plugin::PluginCmd),
    /// Container images: pulled by digest into the node's image cache.
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Oci(crate::oci::OciCmd),
    /// The config file: what `run` would use.
    #[cfg(target_os = "linux")]
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Print this node's facts (from <data-dir>/facts.json, written by `run`).
    ///
    /// --format nfd prints a Kubernetes Node Feature Discovery local feature
    /// file (features.d); --format kv plain key=value lines.
    #[cfg(target_os = "linux")]
    Facts(crate::node::FactsArgs),
    #[cfg_attr(
        target_os = "macos",
        doc = "Print this node's facts (from <data-dir>/facts.json, written by `run`)."
    )]
    #[cfg_attr(
        windows,
        doc = "Print this node's facts (from <data-dir>\\facts.json, written by `run`)."
    )]
    #[cfg(not(target_os = "linux"))]
    Facts(crate::daemon::FactsArgs),
}

#[cfg(target_os = "linux")]
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

#[cfg(target_os = "linux")]
#[derive(Debug, Subcommand)]
enum KeyCmd {
    /// Replace <data-dir>/identity/node.key with a new key, taken by the
    /// edge on the old one's signature: the node keeps its id, name,
    /// approval and jobs, and the old key is refused from then on. Stop
    /// `oz0-node run` first (a rotation is refused while it runs on the
    /// data directory), and start it again after.
    Rotate(crate::key::RotateArgs),
}

#[cfg(target_os = "linux")]
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
// Parsed once per process; boxing the larger variants would buy nothing.
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
    #[cfg(target_os = "linux")]
    Run(crate::run::RunArgs),
    /// Run one command through sandbox-exec with the node's Seatbelt profile.
    ///
    /// The command sees the system read-only, its work folder, the --write
    /// folders and a TEMP of its own (also HOME) writable, the --read paths
    /// and the node binary readable, never the node's data directory; .git's
    /// hooks and config and agents' settings are read-only and .git and the
    /// writable folders cannot be renamed aside. Its network is only the
    /// node's egress proxy on a loopback port (with --allow or --forward),
    /// which wants the run's token; each decision is a line of
    /// <data-dir>/egress-audit.jsonl. It gets only the variables named.
    /// When its first process ends, or --timeout passes, or this command is
    /// stopped, every process of the run ends, even one that left for a
    /// session of its own (each run's profile marks its processes).
    /// --memory, --processes and --cpu-seconds are refused (macOS cannot
    /// limit a whole run).
    ///
    /// Exit status: the command's own; 128+N if it died of signal N; 124 on
    /// --timeout; 125 if the sandbox refused the run (the command never ran).
    #[cfg(target_os = "macos")]
    Run(crate::mac::run::RunArgs),
    /// Run one command in a PSEC container (a preview: set
    /// OZ0_SANDBOX_PSEC_PREVIEW=1; without it this is refused, as on any
    /// node without tier 1).
    ///
    /// Started from a terminal, the command gets a console of its own
    /// (ConPTY), carried to and from this one; with its input not the
    /// terminal (< NUL, a file, a pipe) it gets its streams instead, the
    /// terminal's carried through pipes. It is never given this console.
    ///
    /// Exit status: the command's own; 124 on --timeout; 125 if the
    /// sandbox refused or could not start the run (the command never ran;
    /// the reason is on stderr).
    #[cfg(windows)]
    Run(crate::win::sandbox::RunArgs),
    /// Probe this machine: which tier it can have, the facts, and the fix.
    ///
    /// Asks the system (is bubblewrap there and can it create a user
    /// namespace, seccomp, Landlock ABI, which cgroup mode can enforce job
    /// limits, /dev/kvm), never a version number. Changes nothing and needs
    /// no root. With --self-test, proves tier 1 by running the eight-property
    /// self-test through the real sandbox (exit 0 only when all eight hold).
    #[cfg(target_os = "linux")]
    Check(crate::check::CheckArgs),
    /// Probe this Mac: which tier it can have, the facts, and the fix.
    ///
    /// Runs a probe profile through /usr/bin/sandbox-exec that must refuse
    /// the read of a file the node made (while the same read without it
    /// works), reads the processor (hw.optional.arm64), the macOS version
    /// (sw_vers), and Apple's container (`container --version`, `container
    /// system status`). Never decides by version whether Seatbelt holds.
    /// Changes nothing, needs no administrator. With --self-test, proves
    /// tier 1 by running the eight-property self-test through Seatbelt
    /// (exit 0 only when all eight hold).
    #[cfg(target_os = "macos")]
    Check(crate::mac::CheckArgs),
    /// Probe this machine: the tier it can have, the facts, and the fix.
    ///
    /// Asks Windows whether the API set
    /// api-win-appmodel-processmodel~securityenvironment is implemented,
    /// whether processmodel.dll (from System32 only) has its exports, which
    /// PSEC contract it supports and which features it reports, and creates
    /// and closes a minimal environment. Never decides by build number,
    /// changes nothing, needs no administrator. With --psec, runs the
    /// node's self-test of PSEC (exit 0 only when all eight checks hold).
    #[cfg(windows)]
    Check(crate::win::wall::CheckArgs),
    /// Run one tool server in a microVM whose monitor runs inside tier 1 (tier 2).
    ///
    /// The server's stdin and stdout are this command's (MCP over stdio). The
    /// VM has no network device; with --allow/--forward the run's egress proxy
    /// is carried into the guest. The work folder is the guest's /work. The
    /// VM and its folder are removed whatever ends it.
    ///
    /// Experimental: smolvm does not yet keep a guest inside the folder it
    /// shares (smolvm issues #151 and #152), so a guest that breaks its own
    /// kernel could reach what the monitor sees: only what tier 1 lets it
    /// see, which is why the monitor never runs outside tier 1.
    #[cfg(target_os = "linux")]
    Vm(crate::vm::VmArgs),
    /// Run one tool server in a microVM of Apple's container (tier 2).
    ///
    /// container run --rm --network none --read-only --cap-drop ALL, as this
    /// user's uid:gid, whole CPUs, the tool's memory, --ulimit nproc, the
    /// work folder at /work; the server's stdin and stdout are this
    /// command's (MCP over stdio). Its variables reach it only through an
    /// env file only this user can read, removed when the tool stops; the
    /// CLI starts with a clean environment. Needs macOS 26 on Apple
    /// silicon and container 1.5.0 or later.
    #[cfg(target_os = "macos")]
    Vm(crate::mac::vm::VmArgs),
    /// Report what this process can see and do (for use inside a sandbox).
    ///
    /// Prints one JSON object: capabilities, no_new_privs, seccomp mode, the
    /// errno of each refused system call, and the result of each --read,
    /// --write, --list, --connect and --link you name.
    #[cfg(target_os = "linux")]
    Probe(crate::witness::ProbeArgs),
    /// Report what this process can see and do (for use inside a sandbox).
    ///
    /// Prints one JSON object: the result of each --read, --write, --list,
    /// --connect, --proxy-get and --listen you name.
    #[cfg(target_os = "macos")]
    Probe(crate::witness::ProbeArgs),
    /// Report what this process can see and do (for use inside a sandbox).
    ///
    /// Prints one JSON object: the result of each --read, --write, --list,
    /// --connect, --proxy-get and --listen you name. The self-test's
    /// witness inside every run.
    #[cfg(windows)]
    Probe(crate::witness::ProbeArgs),
    /// Serve one run's egress proxy on a loopback port, until Ctrl-C.
    ///
    /// What a PSEC run reaches through its bridge or relay: every request
    /// needs the run's token (407 without it), a host --allow does not name
    /// gets 403, names under .invalid are refused before any lookup, and
    /// each decision is one JSON line in the audit log. Prints the address
    /// it listens on. Use it to check a machine's proxy and firewall.
    #[cfg(windows)]
    Proxy(crate::win::proxy::ProxyArgs),
    /// The egress relay of one PSEC run, or --remove-profile.
    ///
    /// Listens on the first free port of 127.0.0.1:47330-47361 (at most 32
    /// relays on a machine) and carries each connection to the run's egress
    /// proxy (--to), which still wants the run's token. The node would start
    /// it in the AppContainer profile oz0.egress-relay; this build starts
    /// no PSEC run, so it runs only by hand. --remove-profile removes that
    /// profile of this user, as an uninstall does.
    #[cfg(windows)]
    Relay(crate::win::relay::RelayArgs),
}

/// Parses the command line `args` (the program name first) and runs it;
/// returns the exit status.
pub fn main(args: Vec<std::ffi::OsString>) -> i32 {
    // Linux applies its config file's keys as flags first.
    #[cfg(target_os = "linux")]
    let args = if oz0_config::may_apply(&args, &CONFIG) {
        use clap::CommandFactory;
        match oz0_config::apply(&Cli::command(), args, &CONFIG) {
            Ok(a) => a.argv,
            Err(e) => {
                eprintln!("oz0-node: {e}");
                return Exit::Usage.code();
            }
        }
    } else {
        // No config file could apply: one parse, the strict one.
        args
    };
    #[cfg(target_os = "linux")]
    let alone = sandbox_run_alone(args);
    #[cfg(not(target_os = "linux"))]
    let alone = Err(args);
    let cli: Cli = match alone {
        Ok(c) => c,
        Err(args) => match crate::flags::parse(args) {
            Ok(c) => c,
            Err(code) => return code,
        },
    };
    #[cfg(target_os = "linux")]
    if let Some(code) = refuse_root(&cli.cmd) {
        return code;
    }
    match cli.cmd {
        Top::Sandbox(c) => sandbox(c),
        Top::Run(a) => run(a),
        Top::Facts(a) => facts(a),
        #[cfg(target_os = "linux")]
        Top::Config(ConfigCmd::Show { json }) => config_show(cli.config, cli.no_config, json),
        #[cfg(target_os = "linux")]
        Top::Plugin(c) => crate::plugin::main(c),
        #[cfg(windows)]
        Top::Plugin(c) => crate::win::plugin::main(c),
        #[cfg(target_os = "linux")]
        Top::Oci(c) => crate::oci::main(c),
        #[cfg(target_os = "linux")]
        Top::Key(KeyCmd::Rotate(a)) => crate::key::rotate(a),
        #[cfg(target_os = "linux")]
        Top::Setup(SetupCmd::Cgroups {
            user,
            remove: true,
            json,
            ..
        }) => crate::setup::remove_cgroups(&user, json),
        #[cfg(target_os = "linux")]
        Top::Setup(SetupCmd::Cgroups {
            user, mode, json, ..
        }) => crate::setup::setup_cgroups(&user, &mode, json),
    }
}

/// `oz0-node sandbox run …` parsed with `sandbox run`'s flags alone (and
/// the two global ones) into the `Cli` the whole tree would give, without
/// building the tree: building every command's flags was two thirds of
/// the parse, about 0.1 ms of every run. Only a command line that parses
/// cleanly is taken; anything else (`--help`,
/// `--version`, an unknown flag, a missing one, a global flag before
/// `sandbox`) is given back for the whole tree to parse, and to say as it
/// always does.
#[cfg(target_os = "linux")]
fn sandbox_run_alone(args: Vec<std::ffi::OsString>) -> Result<Cli, Vec<std::ffi::OsString>> {
    use clap::{Arg, ArgAction, Args, Command, FromArgMatches};
    if args.get(1).is_none_or(|a| a != "sandbox") || args.get(2).is_none_or(|a| a != "run") {
        return Err(args);
    }
    // The global flags, as `Cli` has them (`sandbox run` reads no config
    // file: a `--config` here reaches `oz0_config`, which refuses it).
    let cmd = Command::new("run")
        .no_binary_name(true)
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(
            Arg::new("config")
                .long("config")
                .value_parser(clap::value_parser!(PathBuf)),
        )
        .arg(
            Arg::new("no_config")
                .long("no-config")
                .action(ArgAction::SetTrue)
                .conflicts_with("config"),
        );
    let mut cmd = crate::run::RunArgs::augment_args(cmd);
    let parsed = cmd.try_get_matches_from_mut(&args[3..]).and_then(|mut m| {
        Ok(Cli {
            config: m.get_one::<PathBuf>("config").cloned(),
            no_config: m.get_flag("no_config"),
            cmd: Top::Sandbox(SandboxCmd::Run(crate::run::RunArgs::from_arg_matches_mut(
                &mut m,
            )?)),
        })
    });
    // As `flags::parse`: the tree lives as long as the process.
    std::mem::forget(cmd);
    parsed.map_err(|_| args)
}

/// `sandbox …`, by platform.
fn sandbox(c: SandboxCmd) -> i32 {
    match c {
        #[cfg(target_os = "linux")]
        SandboxCmd::Run(a) => crate::run::run(a),
        #[cfg(target_os = "linux")]
        SandboxCmd::Check(a) => crate::check::main(a),
        #[cfg(target_os = "linux")]
        SandboxCmd::Vm(a) => crate::vm::main(a),
        #[cfg(target_os = "macos")]
        SandboxCmd::Run(a) => crate::mac::run::main(a),
        #[cfg(target_os = "macos")]
        SandboxCmd::Check(a) => crate::mac::check(&a),
        #[cfg(target_os = "macos")]
        SandboxCmd::Vm(a) => crate::mac::vm::main(a),
        SandboxCmd::Probe(a) => crate::witness::main(a),
        #[cfg(windows)]
        SandboxCmd::Run(a) => crate::win::sandbox::main(a),
        #[cfg(windows)]
        SandboxCmd::Check(a) => crate::win::wall::main(a),
        #[cfg(windows)]
        SandboxCmd::Proxy(a) => crate::win::proxy::main(a),
        #[cfg(windows)]
        SandboxCmd::Relay(a) => crate::win::relay::main(a),
    }
}

#[cfg(target_os = "linux")]
use crate::node::{facts, run};

#[cfg(target_os = "macos")]
use crate::{daemon::facts, mac::node::run};

#[cfg(windows)]
use crate::{daemon::facts, win::node::run};

/// Nodes never run as root: a root node's host-side work (binding, placing
/// and removing what a run may write, reading its files) would act with
/// root's rights on what its runs control, and its runs' files would be
/// root's. Every command that runs or judges sandboxes refuses uid 0 with
/// the fix; `setup` (root's, by design), `facts` and the in-sandbox probe
/// do not.
#[cfg(target_os = "linux")]
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
#[cfg(target_os = "linux")]
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn argv(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    /// `sandbox run` parsed alone gives what the whole tree gives, and
    /// gives back whatever does not parse cleanly, untouched.
    #[test]
    fn sandbox_run_alone_is_the_whole_trees_parse() {
        let same: &[&[&str]] = &[
            &["oz0-node", "sandbox", "run", "--work", "/w", "--", "/bin/true"],
            &["oz0-node", "sandbox", "run", "--work=/w", "--read", "/a", "--read", "/b",
              "--write", "/c", "--env", "A=1", "--env", "B", "--allow", "example.com:443",
              "--forward", "8080", "--timeout", "5", "--memory", "64", "--processes", "9",
              "--cpu-seconds", "3", "--tmp-size", "16", "--allow-unix-sockets",
              "--json-status", "/s.json", "--git-findings", "report", "--dry-run",
              "--no-config", "--", "sh", "-c", "echo --work; exit 3"],
            &["oz0-node", "sandbox", "run", "--work", "/w", "--image",
              "oci:r.example/x@sha256:0000000000000000000000000000000000000000000000000000000000000000",
              "--oci-registry", "127.0.0.1:5000", "--oci-runtime", "gvisor"],
            &["oz0-node", "sandbox", "run", "--config", "/c", "--data-dir", "/d", "--work", "/w", "--bwrap",
              "/usr/bin/bwrap", "--cgroup-root", "/sys/fs/cgroup/x", "--", "--help"],
        ];
        for a in same {
            let alone = sandbox_run_alone(argv(a)).unwrap_or_else(|_| panic!("{a:?}"));
            let whole = Cli::try_parse_from(argv(a)).unwrap_or_else(|e| panic!("{a:?}: {e}"));
            assert_eq!(format!("{alone:?}"), format!("{whole:?}"), "{a:?}");
        }
        let given_back: &[&[&str]] = &[
            &["oz0-node", "sandbox", "run", "--help"],
            &["oz0-node", "sandbox", "run", "-h"],
            &["oz0-node", "sandbox", "run", "--version"],
            &[
                "oz0-node", "sandbox", "run", "--work", "/w", "--bogus", "--", "true",
            ],
            &["oz0-node", "sandbox", "run", "--", "true"],
            &[
                "oz0-node",
                "sandbox",
                "run",
                "--work",
                "/w",
                "--timeout",
                "x",
            ],
            &[
                "oz0-node",
                "sandbox",
                "run",
                "--work",
                "/w",
                "--config",
                "/c",
                "--no-config",
            ],
            &["oz0-node", "--no-config", "sandbox", "run", "--work", "/w"],
            &["oz0-node", "sandbox", "check"],
            &["oz0-node", "sandbox"],
            &["oz0-node"],
        ];
        for a in given_back {
            assert_eq!(sandbox_run_alone(argv(a)).unwrap_err(), argv(a), "{a:?}");
        }
    }
}
