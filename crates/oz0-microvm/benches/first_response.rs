//! Time from `sandbox vm` start to the server's first MCP response (the
//! `initialize` result), against a baseline measured in the same run: the
//! same MCP server started directly as a host process. Two servers: the
//! node's own `mcp-test-server` (base guest), and a real server of the
//! official Python SDK (`tests/mcp_server.py`, guest image `python` from
//! `scripts/build-test-guest-python.sh`; 2 VM boots by default).
//!
//! Backend: the QEMU test backend (`OZ0_MICROVM_TEST_BACKEND=qemu-tcg`,
//! software emulation, no KVM), guest from `OZ0_MICROVM_TEST_GUEST`
//! (default `/tmp/oz0-guest`, built by `scripts/build-test-guest.sh`).
//! Prints the median of a few runs (`OZ0_BENCH_RUNS`, default 3 VM boots and
//! 10 host starts) and the ratio; asserts nothing about time. Without QEMU,
//! the guest or bubblewrap, prints the baseline and why the VM part did not
//! run. Run as root, the node runs as the unprivileged user `oz0test`.
//!
//! `cargo bench -p oz0-microvm --bench first_response`

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/stage/mod.rs"]
mod stage;
use stage::Stage;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"oz0-bench","version":"0"}}}"#;

fn guest_dir() -> PathBuf {
    std::env::var_os("OZ0_MICROVM_TEST_GUEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oz0-guest"))
}

/// Why the VM part cannot run here, if it cannot.
fn not_ready() -> Option<String> {
    let g = guest_dir();
    if !Path::new("/usr/bin/qemu-system-x86_64").exists() {
        return Some("qemu-system-x86_64 is not installed".into());
    }
    if !g.join("initrd.cpio").exists() {
        return Some(format!(
            "no test guest in {} (run scripts/build-test-guest.sh {})",
            g.display(),
            g.display()
        ));
    }
    if Command::new("bwrap").arg("--version").output().is_err() {
        return Some("bubblewrap is not installed".into());
    }
    None
}

/// The test MCP server as a plain host process.
fn host_server(st: &Stage) -> Command {
    let mut c = Command::new(&st.exe);
    c.arg("mcp-test-server");
    c
}

/// `sandbox vm … OPTS -- SERVER` (as `oz0test` when root).
fn vm_server(st: &Stage, opts: &[&str], server: &[&str]) -> Command {
    let mut args = st.vm_args();
    args.extend(opts.iter().map(|s| s.to_string()));
    args.push("--".into());
    args.extend(server.iter().map(|s| s.to_string()));
    let mut c = if rustix::process::getuid().is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=oz0test", "--regid=oz0test", "--init-groups", "--"]);
        c.args(&args);
        c
    } else {
        let mut c = Command::new(&args[0]);
        c.args(&args[1..]);
        c
    };
    c.env_clear()
        .env("HOME", &st.dir)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("OZ0_MICROVM_TEST_BACKEND", "qemu-tcg")
        .env("OZ0_MICROVM_TEST_GUEST", guest_dir());
    c
}

/// Starts `cmd`, sends `initialize`, and returns the time to the first line
/// of its answer; then closes its input and waits for it to end.
fn first_response(mut cmd: Command) -> Result<Duration, String> {
    let t = Instant::now();
    let mut child: Child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start: {e}"))?;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{INITIALIZE}").map_err(|e| format!("write: {e}"))?;
    stdin.flush().map_err(|e| format!("flush: {e}"))?;
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let read = out.read_line(&mut line);
    let took = t.elapsed();
    drop(stdin);
    let ok = matches!(read, Ok(n) if n > 0) && line.contains("\"result\"");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("did not end within 60 s after its input closed".into());
            }
        }
    }
    if ok {
        Ok(took)
    } else {
        Err(format!("no initialize result: {line:?}"))
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn report(label: &str, v: &[Duration]) -> Duration {
    let m = median(v.to_vec());
    let min = v.iter().min().unwrap();
    let max = v.iter().max().unwrap();
    println!(
        "{label}: median {:.1} ms over {} runs (min {:.1} ms, max {:.1} ms)",
        ms(m),
        v.len(),
        ms(*min),
        ms(*max)
    );
    m
}

fn main() {
    let runs: Option<usize> = std::env::var("OZ0_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0);
    let st = stage::stage("vmbench", env!("CARGO_BIN_EXE_oz0-vm-testnode"));

    let host: Vec<Duration> = (0..runs.unwrap_or(10))
        .map(|_| first_response(host_server(&st)).expect("host server"))
        .collect();
    println!("first MCP response (initialize result), test MCP server `mcp-test-server`");
    let base = report("  host process (baseline)", &host);

    if let Some(why) = not_ready() {
        println!("  sandbox vm: not measured: {why}");
        return;
    }
    let own = ["/oz0/oz0-node", "mcp-test-server"];
    let Some(vm) = measure(runs.unwrap_or(3), || {
        vm_server(&st, &["--memory", "256"], &own)
    }) else {
        return;
    };
    report_vm(
        "  sandbox vm, qemu (software emulation, TCG; no KVM), monitor in tier 1",
        &vm,
        base,
    );

    // A real MCP server of the official Python SDK (tests/mcp_server.py):
    // CPython on the host against CPython in the guest's `python` image.
    println!("first MCP response, Python SDK server `tests/mcp_server.py`");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_server.py");
    let host_py = || {
        let mut c = Command::new("python3");
        c.arg(&script);
        c
    };
    if !guest_dir().join("initrd-python.cpio").exists() {
        println!("  not measured: no python image (scripts/build-test-guest-python.sh)");
        return;
    }
    let Some(host) = measure(runs.unwrap_or(3), host_py) else {
        return;
    };
    let base = report("  host process, python3 (baseline)", &host);
    std::fs::copy(&script, st.dir.join("work/mcp_server.py")).expect("stage the server");
    let py = ["python3", "/work/mcp_server.py"];
    let opts = ["--image", "python", "--memory", "512"];
    let Some(vm) = measure(runs.unwrap_or(2), || vm_server(&st, &opts, &py)) else {
        return;
    };
    report_vm(
        "  sandbox vm --image python, qemu (software emulation, TCG; no KVM), monitor in tier 1",
        &vm,
        base,
    );
}

/// Reports the VM runs and their ratio to the host baseline's median.
fn report_vm(label: &str, vm: &[Duration], base: Duration) {
    let m = report(label, vm);
    println!(
        "  ratio sandbox vm / host process: {:.0}x",
        m.as_secs_f64() / base.as_secs_f64().max(1e-9)
    );
}

/// `runs` first responses of the server `cmd()` starts; `None` (said why)
/// when one fails.
fn measure(runs: usize, cmd: impl Fn() -> Command) -> Option<Vec<Duration>> {
    let mut v = Vec::new();
    for i in 0..runs {
        match first_response(cmd()) {
            Ok(d) => v.push(d),
            Err(e) => {
                println!("  run {} failed: {e}", i + 1);
                return None;
            }
        }
    }
    Some(v)
}
