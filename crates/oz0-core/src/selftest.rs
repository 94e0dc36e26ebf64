//! The eight-property self-test through any wall on a Unix system: each
//! check runs real commands through the wall under test (a
//! [`crate::Sandbox`]: Seatbelt on a Mac), with the node binary's `sandbox probe` as the
//! witness inside, and judges what the probe reports and what the host
//! sees. The checks run in order and stop at the first failure; the tier is
//! 1 only when all eight hold. Every platform's wall is proved with it: a
//! platform adds proofs of its own after a check ([`Extra`]: Linux proves
//! each layer of its wall alone), never a second self-test.
//!
//! Nothing here is a platform's but the wall itself: inside a run the
//! checks start only the probe (no shell), and outside they use loopback
//! sockets and files, so they run on every platform: through Linux tier 1
//! (all eight hold) and through walls that must fail each of them (no wall
//! at all; a proxy but no wall), to show that every check can pass and can
//! fail, naming what it saw (`crates/oz0-node/tests/macos_selftest.rs`;
//! on Windows under Wine, `crates/oz0-windows/tests/selftest.rs`). What a
//! platform gives besides its wall is in [`Config`]: how a run is
//! cancelled, how a path is spelled in a run's spec.
//!
//! Every connection a check makes is to a listener it opened on loopback;
//! the host the allowlist does not name is under `.invalid`. It works in a
//! folder of its own under `base_root`, removed after.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::{Cancel, Fault, Line, Outcome, RunIo, RunOptions, Sandbox, SelfTest};
use oz0_policy::facts::Property;
use oz0_policy::{RunRequest, RunSpec};

mod checks;
pub mod parts;

/// The node variable the environment check plants in the node's own
/// environment and looks for inside.
pub const CANARY: &str = "OZ0_SELFTEST_CANARY";

/// What fires a run's [`Cancel`].
pub type Fire = Box<dyn FnOnce() + Send>;

/// Makes a cancel for a run and what fires it.
pub type Cancels = fn() -> std::io::Result<(Cancel, Fire)>;

/// How a path of the host is spelled in a run's spec (Windows carries
/// `C:\a` as `/C:/a`).
pub type SpecPath = fn(&Path) -> Result<String, Failed>;

/// A cancel over a socket pair: the run is cancelled when the other end is
/// written or closed (every Unix wall's).
#[cfg(unix)]
pub fn socket_cancel() -> std::io::Result<(Cancel, Fire)> {
    use std::io::Write;
    let (r, mut w) = std::os::unix::net::UnixStream::pair()?;
    Ok((
        Cancel(std::os::fd::OwnedFd::from(r)),
        Box::new(move || {
            let _ = w.write_all(b"x");
        }),
    ))
}

/// No cancel of its own: a platform that has none but its wall's gives
/// [`Config::cancels`].
#[cfg(not(unix))]
pub fn socket_cancel() -> std::io::Result<(Cancel, Fire)> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "this platform's self-test names its own cancel",
    ))
}

/// A path as it is spelled, for specs that take the host's own.
pub fn spelled(p: &Path) -> Result<String, Failed> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{} is not valid Unicode", p.display()).into())
}

/// What the self-test needs.
pub struct Config<'a> {
    /// The wall under test. Its `fail_closed` check runs a command with the
    /// wall's confinement made impossible to apply ([`Fault::Unconfinable`]):
    /// a wall that fails closed never runs it.
    pub runs: &'a dyn Sandbox,
    /// The node binary as a run names it (its `sandbox probe` is the
    /// witness inside every run).
    pub probe: String,
    /// The node's real data directory, when it has one.
    pub data_dir: Option<PathBuf>,
    /// Where the self-test's folder is made (by its real path).
    pub base_root: PathBuf,
    /// The platform's own proofs, after each shared check held.
    pub extra: Option<&'a dyn Extra>,
    /// Variables the platform adds to every process it starts, besides
    /// what the wall gives (macOS: CoreFoundation's text encoding).
    pub env_adds: &'a [&'a str],
    /// The layer of the wall that hides the data directory, named when a
    /// stand-in was reached (`"mount layer: "`).
    pub files_layer: &'a str,
    /// Injects into this property's runs the fault that breaks it (the
    /// self-test's own tests: each check can fail).
    pub fault: Option<Property>,
    /// A fault in every run, made from the stand-in data directory's path
    /// (a platform's layer taken away, to show its other layers hold and
    /// which one fails).
    pub every_run: Option<&'a (dyn Fn(&Path) -> Fault + Sync)>,
    /// How a run is cancelled ([`socket_cancel`] on Unix).
    pub cancels: Cancels,
    /// How the host's paths are spelled in a run's spec ([`spelled`]
    /// but on Windows).
    pub spec_path: SpecPath,
}

