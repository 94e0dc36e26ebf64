//! A real `oz0-edge` (serving HTTPS with a certificate of a CA the test
//! makes at run time) and real `oz0-node run --edge` processes (verifying
//! it against that CA), for the fleet's black-box tests.
//!
//! The edge binary: `OZ0_EDGE_BIN`, else `oz0-edge` next to `OZ0_NODE_BIN`,
//! else cargo's build of it next to the test's folder (`cargo build -p
//! oz0-edge` first).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oz0_edge::client::{OperatorClient, Trust};
use oz0_edge::routing::{Isolation, JobKind, Origin, RawJobRequest};
use oz0_edge::wire::{JobPage, JobView};

use super::{node, TempDir};

#[path = "../../../oz0-edge/tests/common/certs.rs"]
pub mod certs;

pub const TOKEN: &str = "acme-enrolment-token-0123456789abcdef";
pub const OPERATOR: &str = "operator-token-0123456789abcdef012345";

pub fn edge_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OZ0_EDGE_BIN") {
        return Some(PathBuf::from(p));
    }
    let beside_node = node().with_file_name("oz0-edge");
    if beside_node.exists() {
        return Some(beside_node);
    }
    // target/debug/deps/edge_nodes-… → target/debug/oz0-edge
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("oz0-edge");
    p.exists().then_some(p)
}

/// The operator's CLI: `OZ0_CLI_BIN`, else `oz0` next to the edge.
pub fn oz0_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OZ0_CLI_BIN") {
        return Some(PathBuf::from(p));
    }
    let p = edge_bin()?.with_file_name("oz0");
    p.exists().then_some(p)
}

