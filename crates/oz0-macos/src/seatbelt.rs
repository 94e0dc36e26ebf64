//! macOS tier 1: a Seatbelt profile generated from a run's spec, and the
//! `sandbox-exec` argument list that runs the command under it.
//!
//! The profile denies by default. Every path that comes from the run (work
//! directory, `--read`, `--write`, TEMP, node binary, data directory,
//! protected entries and their ancestors) is passed as a **parameter**
//! (`-D KEY=VALUE`, read in the profile as `(param "KEY")`), never pasted
//! into the profile text, so no path can change the profile's meaning. Only
//! our own constants (system folders) and numbers (the proxy port, a `u16`)
//! appear in the text.
//!
//! Seatbelt matches resolved paths: callers pass canonical paths
//! (`/private/tmp`, not `/tmp`); the well-known macOS symlinks are refused
//! with that fix. A later rule takes precedence over an earlier one, so the
//! protections come last.

use oz0_policy::protected;
use oz0_policy::{AbsPath, RunSpec};
use serde::Serialize;

use crate::tree::Membership;

/// The program.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// System folders a run reads (our constants, pasted as literals).
pub const SYSTEM_READ_SUBPATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/System",
    "/Library/Apple",
    "/private/etc",
    "/private/var/db/timezone",
    "/dev/fd",
];

/// Single system files a run reads (and the symlinks to the folders above).
pub const SYSTEM_READ_LITERALS: &[&str] = &[
    "/",
    "/dev/null",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/etc",
    "/tmp",
    "/var",
];

/// Mach services programs need to start, resolve users and check TLS
/// certificates (no network lookups: names are resolved by the proxy).
pub const MACH_SERVICES: &[&str] = &[
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.notification_center",
    "com.apple.logd",
    "com.apple.system.logger",
    "com.apple.trustd.agent",
];

/// Symlinked prefixes on macOS, which Seatbelt would never match as given.
const SYMLINKED: &[(&str, &str)] = &[
    ("/tmp", "/private/tmp"),
    ("/var", "/private/var"),
    ("/etc", "/private/etc"),
];

/// The `PATH` a run gets when its caller names none.
pub const DEFAULT_PATH: &str = "/usr/bin:/bin:/usr/sbin:/sbin";

/// Facts of this machine and run the profile needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacHost {
    /// The node binary (read-only to the run).
    pub node_binary: AbsPath,
    /// A fresh folder for this run's TEMP, removed after it (canonical).
    pub run_temp: AbsPath,
}

/// How the run reaches the proxy: a port on localhost (the node's bridge,
/// forwarding to the proxy's socket), and the run's token.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxyPort {
    /// The port on localhost.
    pub port: u16,
    /// The run's token (URL-safe).
    pub token: String,
}

impl std::fmt::Debug for ProxyPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ProxyPort {{ port: {}, token: <{} chars> }}",
            self.port,
            self.token.len()
        )
    }
}

/// The plan: profile, parameters, argv and environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeatbeltPlan {
    /// The profile text.
    pub profile: String,
    /// Parameters, in the order passed.
    pub params: Vec<(String, String)>,
    /// `sandbox-exec -p PROFILE -D K=V … -- COMMAND…`.
    pub argv: Vec<String>,
    /// The environment (the launcher clears its own first).
    pub env: Vec<(String, String)>,
    /// The run's policy file (see `oz0_policy::describe`), written in its
    /// TEMP as [`POLICY_NAME`] before it starts.
    pub policy: String,
    /// Wall time, enforced by the launcher.
    pub timeout_seconds: Option<u64>,
    /// How the launcher tells the run's processes from all others
    /// ([`crate::tree`]): the profile denies the first path and allows the
    /// second.
    #[serde(skip)]
    pub membership: Membership,
}

