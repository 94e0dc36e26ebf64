//! The eight-property self-test (docs/ARCHITECTURE.md), Linux flavour.
//!
//! Each check runs real sandboxes through the node's one door to a run,
//! [`oz0_linux::Host::run`], with the node binary itself as the probe
//! inside, and judges what the probe reports and what the host sees. The
//! checks run in order and stop at the first failure.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::{Cancel, Ended, Line, RunIo, SelfTest as Outcome};
use oz0_linux::plan::{Extras, Fault};
use oz0_linux::{Host, RunOptions, RunOutcome};
use oz0_policy::facts::Property;
use oz0_policy::{EnvVar, Limits, RunRequest, RunSpec};
use serde_json::Value;

/// The node variable the environment check plants in the node's own
/// environment and looks for inside.
pub const CANARY: &str = "OZ0_SELFTEST_CANARY";

/// What the self-test needs.
pub struct Config<'a> {
    /// The node's host context: its runs go through it (its node binary is
    /// also the probe inside).
    pub host: &'a Host,
    /// The egress proxy of the egress check's run (the node's own, or one
    /// whose records go nowhere: the check's decisions are no one's).
    pub egress: &'a dyn oz0_egress::EgressService,
    /// The node's real data directory, when it has one.
    pub data_dir: Option<PathBuf>,
    /// Where jobs go (None: job limits unavailable here).
    pub job_mode: Option<oz0_jobs::JobMode>,
    /// Why job limits are unavailable, with the fix.
    pub job_unavailable: Option<String>,
    /// A fault to inject into one property's runs (self-test tests only).
    pub fault: Option<Property>,
    /// A layer to take away from every run (self-test tests only).
    pub layer_fault: Option<Layer>,
}

/// A layer of the sandbox that the self-test's tests can take away from
/// every run of the self-test, to show that the self-test sees that layer
/// go even while the others hold (and names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The mounts: the stand-in data directory is mounted into the runs.
    Mounts,
    /// Landlock is not applied.
    Landlock,
    /// No seccomp filter.
    Seccomp,
}

impl Layer {
    /// Every layer.
    pub const ALL: [Layer; 3] = [Layer::Mounts, Layer::Landlock, Layer::Seccomp];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Mounts => "mounts",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
        }
    }

    /// The layer named `s`.
    pub fn parse(s: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == s)
    }
}

type CheckResult = Result<String, String>;

struct Ctx<'a> {
    cfg: &'a Config<'a>,
    base: PathBuf,
    standin: PathBuf,
    spec_data_dir: String,
    current: Property,
    seq: u32,
}

/// A temporary folder removed on drop.
struct Base(PathBuf);
impl Drop for Base {
    fn drop(&mut self) {
        let _ = make_writable(&self.0);
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn make_writable(p: &Path) -> std::io::Result<()> {
    for e in fs::read_dir(p)?.flatten() {
        let path = e.path();
        if let Ok(m) = fs::symlink_metadata(&path) {
            if m.is_dir() {
                let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o700));
                let _ = make_writable(&path);
            }
        }
    }
    Ok(())
}

