//! Benchmark: the wall time to run an image's command to its end, the
//! container path's start-up and teardown, against baselines measured in
//! the same rounds, alternating. Not a test: nothing here asserts a time.
//!
//! The image is one this benchmark builds (Debian's static busybox, its
//! entrypoint `/bin/true`), pushed to a registry on loopback and pulled by
//! digest once before the rounds. Rows:
//!
//! - `bwrap, image root`: bare bubblewrap with the unpacked rootfs's names
//!   bound at the top of its root, a new /proc and /dev and every
//!   namespace, running `/bin/true`: the floor any bubblewrap-based runtime
//!   stands on here.
//! - `oz0 tier1`: `oz0-node sandbox run --image … --work W` (the image
//!   already in the node's cache): the whole tier-1 wall in the image's root.
//! - `oz0 gvisor`: the same with `--oci-runtime gvisor` (where runsc is
//!   installed).
//! - `docker run`: `docker run --rm --network none` of the same image,
//!   loaded into the daemon with skopeo (where a Docker daemon answers this
//!   user: Debian's docker.io, started for the benchmark, the user in the
//!   docker group; a benchmark machine only).
//!
//! Run as the node's user (oz0-node refuses to run sandboxes as root), with
//! `docker-registry`, `skopeo` and `busybox-static` installed:
//!
//! ```text
//! OZ0_NODE_BIN=$(scripts/build-node --release) cargo bench -p oz0-node --bench oci_start [-- RUNS]
//! ```
//!
//! RUNS (default 30) rounds; each row's median and p90 are printed, with
//! its ratio to the bwrap floor and to Docker.
//!
//! A second table measures a real MCP server's first reply (the time from
//! start to its answer to `initialize` on stdin): the npm
//! `@modelcontextprotocol/server-filesystem` with the host's `node` and its
//! libraries in an image, run by `sandbox run --image` (tier 1 and gVisor)
//! and `docker run -i`, against the same server started directly on the
//! host (the floor: node's own start), RUNS / 3 rounds (at least 10).

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports, unused_macros)]
mod common;

mod shared;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::oci::{has_runsc, server_layer, tar, Registry, FS_RUN, SERVER_DIR};
use common::TempDir;
use shared::{median, p90};

/// Runs `cmd` to its end: how long it took, or why it failed.
fn time(cmd: &mut Command) -> Result<Duration, String> {
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    let d = t.elapsed();
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(d)
}

fn answers(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

struct Row {
    name: &'static str,
    cmd: Box<dyn Fn() -> Command>,
    times: Vec<Duration>,
}

impl Row {
    fn new(name: &'static str, cmd: impl Fn() -> Command + 'static) -> Row {
        Row {
            name,
            cmd: Box::new(cmd),
            times: Vec::new(),
        }
    }
}

/// What `sandbox run --image` needs: the node, its data folder, the work
/// folder, the image and its registry.
struct Oz0<'a> {
    node: &'a Path,
    data: &'a Path,
    work: &'a Path,
    image: &'a str,
    registry: String,
}

impl Oz0<'_> {
    /// The rows of `sandbox run --image` in tier 1 and, where runsc is
    /// installed, in gVisor.
    fn rows(&self) -> Vec<Row> {
        let mut rows = vec![Row::new("oz0 tier1", self.cmd("tier1"))];
        if has_runsc() {
            rows.push(Row::new("oz0 gvisor", self.cmd("gvisor")));
        } else {
            println!("oz0 gvisor: not measured: runsc is not installed (apt-get install runsc)");
        }
        rows
    }

    fn cmd(&self, runtime: &'static str) -> impl Fn() -> Command + 'static {
        let (node, data, work, image, host) = (
            self.node.to_path_buf(),
            self.data.to_path_buf(),
            self.work.to_path_buf(),
            self.image.to_string(),
            self.registry.clone(),
        );
        move || {
            let mut c = Command::new(&node);
            c.args(["--no-config", "sandbox", "run", "--data-dir"])
                .arg(&data)
                .arg("--work")
                .arg(&work)
                .args([
                    "--oci-registry",
                    &host,
                    "--oci-runtime",
                    runtime,
                    "--image",
                    &image,
                ]);
            c
        }
    }

    /// `oci pull` of the image into the node's cache: its rootfs.
    fn pull(&self) -> PathBuf {
        let out = Command::new(self.node)
            .args(["--no-config", "oci", "pull", "--json", "--data-dir"])
            .arg(self.data)
            .args(["--oci-registry", &self.registry, self.image])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        PathBuf::from(doc["rootfs"].as_str().unwrap())
    }
}