impl<'a> Config<'a> {
    /// The self-test of `runs`, with `probe` as the witness inside, its
    /// folder under `base_root`; no platform proofs, no fault.
    pub fn new(runs: &'a dyn Sandbox, probe: String, base_root: PathBuf) -> Config<'a> {
        Config {
            runs,
            probe,
            data_dir: None,
            base_root,
            extra: None,
            env_adds: &[],
            files_layer: "",
            fault: None,
            every_run: None,
            cancels: socket_cancel,
            spec_path: spelled,
        }
    }

    /// Whether a fault is injected: the tier is then 0 whatever held.
    pub fn faulty(&self) -> bool {
        self.fault.is_some() || self.every_run.is_some()
    }
}

/// A platform's proofs beyond the eight shared checks.
pub trait Extra: Sync {
    /// After property `p`'s shared check held: what more the platform
    /// shows of it (`Ok(Some(detail))`, added to the line), or how it
    /// failed.
    fn prove(&self, p: Property, s: &mut Session<'_>) -> Result<Option<String>, Failed>;
}

/// How a check failed, in the words of its line: what it saw (or could
/// not do) and, where one exists, the fix. Made from a `String` or a
/// `&str`, so a check's `?` and `format!(…).into()` read as words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed(String);

impl Failed {
    /// The words.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

impl From<String> for Failed {
    fn from(s: String) -> Failed {
        Failed(s)
    }
}

impl From<&str> for Failed {
    fn from(s: &str) -> Failed {
        Failed(s.to_string())
    }
}

impl From<Failed> for String {
    fn from(f: Failed) -> String {
        f.0
    }
}

type CheckResult = Result<String, Failed>;

/// The self-test's folder: made new (0700) under a root, with a stand-in
/// for the node's data directory in it (`standin-data/identity/node.key`),
/// removed whole when dropped.
pub struct Workspace {
    /// The folder (by its real path).
    pub base: PathBuf,
    /// The stand-in data directory.
    pub standin: PathBuf,
}

impl Workspace {
    /// A new one under `root`.
    pub fn new(root: &Path) -> Result<Workspace, Failed> {
        let mut made = None;
        for n in 0..16u32 {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let p = root.join(format!("oz0-selftest-{}-{t:x}-{n}", std::process::id()));
            #[cfg(unix)]
            let b = {
                let mut b = fs::DirBuilder::new();
                std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
                b
            };
            #[cfg(not(unix))]
            let b = fs::DirBuilder::new();
            match b.create(&p) {
                Ok(()) => {
                    made = Some(p);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(format!(
                        "cannot make the self-test's temporary folder {}: {e}",
                        p.display()
                    )
                    .into())
                }
            }
        }
        let made = made.ok_or_else(|| {
            format!(
                "cannot make the self-test's temporary folder under {}",
                root.display()
            )
        })?;
        // From here on the folder is removed whatever fails.
        let mut ws = Workspace {
            standin: made.join("standin-data"),
            base: made,
        };
        // Windows' real path is its verbatim form (`\\?\C:\…`), which no
        // run's spec takes: there the caller's root is its real path.
        #[cfg(unix)]
        {
            ws.base = ws
                .base
                .canonicalize()
                .map_err(|e| format!("{}: {e}", ws.base.display()))?;
        }
        ws.standin = ws.base.join("standin-data");
        fs::create_dir_all(ws.standin.join("identity"))
            .and_then(|()| fs::write(ws.standin.join("identity/node.key"), "standin-key"))
            .map_err(|e| format!("cannot prepare the stand-in data directory: {e}"))?;
        Ok(ws)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = make_writable(&self.base);
        let _ = fs::remove_dir_all(&self.base);
    }
}

/// Every folder under `p` made writable again (a run may have left one
/// read-only), so that it can be removed.
fn make_writable(p: &Path) -> std::io::Result<()> {
    for e in fs::read_dir(p)?.flatten() {
        let path = e.path();
        if let Ok(m) = fs::symlink_metadata(&path) {
            if m.is_dir() {
                #[cfg(unix)]
                let perm = std::os::unix::fs::PermissionsExt::from_mode(0o700);
                #[cfg(not(unix))]
                let perm = {
                    let mut p = m.permissions();
                    #[allow(clippy::permissions_set_readonly_false)]
                    p.set_readonly(false);
                    p
                };
                let _ = fs::set_permissions(&path, perm);
                let _ = make_writable(&path);
            }
        }
    }
    Ok(())
}

/// Runs `check` for each of the eight properties in order, calling
/// `on_line` after each and stopping at the first that fails: the
/// self-test's result (a fault injected makes it tier 0 whatever held).
pub fn sequence(
    mut check: impl FnMut(Property) -> Result<String, Failed>,
    mut on_line: impl FnMut(&Line),
    fault_injected: bool,
) -> SelfTest {
    let started = Instant::now();
    let mut lines = Vec::new();
    let mut failed = None;
    for p in Property::ALL {
        let t = Instant::now();
        let r = check(p);
        let line = Line {
            property: p,
            ok: r.is_ok(),
            ms: u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail: match r {
                Ok(d) => d,
                Err(f) => f.into(),
            },
        };
        on_line(&line);
        let stop = !line.ok;
        lines.push(line);
        if stop {
            failed = Some(p);
            break;
        }
    }
    SelfTest {
        lines,
        failed,
        fault_injected,
        total_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// A self-test that could not begin (its folder could not be made): failed
/// at `launch` with `why`.
pub fn failed_at_start(
    why: String,
    mut on_line: impl FnMut(&Line),
    fault_injected: bool,
) -> SelfTest {
    let l = Line {
        property: Property::Launch,
        ok: false,
        ms: 0,
        detail: why,
    };
    on_line(&l);
    SelfTest {
        lines: vec![l],
        failed: Some(Property::Launch),
        fault_injected,
        total_ms: 0,
    }
}

/// What each check works with: its folders, its runs.
pub struct Session<'a> {
    cfg: &'a Config<'a>,
    base: PathBuf,
    standin: PathBuf,
    seq: u32,
    current: Property,
}

pub(crate) type Ctx<'a> = Session<'a>;

/// Sets the node's own variable that must never reach a run (before any
/// thread of the self-test starts).
pub fn plant_canary() {
    if std::env::var_os(CANARY).is_none() {
        std::env::set_var(CANARY, "node-only");
    }
}

/// Runs the self-test, calling `on_line` after each check.
pub fn run(cfg: &Config, on_line: impl FnMut(&Line)) -> SelfTest {
    plant_canary();
    let ws = match Workspace::new(&cfg.base_root) {
        Ok(w) => w,
        Err(e) => return failed_at_start(e.into(), on_line, cfg.faulty()),
    };
    let mut ctx = Session {
        cfg,
        base: ws.base.clone(),
        standin: ws.standin.clone(),
        seq: 0,
        current: Property::Launch,
    };
    sequence(|p| check(&mut ctx, p), on_line, cfg.faulty())
}

/// Runs one property's check on its own (in a folder of its own under
/// `cfg.base_root`, removed after): what it showed, or how it failed.
pub fn check_one(cfg: &Config, p: Property) -> Result<String, Failed> {
    let ws = Workspace::new(&cfg.base_root)?;
    let mut ctx = Session {
        cfg,
        base: ws.base.clone(),
        standin: ws.standin.clone(),
        seq: 0,
        current: p,
    };
    check(&mut ctx, p)
}

fn check(c: &mut Session, p: Property) -> CheckResult {
    c.current = p;
    let shared = match p {
        Property::Launch => checks::launch(c),
        Property::Files => checks::files(c),
        Property::Egress => checks::egress(c),
        Property::Ingress => checks::ingress(c),
        Property::JobLimits => checks::job_limits(c),
        Property::FailClosed => checks::fail_closed(c),
        Property::ProtectedPaths => checks::protected_paths(c),
        Property::Environment => checks::environment(c),
    }?;
    match c.cfg.extra {
        None => Ok(shared),
        Some(extra) => Ok(match extra.prove(p, c)? {
            Some(more) => format!("{shared}; {more}"),
            None => shared,
        }),
    }
}

impl Session<'_> {
    /// A new folder of the self-test's, named after `tag`.
    pub fn dir(&mut self, tag: &str) -> Result<PathBuf, Failed> {
        self.seq += 1;
        let d = self.base.join(format!("{}-{tag}", self.seq));
        fs::create_dir(&d).map_err(|e| format!("cannot make {}: {e}", d.display()))?;
        Ok(d)
    }

    /// The stand-in for the node's data directory.
    pub fn standin(&self) -> &Path {
        &self.standin
    }

    /// The node's data directory as runs are told it: the real one, or the
    /// stand-in.
    pub fn data_dir(&self) -> &Path {
        self.cfg.data_dir.as_deref().unwrap_or(&self.standin)
    }

    /// The configuration.
    pub fn config(&self) -> &Config<'_> {
        self.cfg
    }