/// Why a run cannot be planned on macOS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SeatbeltError {
    /// A symlinked prefix.
    #[error("{path} lies under {link}, a symlink on macOS that Seatbelt does not follow: name it as {target}…")]
    Symlinked {
        /// The path.
        path: AbsPath,
        /// The symlink.
        link: &'static str,
        /// Its target.
        target: &'static str,
    },
    /// A limit Seatbelt cannot enforce.
    #[error("{0} cannot be enforced for all of a run's processes together by macOS tier 1 (Seatbelt has no job limits): leave it out, or run the work on a Linux node")]
    LimitUnsupported(&'static str),
    /// Egress asked for without a proxy port, or the other way round.
    #[error("{0}")]
    EgressMismatch(&'static str),
    /// A bad token.
    #[error("the run's proxy token must be 16 to 256 characters of A-Z a-z 0-9 . _ ~ -")]
    BadToken,
}

struct Params(Vec<(String, String)>);

impl Params {
    fn add(&mut self, key: String, path: &AbsPath) -> String {
        if let Some((k, _)) = self.0.iter().find(|(_, v)| v == path.as_str()) {
            return k.clone();
        }
        self.0.push((key.clone(), path.as_str().to_string()));
        key
    }
}

fn p(key: &str) -> String {
    format!("(param \"{key}\")")
}

fn check_canonical(path: &AbsPath) -> Result<(), SeatbeltError> {
    for (link, target) in SYMLINKED {
        if path.starts_with(&AbsPath::new(link).expect("constant")) {
            return Err(SeatbeltError::Symlinked {
                path: path.clone(),
                link,
                target,
            });
        }
    }
    Ok(())
}

fn ancestors(path: &AbsPath) -> Vec<AbsPath> {
    let mut out = vec![];
    let mut cur = path.parent();
    while let Some(a) = cur {
        if a.as_str() == "/" {
            break;
        }
        cur = a.parent();
        out.push(a);
    }
    out
}

/// Builds the profile and argv for a run.
pub fn plan(
    spec: &RunSpec,
    host: &MacHost,
    egress: Option<&ProxyPort>,
) -> Result<SeatbeltPlan, SeatbeltError> {
    refusal(spec, host, egress)?;
    let mut params = Params(vec![]);
    let keys = RootKeys::add(&mut params, spec, host);
    let mut t = String::new();
    system_rules(&mut t);
    access_rules(&mut t, &mut params, spec, host, &keys, egress);
    let membership = protection_rules(&mut t, &mut params, spec, host, &keys);
    let profile = t;
    let argv = exec_argv(&profile, &params, &spec.command);
    let told = oz0_policy::describe::Description::walled(
        1,
        "seatbelt",
        spec,
        spec.work.as_str(),
        host.run_temp.as_str(),
    );
    let env = run_env(spec, host, egress, &told);
    Ok(SeatbeltPlan {
        profile,
        params: params.0,
        argv,
        env,
        policy: told.policy(),
        timeout_seconds: spec.limits.timeout_seconds,
        membership,
    })
}

/// Why `spec` cannot run under Seatbelt at all: a limit it cannot hold, a
/// symlinked path, egress and the proxy port not going together, a bad
/// token.
fn refusal(
    spec: &RunSpec,
    host: &MacHost,
    egress: Option<&ProxyPort>,
) -> Result<(), SeatbeltError> {
    let l = &spec.limits;
    if l.memory_mib.is_some() {
        return Err(SeatbeltError::LimitUnsupported("--memory"));
    }
    if l.processes.is_some() {
        return Err(SeatbeltError::LimitUnsupported("--processes"));
    }
    if l.cpu_seconds.is_some() {
        return Err(SeatbeltError::LimitUnsupported("--cpu-seconds"));
    }
    for path in std::iter::once(&spec.work)
        .chain(&spec.read)
        .chain(&spec.write)
        .chain([&host.run_temp, &host.node_binary, &spec.data_dir])
    {
        check_canonical(path)?;
    }
    match (spec.egress.is_enabled(), egress) {
        (true, None) => {
            return Err(SeatbeltError::EgressMismatch(
                "the run asks for egress (--allow/--forward) but no proxy port was set up: start the bridge first",
            ))
        }
        (false, Some(_)) => {
            return Err(SeatbeltError::EgressMismatch(
                "a proxy port was set up for a run without egress: a run without --allow/--forward gets no network",
            ))
        }
        _ => {}
    }
    if let Some(e) = egress {
        let ok = (16..=256).contains(&e.token.len())
            && e.token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'));
        if !ok {
            return Err(SeatbeltError::BadToken);
        }
    }
    Ok(())
}

/// The parameter keys of the run's own paths, added first and in this
/// order.
struct RootKeys {
    work: String,
    reads: Vec<String>,
    writes: Vec<String>,
    temp: String,
    node: String,
    data: String,
}

impl RootKeys {
    fn add(params: &mut Params, spec: &RunSpec, host: &MacHost) -> RootKeys {
        let work = params.add("WORK".into(), &spec.work);
        let reads = spec
            .read
            .iter()
            .enumerate()
            .map(|(i, r)| params.add(format!("READ_{i}"), r))
            .collect();
        let writes = spec
            .write
            .iter()
            .enumerate()
            .map(|(i, w)| params.add(format!("WRITE_{i}"), w))
            .collect();
        let temp = params.add("TMPDIR".into(), &host.run_temp);
        let node = params.add("NODE_BINARY".into(), &host.node_binary);
        let data = params.add("DATA_DIR".into(), &spec.data_dir);
        RootKeys {
            work,
            reads,
            writes,
            temp,
            node,
            data,
        }
    }
}

/// Appends one rule to the profile `t`.
fn line(t: &mut String, s: &str) {
    t.push_str(s);
    t.push('\n');
}

/// What every run gets, our constants only: deny by default, its own
/// processes, the Mach services and the system folders.
fn system_rules(t: &mut String) {
    line(t, "(version 1)");
    line(t, "(deny default)");
    line(t, "(allow process-exec process-fork)");
    line(t, "(allow signal (target same-sandbox))");
    line(t, "(allow process-info* (target same-sandbox))");
    line(t, "(allow sysctl-read)");
    let mach: Vec<String> = MACH_SERVICES
        .iter()
        .map(|s| format!("(global-name \"{s}\")"))
        .collect();
    line(t, &format!("(allow mach-lookup {})", mach.join(" ")));
    let sys: Vec<String> = SYSTEM_READ_SUBPATHS
        .iter()
        .map(|s| format!("(subpath \"{s}\")"))
        .chain(
            SYSTEM_READ_LITERALS
                .iter()
                .map(|s| format!("(literal \"{s}\")")),
        )
        .collect();
    line(t, &format!("(allow file-read* {})", sys.join(" ")));
    line(
        t,
        "(allow file-write-data (literal \"/dev/null\") (literal \"/dev/tty\"))",
    );
}

/// What the run's spec grants: its reads, a look at the ancestors of its
/// roots, its writes and the proxy's port.
fn access_rules(
    t: &mut String,
    params: &mut Params,
    spec: &RunSpec,
    host: &MacHost,
    keys: &RootKeys,
    egress: Option<&ProxyPort>,
) {
    // Reads: --read paths and the node binary.
    let mut ro: Vec<String> = keys
        .reads
        .iter()
        .map(|k| format!("(subpath {})", p(k)))
        .collect();
    ro.push(format!("(literal {})", p(&keys.node)));
    line(t, &format!("(allow file-read* {})", ro.join(" ")));

    // Ancestors of every root may be looked at (stat), not listed or read.
    let roots: Vec<&AbsPath> = std::iter::once(&spec.work)
        .chain(&spec.read)
        .chain(&spec.write)
        .chain([&host.run_temp, &host.node_binary])
        .collect();
    let mut anc_keys = vec![];
    for r in &roots {
        for a in ancestors(r) {
            let n = params.0.len();
            let k = params.add(format!("ANC_{n}"), &a);
            if !anc_keys.contains(&k) {
                anc_keys.push(k);
            }
        }
    }
    if !anc_keys.is_empty() {
        let lits: Vec<String> = anc_keys
            .iter()
            .map(|k| format!("(literal {})", p(k)))
            .collect();
        line(t, &format!("(allow file-read-metadata {})", lits.join(" ")));
    }

    // Writes: the work directory, --write paths and TEMP.
    let rw: Vec<String> = std::iter::once(&keys.work)
        .chain(&keys.writes)
        .chain(std::iter::once(&keys.temp))
        .map(|k| format!("(subpath {})", p(k)))
        .collect();
    line(
        t,
        &format!("(allow file-read* file-write* {})", rw.join(" ")),
    );

    // Network: only the proxy's port on localhost (a number, never a path).
    if let Some(e) = egress {
        line(
            t,
            &format!(
                "(allow network-outbound (remote ip \"localhost:{}\"))",
                e.port
            ),
        );
    }
}

/// The protections, last so that they take precedence: the protected
/// entries of each writable root, `.git` and the roots unmovable, the
/// run's mark, the node's data directory. How to tell the run's processes.
fn protection_rules(
    t: &mut String,
    params: &mut Params,
    spec: &RunSpec,
    host: &MacHost,
    keys: &RootKeys,
) -> Membership {
    let writable_roots: Vec<(&AbsPath, &String)> = std::iter::once((&spec.work, &keys.work))
        .chain(spec.write.iter().zip(&keys.writes))
        .collect();
    let mut ro_keys = vec![];
    let mut unmovable = vec![];
    for (i, (root, root_key)) in writable_roots.iter().enumerate() {
        let join = |n: &str| root.join(n).expect("protected names are plain components");
        for (j, (name, _kind)) in protected::READ_ONLY_NAMES.iter().enumerate() {
            ro_keys.push(params.add(format!("W{i}_RO_{j}"), &join(name)));
        }
        let git = join(protected::GIT_DIR);
        let git_key = params.add(format!("W{i}_GIT"), &git);
        for (j, (rel, _)) in protected::git_held().iter().enumerate() {
            let path = rel.split('/').fold(git.clone(), |p, name| {
                p.join(name).expect("plain component")
            });
            ro_keys.push(params.add(format!("W{i}_GIT_RO_{j}"), &path));
        }
        unmovable.push(git_key);
        unmovable.push((*root_key).clone());
        for a in ancestors(root) {
            let n = params.0.len();
            let k = params.add(format!("ANC_{n}"), &a);
            if !unmovable.contains(&k) {
                unmovable.push(k);
            }
        }
    }
    // Read-only entries, whether or not they exist (Seatbelt matches paths,
    // so creating a missing one is refused too).
    let ro_rules: Vec<String> = ro_keys
        .iter()
        .map(|k| format!("(subpath {})", p(k)))
        .collect();
    line(t, &format!("(deny file-write* {})", ro_rules.join(" ")));
    // `.git`, each writable root and their ancestors cannot be removed or
    // renamed aside (a rename unlinks its source).
    let un: Vec<String> = unmovable
        .iter()
        .map(|k| format!("(literal {})", p(k)))
        .collect();
    line(t, &format!("(deny file-write-unlink {})", un.join(" ")));
    // The run's mark: its processes, and theirs alone, are refused this
    // one path of their own TEMP (crate::tree); never a file.
    let membership = Membership::for_temp(host.run_temp.as_str());
    let mark = params.add(
        "RUN_MARK".into(),
        &AbsPath::new(&membership.denied).expect("under the run's TEMP"),
    );
    line(t, &format!("(deny file-read* (literal {}))", p(&mark)));
    // The node's data directory, even if a rule above would reach it.
    line(
        t,
        &format!("(deny file-read* file-write* (subpath {}))", p(&keys.data)),
    );
    membership
}

/// The run's policy file's name in its TEMP.
pub use oz0_policy::describe::POLICY_NAME;

/// `sandbox-exec -p PROFILE -D K=V … -- COMMAND…`.
fn exec_argv(profile: &str, params: &Params, command: &[String]) -> Vec<String> {
    let mut argv = vec![SANDBOX_EXEC.to_string(), "-p".into(), profile.to_string()];
    for (k, v) in &params.0 {
        argv.push("-D".into());
        argv.push(format!("{k}={v}"));
    }
    argv.push("--".into());
    argv.extend(command.iter().cloned());
    argv
}

/// The run's whole environment: its variables, `PATH`, `HOME` and
/// `TMPDIR` its TEMP, and with egress the proxy's, sorted.
fn run_env(
    spec: &RunSpec,
    host: &MacHost,
    egress: Option<&ProxyPort>,
    told: &oz0_policy::describe::Description,
) -> Vec<(String, String)> {
    let mut env = spec.env_with_path(DEFAULT_PATH);
    env.push(("HOME".into(), host.run_temp.as_str().to_string()));
    env.push(("TMPDIR".into(), host.run_temp.as_str().to_string()));
    // The run is told its wall (the environment check asks for it), and
    // where its policy file is.
    let policy = format!("{}/{POLICY_NAME}", host.run_temp.as_str());
    env.push((
        oz0_policy::describe::SANDBOX_VAR.into(),
        told.var(Some(&policy)),
    ));
    if let Some(e) = egress {
        let url = format!("http://oz0:{}@127.0.0.1:{}", e.token, e.port);
        for n in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            env.push((n.into(), url.clone()));
        }
    }
    env.sort();
    env
}