/// The row of `docker run ARGS… IMAGE` of the image `name@digest` loaded
/// into Docker, or none (and why, printed).
fn docker_row(
    reg: &Registry,
    name: &str,
    digest: &str,
    args: &'static [&'static str],
) -> Option<Row> {
    match docker_image(reg, name, digest) {
        Ok(tag) => Some(Row::new("docker run", move || {
            let mut c = Command::new("docker");
            c.arg("run").args(args).arg(&tag);
            c
        })),
        Err(why) => {
            println!("docker run ({name}): not measured: {why}");
            None
        }
    }
}

/// One run of each row first (caches warm, the image pulled), then `runs`
/// rounds, alternating, each timed by `how`.
fn measure(rows: &mut [Row], runs: usize, how: fn(&mut Command) -> Result<Duration, String>) {
    for r in rows.iter() {
        if let Err(e) = how(&mut (r.cmd)()) {
            panic!("{}: {e}", r.name);
        }
    }
    for _ in 0..runs {
        for r in rows.iter_mut() {
            r.times
                .push(how(&mut (r.cmd)()).unwrap_or_else(|e| panic!("{}: {e}", r.name)));
        }
    }
}

fn main() {
    let runs = shared::runs(30, 10);
    let (node, named) = shared::node_bin();
    let Some(reg) = Registry::start() else {
        eprintln!("oci_start: no registry (apt-get install docker-registry skopeo)");
        return;
    };
    let bb = std::fs::read("/bin/busybox").expect("/bin/busybox (apt-get install busybox-static)");
    let layer = tar(&[
        ("bin/", b'5', 0o755, b""),
        ("bin/busybox", b'0', 0o755, &bb),
        ("bin/true", b'2', 0o777, b"busybox"),
        ("bin/sh", b'2', 0o777, b"busybox"),
    ]);
    let run = r#"{"Entrypoint":["/bin/true"],"Env":["PATH=/bin"]}"#;
    let digest = reg.push_with("bench/true", &[layer], None, run);
    let image = format!("oci:{}/bench/true@{digest}", reg.host());
    let dir = TempDir::new("oci-bench");
    let (data, work) = (dir.join("data"), dir.join("work"));
    std::fs::create_dir_all(&work).unwrap();
    let oz0 = Oz0 {
        node: &node,
        data: &data,
        work: &work,
        image: &image,
        registry: reg.host(),
    };
    let rootfs = oz0.pull();

    // The image's names bound at the top of a fresh root (bubblewrap
    // cannot make /proc in a read-only root of its own), as tier 1 does.
    let mut binds: Vec<String> = Vec::new();
    for e in std::fs::read_dir(&rootfs).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        binds.extend([
            "--ro-bind".into(),
            e.path().display().to_string(),
            format!("/{name}"),
        ]);
    }
    let mut rows = vec![Row::new("bwrap, image root", move || {
        let mut c = Command::new("/usr/bin/bwrap");
        c.args(["--unshare-all", "--die-with-parent"])
            .args(&binds)
            .args(["--proc", "/proc", "--dev", "/dev", "/bin/true"]);
        c
    })];
    rows.extend(oz0.rows());
    rows.extend(docker_row(
        &reg,
        "bench/true",
        &digest,
        &["--rm", "--network", "none"],
    ));
    measure(&mut rows, runs, time);
    println!(
        "oci_start: {runs} rounds; node {}{}",
        node.display(),
        if named {
            ""
        } else {
            " (cargo's dynamically linked build: set OZ0_NODE_BIN for the shipped one)"
        }
    );
    print_rows(&mut rows);
    mcp_rows(&node, &reg, &dir, (runs / 3).max(10));
}

/// Prints each row's median and p90, its ratio to the first row and to
/// the row named `docker run`.
fn print_rows(rows: &mut [Row]) {
    let medians: Vec<(&str, Duration, Duration)> = rows
        .iter_mut()
        .map(|r| (r.name, median(&mut r.times), p90(&mut r.times)))
        .collect();
    let floor = medians[0].1;
    let docker_m = medians
        .iter()
        .find(|(n, _, _)| *n == "docker run")
        .map(|m| m.1);
    for (name, m, p) in &medians {
        let vs_docker = docker_m
            .map(|d| format!(", {:.2}× Docker", m.as_secs_f64() / d.as_secs_f64()))
            .unwrap_or_default();
        println!(
            "{name:<18} median {:>7.1} ms  p90 {:>7.1} ms  {:.2}× the first row{vs_docker}",
            m.as_secs_f64() * 1e3,
            p.as_secs_f64() * 1e3,
            m.as_secs_f64() / floor.as_secs_f64()
        );
    }
}