    /// A run of `command` in `work`, told the data directory.
    pub fn request(&self, work: &Path, command: Vec<String>) -> RunRequest {
        // A path that cannot be spelled is passed as it is, and the run's
        // spec refuses it, naming it.
        let spell = |p: &Path| (self.cfg.spec_path)(p).unwrap_or_else(|_| p.display().to_string());
        RunRequest {
            work: spell(work),
            data_dir: spell(self.data_dir()),
            command,
            ..Default::default()
        }
    }

    fn spec(req: RunRequest) -> Result<RunSpec, Failed> {
        RunSpec::new(req).map_err(|e| format!("self-test spec refused: {e}").into())
    }

    /// Whether this property's own fault is injected.
    pub fn faulted(&self, p: Property) -> bool {
        self.cfg.fault == Some(p)
    }

    /// The fault each run of the current check gets: the current
    /// property's own when it is injected, else the one every run gets.
    fn fault(&self) -> Option<Fault> {
        if self.cfg.fault != Some(self.current) {
            return self.cfg.every_run.map(|f| f(&self.standin));
        }
        Some(match self.current {
            Property::Launch => Fault::SharePid,
            Property::Files => Fault::Expose(self.standin.display().to_string()),
            Property::Egress | Property::Ingress => Fault::ShareNet,
            Property::ProtectedPaths => Fault::NoProtectedPaths,
            Property::Environment => Fault::LeakEnv(CANARY.into(), "node-only".into()),
            // Broken by the checks themselves (no limits; a run that can
            // be confined after all).
            Property::JobLimits | Property::FailClosed => {
                return self.cfg.every_run.map(|f| f(&self.standin))
            }
        })
    }

    /// Runs `req` through the wall, with the check's fault if any.
    pub fn launch(&self, req: RunRequest, cancel: Option<Cancel>) -> Result<Outcome, Failed> {
        self.launch_with(req, cancel, self.fault())
    }

    /// Runs `req` through the wall with `fault` (none: the wall whole).
    pub fn launch_with(
        &self,
        req: RunRequest,
        cancel: Option<Cancel>,
        fault: Option<Fault>,
    ) -> Result<Outcome, Failed> {
        let spec = Self::spec(req)?;
        let opts = RunOptions {
            fault,
            ..RunOptions::new(RunIo::quiet(), cancel)
        };
        self.cfg
            .runs
            .run(&spec, opts)
            .map_err(|e| format!("the sandbox did not start: {e}").into())
    }

    /// The probe's command line in a run: its report `out` (in the run's
    /// work folder, the command's current folder) named by its file name,
    /// so that it is found wherever the wall puts that folder inside (an
    /// image's root puts it at `/work`).
    pub fn probe_cmd(&self, out: &Path, args: &[&str]) -> Vec<String> {
        let name = out.file_name().map_or(out, Path::new);
        parts::probe_cmd(&self.cfg.probe, name, args)
    }
}

pub use parts::read_report;