/// The profile of a run with no wall (tier 0): everything allowed but the
/// run's mark, so that its processes can be told from all others and ended
/// together ([`crate::tree`]), and nothing else changes.
pub const TRACKING_PROFILE: &str =
    "(version 1)\n(allow default)\n(deny file-read* (literal (param \"RUN_MARK\")))\n";

/// `sandbox-exec` with [`TRACKING_PROFILE`] for `command`, whose TEMP is
/// `run_temp`, and how to tell its processes.
pub fn tracking_argv(run_temp: &AbsPath, command: &[String]) -> (Vec<String>, Membership) {
    let m = Membership::for_temp(run_temp.as_str());
    let mut argv = vec![
        SANDBOX_EXEC.to_string(),
        "-p".into(),
        TRACKING_PROFILE.into(),
        "-D".into(),
        format!("RUN_MARK={}", m.denied),
        "--".into(),
    ];
    argv.extend(command.iter().cloned());
    (argv, m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::{EnvVar, Limits, RunRequest};

    fn golden(name: &str, actual: &str) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("golden")
            .join(name);
        if std::env::var_os("OZ0_BLESS").is_some() {
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (OZ0_BLESS=1 writes it)", path.display()));
        assert_eq!(
            actual, want,
            "golden/{name} differs (OZ0_BLESS=1 rewrites it)"
        );
    }

    fn req() -> RunRequest {
        RunRequest {
            work: "/Users/me/jobs/j1".into(),
            data_dir: "/Users/me/Library/Application Support/oz0".into(),
            command: vec!["/bin/echo".into(), "hi".into()],
            ..Default::default()
        }
    }

    fn host() -> MacHost {
        MacHost {
            node_binary: AbsPath::new("/usr/local/bin/oz0-node").unwrap(),
            run_temp: AbsPath::new("/private/var/folders/xy/T/oz0-run-j1").unwrap(),
        }
    }

    fn render(p: &SeatbeltPlan) -> String {
        let mut s = format!(";; profile\n{}", p.profile);
        s.push_str(";; params\n");
        for (k, v) in &p.params {
            s.push_str(&format!("{k}={v}\n"));
        }
        s.push_str(";; argv after the profile\n");
        for a in &p.argv[3..] {
            s.push_str(a);
            s.push('\n');
        }
        s.push_str(";; env\n");
        for (k, v) in &p.env {
            s.push_str(&format!("{k}={v}\n"));
        }
        s.push_str(";; the policy file in TEMP\n");
        s.push_str(&p.policy);
        s
    }

    #[test]
    fn golden_minimal() {
        let plan = plan(&RunSpec::new(req()).unwrap(), &host(), None).unwrap();
        assert_eq!(&plan.argv[..2], [SANDBOX_EXEC, "-p"]);
        assert_eq!(plan.argv[2], plan.profile);
        golden("seatbelt_minimal.txt", &render(&plan));
        assert!(!plan.profile.contains("network"));
    }

    #[test]
    fn golden_egress_read_write_protected() {
        let r = RunRequest {
            read: vec!["/opt/homebrew/opt/python@3.13".into()],
            write: vec!["/Users/me/cache/pip".into()],
            env: vec![EnvVar::new("LANG", "en_US.UTF-8").unwrap()],
            allow: vec!["api.github.com".into(), "*.pypi.org".into()],
            forward: vec![8080],
            limits: Limits {
                timeout_seconds: Some(30),
                ..Default::default()
            },
            ..req()
        };
        let proxy = ProxyPort {
            port: 47001,
            token: "run-token-0123456789abcdef".into(),
        };
        let plan = plan(&RunSpec::new(r).unwrap(), &host(), Some(&proxy)).unwrap();
        golden("seatbelt_egress.txt", &render(&plan));
        assert!(plan
            .profile
            .contains("(allow network-outbound (remote ip \"localhost:47001\"))"));
        assert!(!plan.profile.contains("run-token"));
        assert!(!format!("{proxy:?}").contains("run-token"));
    }

    #[test]
    fn no_run_path_is_pasted_into_the_profile() {
        let r = RunRequest {
            work: "/Users/me/jobs/x\")) (allow default) ((".into(),
            read: vec!["/Users/me/shared".into()],
            ..req()
        };
        let plan = plan(&RunSpec::new(r).unwrap(), &host(), None).unwrap();
        for needle in [
            "/Users/me",
            "oz0-run-j1",
            "oz0-node",
            "allow default",
            "Application Support",
        ] {
            assert!(!plan.profile.contains(needle), "{needle} pasted");
        }
        assert!(plan
            .params
            .iter()
            .any(|(k, v)| k == "WORK" && v.contains("(allow default)")));
        // Protected entries and ancestors are parameters too.
        for k in ["W0_GIT", "W0_RO_0", "W0_GIT_RO_0", "W0_GIT_RO_1"] {
            assert!(plan.params.iter().any(|(key, _)| key == k), "{k}");
            assert!(plan.profile.contains(&format!("(param \"{k}\")")), "{k}");
        }
        let unlink = plan
            .profile
            .lines()
            .find(|l| l.starts_with("(deny file-write-unlink"))
            .unwrap();
        for k in ["W0_GIT", "WORK"] {
            assert!(
                unlink.contains(&format!("(param \"{k}\")")),
                "{k} unmovable"
            );
        }
        let anc: Vec<_> = plan
            .params
            .iter()
            .filter(|(_, v)| v == "/Users/me/jobs" || v == "/Users/me" || v == "/Users")
            .collect();
        assert_eq!(
            anc.len(),
            3,
            "every ancestor of the work folder is a parameter"
        );
        for (k, _) in anc {
            assert!(
                unlink.contains(&format!("(param \"{k}\")")),
                "{k} unmovable"
            );
        }
        assert!(plan
            .profile
            .contains("(deny file-read* (literal (param \"RUN_MARK\")))"));
        assert_eq!(
            plan.membership.denied,
            "/private/var/folders/xy/T/oz0-run-j1/.oz0-run-mark"
        );
        assert!(plan
            .params
            .contains(&("RUN_MARK".into(), plan.membership.denied.clone())));
        let last = plan.profile.lines().last().unwrap();
        assert_eq!(
            last,
            "(deny file-read* file-write* (subpath (param \"DATA_DIR\")))"
        );
    }

    #[test]
    fn tracking_profile_allows_all_but_the_mark() {
        let temp = AbsPath::new("/private/tmp/oz0-run-7").unwrap();
        let (argv, m) = tracking_argv(&temp, &["/bin/sh".into(), "-c".into(), "true".into()]);
        assert_eq!(argv[0], SANDBOX_EXEC);
        assert_eq!(argv[2], TRACKING_PROFILE);
        assert!(TRACKING_PROFILE.contains("(allow default)"));
        assert_eq!(argv[4], format!("RUN_MARK={}", m.denied));
        assert_eq!(&argv[5..], ["--", "/bin/sh", "-c", "true"]);
        assert!(m.allowed.starts_with("/private/tmp/oz0-run-7/"));
    }

    #[test]
    fn refusals() {
        type Edit = fn(&mut RunRequest);
        let cases: &[(Edit, &str)] = &[
            (
                |r| r.limits.memory_mib = Some(256),
                "--memory cannot be enforced",
            ),
            (
                |r| r.limits.processes = Some(8),
                "--processes cannot be enforced",
            ),
            (
                |r| r.limits.cpu_seconds = Some(8),
                "--cpu-seconds cannot be enforced",
            ),
            (|r| r.write = vec!["/var/folders/x".into()], "/private/var"),
            (
                |r| r.allow = vec!["example.com".into()],
                "no proxy port was set up",
            ),
        ];
        for (edit, want) in cases {
            let mut r = req();
            edit(&mut r);
            let e = plan(&RunSpec::new(r).unwrap(), &host(), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        let proxy = ProxyPort {
            port: 1,
            token: "run-token-0123456789abcdef".into(),
        };
        let e = plan(&RunSpec::new(req()).unwrap(), &host(), Some(&proxy)).unwrap_err();
        assert!(matches!(e, SeatbeltError::EgressMismatch(_)));
    }
}