/// The MCP `initialize` request a first reply answers.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"oz0-bench","version":"1"}}}"#;

/// Starts `cmd`, sends `initialize` on its stdin and waits for the first
/// line on its stdout: how long that took; then closes its stdin (an MCP
/// server ends at EOF) and waits for it to end.
fn first_reply(cmd: &mut Command) -> Result<Duration, String> {
    let t = Instant::now();
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{INITIALIZE}").map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let d = t.elapsed();
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if !line.contains("\"result\"") {
        return Err(format!("{cmd:?} answered {line:?}"));
    }
    Ok(d)
}

/// The second table: the MCP server's first reply, directly on the host,
/// in tier 1, in gVisor and in Docker.
fn mcp_rows(node: &Path, reg: &Registry, dir: &TempDir, runs: usize) {
    let layer = match server_layer(dir) {
        Ok(l) => l,
        Err(why) => return println!("first MCP reply: not measured: {why}"),
    };
    let digest = reg.push_with("bench/fs-mcp", &[layer], None, FS_RUN);
    let image = format!("oci:{}/bench/fs-mcp@{digest}", reg.host());
    let (data, work) = (dir.join("data"), dir.join("mcp-work"));
    std::fs::create_dir_all(&work).unwrap();
    let oz0 = Oz0 {
        node,
        data: &data,
        work: &work,
        image: &image,
        registry: reg.host(),
    };
    let direct_work = work.clone();
    let mut rows = vec![Row::new("direct (host node)", move || {
        let mut c = Command::new("node");
        c.arg(format!("{SERVER_DIR}/dist/index.js"))
            .arg(&direct_work);
        c
    })];
    rows.extend(oz0.rows());
    if has_runsc() {
        rows.push(Row::new("runsc, bare", bare_runsc(&oz0.pull(), dir, &work)));
    }
    rows.extend(docker_row(
        reg,
        "bench/fs-mcp",
        &digest,
        &["-i", "--rm", "--network", "none"],
    ));
    measure(&mut rows, runs, first_reply);
    println!("first MCP reply (server-filesystem, initialize): {runs} rounds");
    print_rows(&mut rows);
}

/// `runsc run` of the server's image with a bundle of the benchmark's own
/// (the rootfs from the node's cache, `/work` bound, no network): gVisor's
/// own cost here, with nothing of the node's.
fn bare_runsc(rootfs: &Path, dir: &TempDir, work: &Path) -> impl Fn() -> Command + 'static {
    let bundle = dir.join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false, "user": {"uid": 0, "gid": 0},
            "args": ["/usr/bin/node", "/app/dist/index.js", "/work"],
            "env": ["PATH=/usr/bin:/bin", "NODE_ENV=production", "HOME=/tmp"],
            "cwd": "/work",
        },
        "root": {"path": rootfs, "readonly": true},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/work", "type": "bind", "source": work, "options": ["rbind", "rw"]},
        ],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]},
    });
    std::fs::write(bundle.join("config.json"), config.to_string()).unwrap();
    let state = dir.join("runsc-state");
    let n = std::sync::atomic::AtomicU32::new(0);
    move || {
        let id = format!(
            "oz0-bench-{}-{}",
            std::process::id(),
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let mut c = Command::new("runsc");
        c.args(["--rootless", "--network=none", "--ignore-cgroups", "--root"])
            .arg(&state)
            .args(["run", "--bundle"])
            .arg(&bundle)
            .arg(id);
        c
    }
}

/// The image loaded into the Docker daemon from the registry, as a tag; or
/// why not.
fn docker_image(reg: &Registry, name: &str, digest: &str) -> Result<String, String> {
    if !answers(Command::new("docker").arg("info")) {
        return Err(
            "no Docker daemon answers this user (start dockerd; add the user to the docker group)"
                .into(),
        );
    }
    let tag = format!("oz0-{name}:latest");
    let out = Command::new("skopeo")
        .args([
            "copy",
            "--quiet",
            "--insecure-policy",
            "--src-tls-verify=false",
        ])
        .arg(format!("docker://{}/{name}@{digest}", reg.host()))
        .arg(format!("docker-daemon:{tag}"))
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "skopeo could not load the image into Docker: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(tag)
}