pub fn write_secret(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A running `oz0-edge`, killed on drop.
pub struct Edge {
    pub child: Child,
    pub url: String,
    /// The CA the edge's certificate is signed by.
    pub ca: PathBuf,
    pub _dir: TempDir,
    pub rt: tokio::runtime::Runtime,
    pub op: OperatorClient,
}

impl Edge {
    pub fn start(bin: &Path, lease_secs: u32) -> Edge {
        Edge::start_with(bin, lease_secs, &[])
    }

    /// An edge with `extra` flags.
    pub fn start_with(bin: &Path, lease_secs: u32, extra: &[&str]) -> Edge {
        Edge::start_under(&[], bin, lease_secs, extra)
    }

    /// An edge started through `wrapper` (e.g. `prlimit --as=N --`).
    pub fn start_under(wrapper: &[&str], bin: &Path, lease_secs: u32, extra: &[&str]) -> Edge {
        let dir = TempDir::new("edge");
        write_secret(&dir.join("tenants"), &format!("acme={TOKEN}\n"));
        write_secret(&dir.join("operators"), &format!("{OPERATOR}\n"));
        let ca = certs::TestCa::new(&dir.0, "fleet");
        let (cert, key) = ca.leaf("edge", &["127.0.0.1", "localhost"], None);
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(if extra.contains(&"--store") {
                Vec::new()
            } else {
                vec![
                    "--store".to_string(),
                    format!("sqlite:{}", dir.join("edge.db").display()),
                ]
            })
            .arg("--tenant-tokens")
            .arg(dir.join("tenants"))
            .arg("--operator-tokens")
            .arg(dir.join("operators"))
            .arg("--lease-secs")
            .arg(lease_secs.to_string())
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(url) = line
            .split_whitespace()
            .find(|w| w.starts_with("https://"))
            .map(str::to_string)
        else {
            // Its reason is on stderr (this test's own); say how it ended.
            let _ = child.kill();
            let status = child.wait();
            panic!("the edge did not say where it listens over HTTPS: {line:?} (it ended: {status:?}; its stderr is above)")
        };
        let op = OperatorClient::with_trust(&url, OPERATOR, &Trust::CaFile(ca.ca.clone())).unwrap();
        Edge {
            child,
            url,
            ca: ca.ca.clone(),
            _dir: dir,
            rt: tokio::runtime::Runtime::new().unwrap(),
            op,
        }
    }

    pub fn job(&self, id: &str) -> JobView {
        self.rt.block_on(self.op.job("acme", id)).unwrap()
    }

    /// A page of the tenant's jobs, newest first, in `state` when named.
    pub fn jobs(&self, state: Option<&str>, before: Option<&str>, limit: i64) -> JobPage {
        self.rt
            .block_on(self.op.jobs("acme", state, before, Some(limit)))
            .unwrap()
    }

    /// Waits until the job has ended.
    pub fn wait_job(&self, id: &str, secs: u64) -> JobView {
        self.wait_job_every(id, secs, Duration::from_millis(200))
    }

    /// Waits until the job has ended, asking for its state every `every`.
    pub fn wait_job_every(&self, id: &str, secs: u64, every: Duration) -> JobView {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            let j = self.job(id);
            if !matches!(j.state.as_str(), "queued" | "leased") {
                return j;
            }
            assert!(Instant::now() < until, "job {id} did not end: {j:?}");
            std::thread::sleep(every);
        }
    }

    /// Runs the operator's CLI against this edge: its status, stdout, stderr.
    pub fn oz0(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let bin = oz0_bin().expect("the oz0 binary: set OZ0_CLI_BIN or build it beside oz0-edge");
        let o = Command::new(bin)
            .args(args)
            .env("OZ0_EDGE", &self.url)
            .env("OZ0_EDGE_CA", &self.ca)
            .env("OZ0_OPERATOR_TOKEN", OPERATOR)
            .env_remove("OZ0_OPERATOR_TOKEN_FILE")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// Cancels a job.
    pub fn cancel(&self, id: &str) -> JobView {
        self.rt.block_on(self.op.cancel_job("acme", id)).unwrap()
    }

    pub fn submit(&self, origin: Origin, payload: serde_json::Value) -> Result<String, String> {
        self.submit_kind(origin, JobKind::Shell, payload)
    }

    /// Submits a job of `kind`; its id, or the edge's refusal.
    pub fn submit_kind(
        &self,
        origin: Origin,
        kind: JobKind,
        payload: serde_json::Value,
    ) -> Result<String, String> {
        let req = RawJobRequest {
            origin,
            kind,
            tier: 0,
            isolation: Isolation::None,
            arch: None,
            payload,
            idempotency_key: None,
        };
        self.rt
            .block_on(self.op.submit_raw_job("acme", &req))
            .map(|a| a.job_id)
            .map_err(|e| e.to_string())
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `oz0-node run --edge`, killed on drop.
pub struct Node {
    pub child: Option<Child>,
    pub dir: TempDir,
}

impl Node {
    pub fn start(edge: &Edge, tag: &str, extra: &[&str]) -> Node {
        Node::start_with(&node(), edge, tag, extra, &[("OZ0_MICROVM", "off")])
    }

    /// A node of binary `bin`, with `env` added to its environment.
    pub fn start_with(
        bin: &Path,
        edge: &Edge,
        tag: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Node {
        let dir = TempDir::new(tag);
        write_secret(&dir.join("token"), TOKEN);
        let child = Some(Node::spawn(&dir, bin, edge, tag, extra, env));
        Node { child, dir }
    }

    /// Starts the node again on the same data (after it was killed).
    pub fn restart(
        &mut self,
        bin: &Path,
        edge: &Edge,
        tag: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.child = Some(Node::spawn(&self.dir, bin, edge, tag, extra, env));
    }

    fn spawn(
        dir: &TempDir,
        bin: &Path,
        edge: &Edge,
        tag: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Child {
        let log = std::fs::File::create(dir.join("log")).unwrap();
        Command::new(bin)
            .args(["run", "--edge", &edge.url, "--tenant", "acme"])
            .arg("--edge-ca")
            .arg(&edge.ca)
            .arg("--enrolment-token-file")
            .arg(dir.join("token"))
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--work-root")
            .arg(dir.join("work"))
            .args(["--name", tag])
            .args(if extra.contains(&"--poll-ms") {
                &[][..]
            } else {
                &["--poll-ms", "200"][..]
            })
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    pub fn wait_log(&mut self, what: &str, secs: u64) {
        let until = Instant::now() + Duration::from_secs(secs);
        while !self.log().contains(what) {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "the node exited ({st}) before saying {what:?}:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < until,
                "the node did not say {what:?} within {secs}s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.as_ref().unwrap().id()).unwrap()
    }

    pub fn output(&self, job: &str, stream: &str) -> String {
        std::fs::read_to_string(self.dir.join("data/jobs").join(job).join(stream))
            .unwrap_or_default()
    }

    pub fn signal(&mut self, sig: &str) {
        let st = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Waits for the node to exit; its status code.
    pub fn wait_exit(&mut self, secs: u64) -> Option<i32> {
        let until = Instant::now() + Duration::from_secs(secs);
        let c = self.child.as_mut().unwrap();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                self.child = None;
                return st.code();
            }
            assert!(
                Instant::now() < until,
                "the node did not exit within {secs}s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Pids of processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(marker) {
                out.push(format!("{name}: {c}"));
            }
        }
    }
    out
}

pub fn wait_gone(marker: &str, secs: u64) {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < until, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fresh database on the run's PostgreSQL (`OZ0_EDGE_TEST_POSTGRES`, set
/// by `with-postgres.sh`), named after `tag` and this process; None when
/// the run has no server.
pub fn postgres_store(tag: &str) -> Option<String> {
    let base = std::env::var("OZ0_EDGE_TEST_POSTGRES")
        .ok()
        .filter(|b| !b.is_empty())?;
    let name = format!("oz0_{tag}_{}", std::process::id());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .expect("connect to OZ0_EDGE_TEST_POSTGRES");
        tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
    });
    let (head, query) = base
        .split_once('?')
        .map_or((base.as_str(), None), |(h, q)| (h, Some(q)));
    let slash = head.rfind('/').unwrap();
    Some(match query {
        Some(q) => format!("{}/{name}?{q}", &head[..slash]),
        None => format!("{}/{name}", &head[..slash]),
    })
}