/// Runs the self-test, calling `on_line` after each check.
pub fn run(cfg: &Config, mut on_line: impl FnMut(&Line)) -> Outcome {
    let started = Instant::now();
    // The node's own variable that must never reach a run. Set before any
    // thread of the self-test starts.
    if std::env::var_os(CANARY).is_none() {
        std::env::set_var(CANARY, "node-only");
    }
    let mut lines = Vec::new();
    let mut failed = None;
    let base = match make_base() {
        Ok(b) => b,
        Err(e) => {
            let l = Line {
                property: Property::Launch,
                ok: false,
                ms: 0,
                detail: format!("cannot make the self-test's temporary folder: {e}"),
            };
            on_line(&l);
            return Outcome {
                lines: vec![l],
                failed: Some(Property::Launch),
                fault_injected: cfg.fault.is_some() || cfg.layer_fault.is_some(),
                total_ms: 0,
            };
        }
    };
    let standin = base.0.join("standin-data");
    let ok = fs::create_dir_all(standin.join("identity"))
        .and_then(|_| fs::write(standin.join("identity/node.key"), "standin-key"));
    let spec_data_dir = cfg
        .data_dir
        .as_ref()
        .unwrap_or(&standin)
        .display()
        .to_string();
    let mut ctx = Ctx {
        cfg,
        base: base.0.clone(),
        standin,
        spec_data_dir,
        current: Property::Launch,
        seq: 0,
    };
    for p in Property::ALL {
        ctx.current = p;
        let t = Instant::now();
        let r = if let Err(e) = &ok {
            Err(format!("cannot prepare the stand-in data directory: {e}"))
        } else {
            match p {
                Property::Launch => check_launch(&mut ctx),
                Property::Files => check_files(&mut ctx),
                Property::Egress => check_egress(&mut ctx),
                Property::Ingress => check_ingress(&mut ctx),
                Property::JobLimits => check_job_limits(&mut ctx),
                Property::FailClosed => check_fail_closed(&mut ctx),
                Property::ProtectedPaths => check_protected(&mut ctx),
                Property::Environment => check_environment(&mut ctx),
            }
        };
        let line = Line {
            property: p,
            ok: r.is_ok(),
            ms: u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX),
            detail: match r {
                Ok(d) | Err(d) => d,
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
    drop(base);
    Outcome {
        lines,
        failed,
        fault_injected: cfg.fault.is_some() || cfg.layer_fault.is_some(),
        total_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

fn make_base() -> std::io::Result<Base> {
    let mut b = [0u8; 6];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    let name: String = b.iter().map(|x| format!("{x:02x}")).collect();
    let p = std::env::temp_dir().join(format!("oz0-selftest-{name}"));
    fs::DirBuilder::new().mode(0o700).create(&p)?;
    Ok(Base(p.canonicalize()?))
}

impl Ctx<'_> {
    fn dir(&mut self, tag: &str) -> Result<PathBuf, String> {
        self.seq += 1;
        let d = self.base.join(format!("{}-{tag}", self.seq));
        fs::create_dir(&d).map_err(|e| format!("cannot make {}: {e}", d.display()))?;
        Ok(d)
    }

    fn fault(&self) -> Option<Fault> {
        if let Some(layer) = self.cfg.layer_fault {
            return Some(match layer {
                Layer::Mounts => Fault::Expose(
                    oz0_policy::AbsPath::from_path(&self.standin).expect("temp dir is UTF-8"),
                ),
                Layer::Landlock => Fault::NoLandlock,
                Layer::Seccomp => Fault::NoSeccomp,
            });
        }
        if self.cfg.fault != Some(self.current) {
            return None;
        }
        Some(match self.current {
            Property::Launch => Fault::SharePid,
            Property::Files => Fault::Expose(
                oz0_policy::AbsPath::from_path(&self.standin).expect("temp dir is UTF-8"),
            ),
            Property::Egress | Property::Ingress => Fault::ShareNet,
            Property::ProtectedPaths => Fault::NoProtectedPaths,
            Property::Environment => Fault::LeakEnv(CANARY.into(), "node-only".into()),
            // Handled by the checks themselves (no job / a writable root).
            Property::JobLimits | Property::FailClosed => return None,
        })
    }

    fn request(&self, work: &Path, command: Vec<String>) -> RunRequest {
        RunRequest {
            work: work.display().to_string(),
            data_dir: self.spec_data_dir.clone(),
            command,
            ..Default::default()
        }
    }

    fn launch(
        &self,
        req: RunRequest,
        proxy: Option<&dyn oz0_egress::EgressService>,
        jobs: Option<&oz0_jobs::JobMode>,
        cancel: Option<std::os::fd::OwnedFd>,
    ) -> Result<RunOutcome, String> {
        self.launch_with(req, proxy, jobs, cancel, self.fault())
    }

    /// A run of the probe with one layer of the sandbox deliberately taken
    /// away (`fault`), to show that another holds on its own.
    fn launch_without(&self, req: RunRequest, fault: Fault) -> Result<RunOutcome, String> {
        self.launch_with(req, None, None, None, Some(fault))
    }

    fn launch_with(
        &self,
        req: RunRequest,
        proxy: Option<&dyn oz0_egress::EgressService>,
        jobs: Option<&oz0_jobs::JobMode>,
        cancel: Option<std::os::fd::OwnedFd>,
        fault: Option<Fault>,
    ) -> Result<RunOutcome, String> {
        let spec = RunSpec::new(req).map_err(|e| format!("self-test spec refused: {e}"))?;
        let extras = Extras {
            fault,
            ..Default::default()
        };
        let opts = RunOptions {
            io: RunIo::quiet(),
            cancel: cancel.map(Cancel),
            extras,
            scratch: Some(self.base.clone()),
            jobs,
            egress: proxy,
        };
        self.cfg
            .host
            .run(&spec, opts)
            .map_err(|e| format!("the sandbox did not start: {e}"))
    }
}

fn probe_cmd(out: &Path, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "/oz0/oz0-node",
        "sandbox",
        "probe",
        "--no-syscalls",
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(out.display().to_string());
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

fn read_report(p: &Path) -> Result<Value, String> {
    let text = fs::read_to_string(p).map_err(|e| format!("the probe wrote no report ({e})"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad probe report: {e}"))
}

fn marker(tag: &str) -> String {
    let mut b = [0u8; 6];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    format!(
        "oz0st-{tag}-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// Host pids whose command line contains `m`.
fn processes_with(m: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(c) = fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&c).contains(m) {
                out.push(pid);
            }
        }
    }
    out
}

fn kill_all(m: &str) {
    for pid in processes_with(m) {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

// --- launch -----------------------------------------------------------------

fn check_launch(c: &mut Ctx) -> CheckResult {
    let work = c.dir("launch")?;
    let m = marker("launch");
    // The first process writes, starts a long-lived child, and exits.
    let script = format!(
        "echo ok > launched; /oz0/oz0-node sandbox probe --no-syscalls --out bg.json --hold-ms 60000 --tag {m} >/dev/null 2>&1 & \
         i=0; while [ ! -e bg.json ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; exit 0"
    );
    let o = c.launch(
        c.request(&work, vec!["/bin/sh".into(), "-c".into(), script]),
        None,
        None,
        None,
    );
    let leftover = processes_with(&m);
    kill_all(&m);
    let o = o?;
    if o.exit_code != 0 {
        return Err(format!(
            "the process exited with {} instead of 0",
            o.exit_code
        ));
    }
    match fs::read_to_string(work.join("launched")) {
        Ok(s) if s == "ok\n" => {}
        _ => return Err("the process did not write in its work directory".into()),
    }
    if !work.join("bg.json").exists() {
        return Err("the child process did not start".into());
    }
    if !leftover.is_empty() {
        return Err(format!(
            "a process it started outlived it (pids {leftover:?})"
        ));
    }
    let seccomp = seccomp_alone(c)?;
    Ok(format!(
        "wrote its work directory; the process it started ended with it; {seccomp}"
    ))
}

/// The seccomp layer on its own: the probe tries the system calls the
/// filter refuses, once in a run with the filter and once in the same run
/// without it. A call refused with the filter that this kernel allows
/// without it is refused by the filter alone; at least two such calls
/// prove the layer, whatever the namespaces and capabilities refuse too.
fn seccomp_alone(c: &mut Ctx) -> CheckResult {
    let work = c.dir("seccomp")?;
    let (with, without) = (work.join("with.json"), work.join("without.json"));
    let probe = |out: &Path| -> Vec<String> {
        let mut v = probe_cmd(out, &[]);
        v.retain(|a| a != "--no-syscalls");
        v
    };
    c.launch(c.request(&work, probe(&with)), None, None, None)?;
    c.launch_without(c.request(&work, probe(&without)), Fault::NoSeccomp)?;
    let (a, b) = (read_report(&with)?, read_report(&without)?);
    if a["seccomp"] != "2" {
        return Err(format!(
            "seccomp layer: no filter is in place in the run (Seccomp: {} in /proc/self/status)",
            a["seccomp"]
        ));
    }
    let calls = a["syscalls"]
        .as_object()
        .ok_or("the probe reported no system calls")?;
    let mut proven: Vec<&str> = calls
        .iter()
        .filter(|(k, v)| {
            v.as_str().is_some_and(|e| e.starts_with('E')) && b["syscalls"][k.as_str()] == "ok"
        })
        .map(|(k, _)| k.as_str())
        .collect();
    proven.sort_unstable();
    if proven.len() < 2 {
        return Err(format!(
            "seccomp layer: the filter refused {} call(s) this kernel allows here without it ({}); it refuses at least two on a machine it works on",
            proven.len(),
            proven.join(", ")
        ));
    }
    Ok(format!(
        "seccomp alone refuses {}, which this kernel allows without the filter",
        proven.join(", ")
    ))
}

// --- files ------------------------------------------------------------------

fn check_files(c: &mut Ctx) -> CheckResult {
    let work = c.dir("files")?;
    let outside = c.dir("outside")?;
    let out = work.join("r.json");
    let standin = c.standin.display().to_string();
    let standin_key = format!("{standin}/identity/node.key");
    let outside_file = outside.join("written").display().to_string();
    let mut args = vec![
        "--write",
        "/etc/oz0-selftest",
        "--write",
        &outside_file,
        "--list",
        &standin,
        "--read",
        &standin_key,
    ];
    let real = c
        .cfg
        .data_dir
        .as_ref()
        .filter(|d| d.exists())
        .map(|d| d.display().to_string());
    let real_key = real.as_ref().map(|d| format!("{d}/identity/node.key"));
    if let (Some(d), Some(k)) = (&real, &real_key) {
        args.extend(["--list", d.as_str(), "--read", k.as_str()]);
    }
    let o = c.launch(c.request(&work, probe_cmd(&out, &args)), None, None, None)?;
    let r = read_report(&out)?;
    let bad = |section: &str, key: &str| r[section][key] == "ok";
    let abi = oz0_sys::probe::landlock_abi();
    match &o.landlock {
        _ if abi == 0 => {}
        Some(l) if l.enforced == "full" || l.enforced == "partial" => {}
        other => {
            return Err(format!(
                "landlock layer: the run's Landlock is {} though this kernel has ABI {abi}",
                other.as_ref().map_or("missing", |l| l.enforced.as_str())
            ))
        }
    }
    if bad("write", "/etc/oz0-selftest") {
        return Err("a write to /etc succeeded".into());
    }
    if bad("write", &outside_file) || Path::new(&outside_file).exists() {
        return Err(format!(
            "a write outside the work directory ({outside_file}) succeeded"
        ));
    }
    if bad("list", &standin) || bad("read", &standin_key) {
        return Err(format!(
            "mount layer: the stand-in data directory {standin} could be listed or read"
        ));
    }
    let first = match (&real, &real_key) {
        (Some(d), Some(k)) => {
            if bad("list", d) || bad("read", k) {
                return Err(format!("the node's data directory {d} could be listed or its key read"));
            }
            format!("writes outside refused; the node's data directory {d}: listing refused, reading identity/node.key refused; the stand-in too")
        }
        _ => "writes outside refused; a stand-in data directory: listing and reading its key refused (the node has no data directory yet)".into(),
    };
    // The mount layer on its own: the same, in a run without Landlock.
    let out = work.join("mounts-alone.json");
    c.launch_without(c.request(&work, probe_cmd(&out, &args)), Fault::NoLandlock)?;
    let r = read_report(&out)?;
    let seen: Vec<&str> = [
        ("write", "/etc/oz0-selftest"),
        ("write", outside_file.as_str()),
        ("list", standin.as_str()),
        ("read", standin_key.as_str()),
    ]
    .into_iter()
    .chain(real.iter().map(|d| ("list", d.as_str())))
    .chain(real_key.iter().map(|k| ("read", k.as_str())))
    .filter(|(section, key)| r[*section][*key] == "ok")
    .map(|(_, key)| key)
    .collect();
    if !seen.is_empty() || Path::new(&outside_file).exists() {
        return Err(format!(
            "mount layer: without Landlock, the run reached {}: the mounts alone do not hide what they must",
            seen.join(", ")
        ));
    }
    let landlock = landlock_alone(c)?;
    Ok(format!(
        "{first}; each layer alone: with Landlock off the mounts still hide all of it; {landlock}"
    ))
}

/// The Landlock layer on its own: the stand-in data directory is bound
/// into a run, writable, at a path no Landlock rule covers (the mount
/// layer deliberately opened); Landlock alone must refuse listing it,
/// reading its key and writing in it.
fn landlock_alone(c: &mut Ctx) -> CheckResult {
    let abi = oz0_sys::probe::landlock_abi();
    if abi == 0 {
        return Ok("Landlock: not on this kernel, so the mount layer alone holds the files (no second layer)".into());
    }
    let work = c.dir("landlock")?;
    let out = work.join("r.json");
    let inside = "/oz0/exposed";
    let key = format!("{inside}/identity/node.key");
    let planted = format!("{inside}/planted");
    let req = c.request(
        &work,
        probe_cmd(
            &out,
            &["--list", inside, "--read", &key, "--write", &planted],
        ),
    );
    let fault = Fault::ExposeAt {
        src: oz0_policy::AbsPath::from_path(&c.standin).map_err(|e| e.to_string())?,
        dest: oz0_policy::AbsPath::new(inside).expect("constant path"),
    };
    c.launch_without(req, fault)?;
    let r = read_report(&out)?;
    let reached: Vec<&str> = [
        ("list", inside),
        ("read", key.as_str()),
        ("write", planted.as_str()),
    ]
    .into_iter()
    .filter(|(section, k)| r[*section][*k] != "EACCES")
    .map(|(_, k)| k)
    .collect();
    if !reached.is_empty() || c.standin.join("planted").exists() {
        return Err(format!(
            "landlock layer: with the stand-in data directory mounted in the run, Landlock did not refuse {} (ABI {abi}): it does not hold on its own",
            reached.join(", ")
        ));
    }
    Ok(format!(
        "with it mounted writable, Landlock (ABI {abi}) alone refuses listing, reading and writing it"
    ))
}

// --- egress -----------------------------------------------------------------

/// A loopback HTTP server answering 200 to everything, until dropped. It
/// counts the connections it accepted.
struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Server {
    fn start() -> Result<Server, String> {
        let l = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("cannot listen on loopback: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s2, a2) = (stop.clone(), accepted.clone());
        std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        a2.fetch_add(1, Ordering::SeqCst);
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Server {
            port,
            stop,
            accepted,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn check_egress(c: &mut Ctx) -> CheckResult {
    let allowed = Server::start()?;
    let forwarded = Server::start()?;
    let work = c.dir("egress")?;
    let out = work.join("r.json");
    let a = format!("127.0.0.1:{}", allowed.port);
    let f = format!("127.0.0.1:{}", forwarded.port);
    let ua = format!("http://{a}/");
    let uf = format!("http://{f}/");
    let unlisted = "http://oz0-selftest.invalid/";
    let args = [
        "--connect",
        &a,
        "--connect",
        &f,
        "--proxy-get",
        &ua,
        "--proxy-get",
        &uf,
        "--proxy-get-noauth",
        &ua,
        "--proxy-get",
        unlisted,
    ];
    let mut req = c.request(&work, probe_cmd(&out, &args));
    req.allow = vec![a.clone()];
    req.forward = vec![forwarded.port];
    c.launch(req, Some(c.cfg.egress), None, None)?;
    let r = read_report(&out)?;
    // Each listener must have seen exactly the one connection the proxy made
    // for it. (A direct "connect ok" alone may have met the run's own bridge,
    // whose port inside can equal a host port.)
    for (t, s) in [(&a, &allowed), (&f, &forwarded)] {
        let n = s.accepted.load(Ordering::SeqCst);
        if n > 1 || (r["connect"][t] == "ok" && n != 1) {
            return Err(format!(
                "a direct connection to the host's {t} succeeded ({n} connections reached it)"
            ));
        }
    }
    let get = |k: &str| r["proxy_get"][k].clone();
    if get(&format!("auth {ua}")) != 200 {
        return Err(format!(
            "the allowed host {a} did not answer through the proxy: {}",
            get(&format!("auth {ua}"))
        ));
    }
    if get(&format!("auth {uf}")) != 200 {
        return Err(format!(
            "the forwarded port {} did not answer through the proxy: {}",
            forwarded.port,
            get(&format!("auth {uf}"))
        ));
    }
    if get(&format!("noauth {ua}")) != 407 {
        return Err(format!(
            "the proxy answered {} without the run's token (407 expected)",
            get(&format!("noauth {ua}"))
        ));
    }
    if get(&format!("auth {unlisted}")) != 403 {
        return Err(format!(
            "a host the allowlist does not name got {} (403 expected)",
            get(&format!("auth {unlisted}"))
        ));
    }
    Ok(format!("direct connections to {a} and the forwarded port refused; through the proxy {a} and the forwarded port answer; 407 without the token; 403 for a name the allowlist does not name"))
}

// --- ingress ----------------------------------------------------------------

fn check_ingress(c: &mut Ctx) -> CheckResult {
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let work = c.dir("ingress")?;
    let out = work.join("r.json");
    let ps = port.to_string();
    let req = c.request(
        &work,
        probe_cmd(&out, &["--listen", &ps, "--hold-ms", "20000"]),
    );
    let (cancel_r, cancel_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let c = &*c;
    let (reached, run) = std::thread::scope(|s| {
        let h = s.spawn(|| c.launch(req, None, None, Some(cancel_r)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.exists() && Instant::now() < deadline && !h.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let reached =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
                .is_ok();
        let _ = rustix::io::write(&cancel_w, b"x");
        let run = h
            .join()
            .unwrap_or_else(|_| Err("the listening run panicked".to_string()));
        (reached, run)
    });
    let o = run?;
    let r = read_report(&out)?;
    if r["listen"] != "ok" {
        return Err(format!(
            "the process in the sandbox could not listen on its loopback: {}",
            r["listen"]
        ));
    }
    if reached {
        return Err(format!(
            "the host reached a listener inside the sandbox on 127.0.0.1:{port}"
        ));
    }
    if o.ended != Ended::Cancelled {
        return Err("the listening run did not stay up for the check".into());
    }
    Ok(format!("a process in the sandbox listened on its 127.0.0.1:{port}; the host could not reach it ({} ms)", ms(t.elapsed())))
}

// --- job_limits ---------------------------------------------------------------

fn check_job_limits(c: &mut Ctx) -> CheckResult {
    let Some(mode) = c.cfg.job_mode.clone() else {
        return Err(format!(
            "no job limits on this machine: {}",
            c.cfg
                .job_unavailable
                .clone()
                .unwrap_or_else(|| "no cgroup mode".into())
        ));
    };
    let faulty = c.cfg.fault == Some(Property::JobLimits);
    let jobs = if faulty { None } else { Some(&mode) };
    let limits = |l: Limits| if faulty { Limits::default() } else { l };
    // Processes: 20 children under a limit of 8. The probe counts the
    // children the system let it start (no race with their start-up).
    let work = c.dir("procs")?;
    let out = work.join("r.json");
    let mut req = c.request(&work, probe_cmd(&out, &["--spawn", "20"]));
    req.limits = limits(Limits {
        processes: Some(8),
        ..Default::default()
    });
    c.launch(req, None, jobs, None)?;
    let r = read_report(&out)?;
    let started = r["spawned"]
        .as_u64()
        .ok_or("the probe did not report its children")?;
    if started == 0 {
        return Err("no process started under the process limit".into());
    }
    if started > 6 {
        return Err(format!("{started} of 20 processes started under a limit of 8 (at most 6 may: the limit counts bubblewrap's two and the starting process)"));
    }
    // Memory: 512 MiB under a limit of 256 MiB.
    let work = c.dir("mem")?;
    let out = work.join("r.json");
    let mut req = c.request(&work, probe_cmd(&out, &["--alloc", "512"]));
    req.limits = limits(Limits {
        memory_mib: Some(256),
        ..Default::default()
    });
    let o = c.launch(req, None, jobs, None)?;
    let r = read_report(&out).ok();
    if r.as_ref().is_some_and(|r| r["alloc"] == "ok") {
        return Err("512 MiB were allocated and touched under a limit of 256 MiB".into());
    }
    let oom = o.job.as_ref().and_then(|j| j.outcome.limit_hit) == Some(oz0_jobs::LimitHit::Memory);
    // Closing the job kills its processes: its folders are gone.
    let mode_name = mode.name();
    Ok(format!(
        "{started} of 20 processes started under a limit of 8 (pids.max counts bubblewrap's 2 and the starting process); 512 MiB under 256 MiB {} (exit {}); {mode_name}",
        if oom { "killed by the memory limit" } else { "refused" },
        o.exit_code
    ))
}

// --- fail_closed --------------------------------------------------------------

fn check_fail_closed(c: &mut Ctx) -> CheckResult {
    let Some(mode) = c.cfg.job_mode.clone() else {
        return Err(
            "no job limits on this machine, so placement cannot be shown to fail closed".into(),
        );
    };
    // A job root no one can create a cgroup under: a path through a file.
    let broken = |p: &Path| p.join("cgroup.procs").join("oz0-selftest");
    let bad = match &mode {
        oz0_jobs::JobMode::V2 { root } => oz0_jobs::JobMode::V2 { root: broken(root) },
        oz0_jobs::JobMode::V1 {
            memory,
            pids,
            cpuacct,
            freezer,
        } => oz0_jobs::JobMode::V1 {
            memory: broken(memory),
            pids: broken(pids),
            cpuacct: cpuacct.clone(),
            freezer: freezer.clone(),
        },
        other => other.clone(),
    };
    let use_mode = if c.cfg.fault == Some(Property::FailClosed) {
        mode
    } else {
        bad
    };
    let work = c.dir("failclosed")?;
    let mut req = c.request(
        &work,
        vec!["/bin/sh".into(), "-c".into(), "echo ran > ran".into()],
    );
    req.limits = Limits {
        processes: Some(16),
        ..Default::default()
    };
    let r = c.launch(req, None, Some(&use_mode), None);
    if work.join("ran").exists() {
        return Err("a process whose job could not be made ran anyway".into());
    }
    match r {
        Err(e) if e.contains("job") => Ok(
            "a run whose job (cgroup) could not be made was refused; its command never ran".into(),
        ),
        Err(e) => Err(format!("refused, but not for its job: {e}")),
        Ok(_) => Err("a run whose job could not be made was reported as started".into()),
    }
}

// --- protected_paths ----------------------------------------------------------

fn check_protected(c: &mut Ctx) -> CheckResult {
    let work = c.dir("protected")?;
    let git = work.join(".git");
    for d in ["hooks", "objects/info"] {
        fs::create_dir_all(git.join(d)).map_err(|e| e.to_string())?;
    }
    fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\n").map_err(|e| e.to_string())?;
    fs::write(git.join("config"), "[core]\n").map_err(|e| e.to_string())?;
    let script = "r=results; : > $r; \
        (echo x > .git/hooks/pre-commit) 2>/dev/null && echo hooks >> $r; \
        (echo x > .git/hooks/post-checkout) 2>/dev/null && echo newhook >> $r; \
        (echo x >> .git/config) 2>/dev/null && echo config >> $r; \
        (echo /elsewhere > .git/commondir) 2>/dev/null && echo commondir >> $r; \
        (echo /elsewhere > .git/objects/info/alternates) 2>/dev/null && echo alternates >> $r; \
        mv .git .git-aside 2>/dev/null && echo renamed >> $r; \
        (echo x > .git/objects/oz0-selftest) 2>/dev/null && echo objects >> $r; exit 0";
    c.launch(
        c.request(&work, vec!["/bin/sh".into(), "-c".into(), script.into()]),
        None,
        None,
        None,
    )?;
    let got = fs::read_to_string(work.join("results"))
        .map_err(|_| "the check wrote no results".to_string())?;
    let got: Vec<&str> = got.lines().collect();
    for (k, what) in [
        ("hooks", ".git/hooks/pre-commit was modified"),
        ("newhook", "a new hook was created in .git/hooks"),
        ("config", ".git/config was modified"),
        (
            "commondir",
            "a .git/commondir was written (it moves config and hooks elsewhere)",
        ),
        ("alternates", ".git/objects/info/alternates was written"),
        ("renamed", ".git was renamed aside"),
    ] {
        if got.contains(&k) {
            return Err(what.into());
        }
    }
    if !got.contains(&"objects") {
        return Err("the rest of .git was not writable".into());
    }
    Ok(".git/hooks, .git/config, .git/commondir and alternates read-only, .git not movable, the rest of .git writable".into())
}

// --- environment --------------------------------------------------------------

fn check_environment(c: &mut Ctx) -> CheckResult {
    let server = Server::start()?;
    let work = c.dir("env")?;
    let out = work.join("r.json");
    let a = format!("127.0.0.1:{}", server.port);
    let ua = format!("http://{a}/");
    let mut req = c.request(&work, probe_cmd(&out, &["--env", "--proxy-get", &ua]));
    req.allow = vec![a];
    req.env = vec![EnvVar::new("OZ0SELFTEST_GIVEN", "given").map_err(|e| e.to_string())?];
    c.launch(req, Some(c.cfg.egress), None, None)?;
    let r = read_report(&out)?;
    let env = r["env"]
        .as_object()
        .ok_or("the probe reported no environment")?;
    if let Some(k) = env
        .keys()
        .find(|k| k.to_ascii_uppercase().starts_with("OZ0_"))
    {
        return Err(format!("the node's variable {k} reached the run"));
    }
    if env.get("OZ0SELFTEST_GIVEN").and_then(|v| v.as_str()) != Some("given") {
        return Err("the caller's variable did not reach the run".into());
    }
    for need in [
        "PATH",
        "HOME",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        if !env.contains_key(need) {
            return Err(format!("{need} is missing"));
        }
    }
    if env.contains_key("NO_PROXY") || env.contains_key("no_proxy") {
        return Err("NO_PROXY is set".into());
    }
    let allowed: std::collections::BTreeSet<&str> = [
        "OZ0SELFTEST_GIVEN",
        "PATH",
        "HOME",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .collect();
    // The C library or the kernel may add nothing; anything else leaked.
    if let Some(k) = env
        .keys()
        .find(|k| !allowed.contains(k.as_str()) && k.as_str() != "PWD")
    {
        return Err(format!("{k} reached the run without being given"));
    }
    if r["proxy_get"][format!("auth {ua}")] != 200 {
        return Err("the proxy variables do not carry the run's token".into());
    }
    Ok("the caller's variable, PATH, HOME, TMPDIR and the proxy's with the run's token; no OZ0_ variable of the node".into())
}
