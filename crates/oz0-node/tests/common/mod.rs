//! Helpers for black-box tests of the `oz0-node` binary.
//!
//! Security tests run as an unprivileged user, the way nodes run. As root,
//! or where the kernel lacks a feature, a test prints why and skips — unless
//! `OZ0_MUST_WORK=1` (CI), where it fails instead.
#![allow(dead_code)]

pub mod fleet;
pub mod net;
pub mod oci;
pub mod wine;

/// Returns from the test (with the reason printed) when the sandbox cannot
/// run here; with `OZ0_MUST_WORK=1` the test fails instead. (The limits
/// and edge suites check for more, with their own.)
#[allow(unused_macros)]
macro_rules! ready {
    () => {
        if !common::sandbox_ready() {
            return;
        }
    };
}

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The binary under test: `OZ0_NODE_BIN` (CI stages a copy the test user can
/// reach), else cargo's build of it.
pub fn node() -> PathBuf {
    std::env::var_os("OZ0_NODE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_oz0-node")))
}

fn must_work() -> bool {
    std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1")
}

/// Skips (returns false) with a printed reason, or panics under OZ0_MUST_WORK=1.
pub fn skip(reason: &str) -> bool {
    if must_work() {
        panic!("OZ0_MUST_WORK=1 and this test cannot run: {reason}");
    }
    eprintln!("SKIPPED: {reason}");
    false
}

/// True when this process can run sandboxes the way a node does.
pub fn sandbox_ready() -> bool {
    if rustix_uid() == 0 {
        return skip("security tests run as an unprivileged user; run `scripts/test` (it runs them as one) or run this binary as a normal user");
    }
    let out = Command::new(node()).arg("--version").output();
    if out.is_err() {
        return skip(&format!("cannot execute {}", node().display()));
    }
    let bwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !bwrap {
        return skip("bubblewrap is not installed (apt-get install bubblewrap)");
    }
    true
}

fn rustix_uid() -> u32 {
    // /proc/self/status: "Uid:\treal\teffective..."
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .and_then(|u| u.parse().ok())
        .unwrap_or(0)
}

/// A folder for one test, under a world-enterable base; removed on drop.
pub struct TempDir(pub PathBuf);

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TempDir {
    /// Creates `<base>/oz0-test-<pid>-<n>-<tag>`.
    pub fn new(tag: &str) -> TempDir {
        let base = std::env::var_os("OZ0_TEST_TMP")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = base.join(format!("oz0-test-{}-{n}-{tag}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        TempDir(p.canonicalize().unwrap())
    }

    /// A path inside.
    pub fn join(&self, s: &str) -> PathBuf {
        self.0.join(s)
    }

    /// As a string.
    pub fn s(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Read-only bits a test set must not stop the clean-up.
        let _ = Command::new("chmod")
            .args(["-R", "u+rwX"])
            .arg(&self.0)
            .status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A work dir plus a data dir outside it.
pub struct Env {
    pub root: TempDir,
    pub work: PathBuf,
    pub data: PathBuf,
}

impl Env {
    pub fn new(tag: &str) -> Env {
        let root = TempDir::new(tag);
        let work = root.join("work");
        let data = root.join("data");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(data.join("identity")).unwrap();
        std::fs::write(data.join("identity/node.key"), "NODE-KEY-SECRET").unwrap();
        Env { root, work, data }
    }

    /// `oz0-node sandbox run --work W --data-dir D <extra> -- <cmd>`.
    pub fn cmd<I, S>(&self, extra: &[&str], cmd: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = Command::new(node());
        c.args(["sandbox", "run", "--work"])
            .arg(&self.work)
            .arg("--data-dir")
            .arg(&self.data)
            .args(extra)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null());
        c
    }

    /// Runs a shell snippet in the sandbox.
    pub fn sh(&self, extra: &[&str], script: &str) -> Output {
        self.cmd(extra, ["/bin/sh", "-c", script]).output().unwrap()
    }

    /// Runs the probe inside the sandbox and parses its report.
    pub fn probe(&self, extra: &[&str], probe_args: &[&str]) -> serde_json::Value {
        let mut args = vec!["/oz0/oz0-node", "sandbox", "probe"];
        args.extend_from_slice(probe_args);
        let out = self.cmd(extra, args).output().unwrap();
        assert!(
            out.status.success(),
            "probe failed: {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "probe output is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Pids of processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                out.push(pid);
            }
        }
    }
    out
}

/// A unique marker for process checks.
pub fn marker(tag: &str) -> String {
    format!(
        "oz0mark{}x{}x{tag}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// The address-space limit the manifest-bomb tests run a binary under
/// (`prlimit --as`): room for the binary, far less than the bomb expands to.
pub const BOMB_AS_LIMIT: &str = "--as=1073741824";

/// A 54 KB `oz0-plugin.yaml` whose aliases expand to 100 GB: 5,000
/// aliases of a tool whose command is 5,000 aliases of a 4,000-byte
/// string. Its first anchor is on line 2.
pub fn alias_bomb() -> String {
    let mut m = format!(
        "name: bomb\ndescription: &d {}\ntools:\n  - &t {{id: t, command: [{}]}}\n",
        "x".repeat(4000),
        vec!["*d"; 5000].join(",")
    );
    m.push_str(&"  - *t\n".repeat(5000));
    m
}

/// `prlimit` (util-linux), to run a binary under [`BOMB_AS_LIMIT`].
pub fn prlimit() -> Option<&'static str> {
    ["/usr/bin/prlimit", "/bin/prlimit"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}
