//! The eight checks (see the parent module).

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::{Cancel, Ended};
use oz0_policy::{EnvVar, Limits};

use super::{read_report, CheckResult, Ctx, CANARY};

/// Whether a probe holding in a run still beats in `beat` (the file it
/// rewrites every 50 ms while alive), looked at after the run ended: a
/// process is a heartbeat, never a pid, since a run's pids may not be the
/// host's.
fn beating(beat: &Path) -> bool {
    std::thread::sleep(Duration::from_millis(300));
    let before = fs::read(beat).ok();
    std::thread::sleep(Duration::from_millis(300));
    before.is_some() && fs::read(beat).ok() != before
}

/// Waits up to ten seconds for every file of `paths` to exist.
fn wait_for(paths: &[&Path]) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if paths.iter().all(|p| p.exists()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// A cancel handle for a run, and the end that fires it.
fn cancel_pair() -> Result<(Cancel, UnixStream), String> {
    let (r, w) = UnixStream::pair().map_err(|e| format!("cannot make a cancel channel: {e}"))?;
    Ok((Cancel(OwnedFd::from(r)), w))
}

// --- launch -----------------------------------------------------------------

pub(super) fn launch(c: &mut Ctx) -> CheckResult {
    let work = c.dir("launch")?;
    let probe = shell_quote(&c.cfg.probe);
    // The first process writes, starts a child in the background (which
    // starts one more in a process group of its own), waits until both
    // beat, and exits.
    let script = format!(
        "echo ok > launched; {probe} sandbox probe --no-syscalls --out bg.json --beat bg.beat --detach detached.json --hold-ms 20000 >/dev/null 2>&1 & \
         i=0; while {{ [ ! -e bg.beat ] || [ ! -e detached.json.beat ]; }} && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; exit 0"
    );
    let o = c.launch(
        c.request(&work, vec!["/bin/sh".into(), "-c".into(), script]),
        None,
    )?;
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
    let beats = [work.join("bg.beat"), work.join("detached.json.beat")];
    if !beats.iter().all(|b| b.exists()) {
        return Err(
            "the processes it started did not run (the probe could not start in the sandbox)"
                .into(),
        );
    }
    let left: Vec<&str> = [
        ("its child", &beats[0]),
        ("the one in a process group of its own", &beats[1]),
    ]
    .into_iter()
    .filter(|(_, b)| beating(b))
    .map(|(what, _)| what)
    .collect();
    if !left.is_empty() {
        return Err(format!(
            "processes it started outlived it ({})",
            left.join(" and ")
        ));
    }
    Ok("wrote its work directory; the processes it started ended with it, one that had left for a process group of its own too".into())
}

/// `s` as one word for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

// --- files ------------------------------------------------------------------

pub(super) fn files(c: &mut Ctx) -> CheckResult {
    let work = c.dir("files")?;
    let outside = c.dir("outside")?;
    let out = work.join("r.json");
    let standin = c.standin.display().to_string();
    let standin_key = format!("{standin}/identity/node.key");
    let outside_file = outside.join("written").display().to_string();
    let mut args = vec![
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
    c.launch(c.request(&work, c.probe_cmd(&out, &args)), None)?;
    let r = read_report(&out)?;
    let reached = |section: &str, key: &str| r[section][key] == "ok";
    if reached("write", &outside_file) || Path::new(&outside_file).exists() {
        return Err(format!(
            "a write outside the work directory ({outside_file}) succeeded"
        ));
    }
    if reached("list", &standin) || reached("read", &standin_key) {
        return Err(format!(
            "the stand-in data directory {standin} could be listed or its key read"
        ));
    }
    match (&real, &real_key) {
        (Some(d), Some(k)) => {
            if reached("list", d) || reached("read", k) {
                return Err(format!(
                    "the node's data directory {d} could be listed or its key read"
                ));
            }
            Ok(format!("a write outside refused; the node's data directory {d}: listing refused, reading identity/node.key refused; the stand-in too"))
        }
        _ => Ok("a write outside refused; a stand-in data directory: listing and reading its key refused (the node has no data directory yet)".into()),
    }
}

// --- egress -----------------------------------------------------------------

/// A loopback HTTP server answering 200 to everything, until dropped. It
/// counts the connections it accepted.
struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    fn start() -> Result<Server, String> {
        let l = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("cannot listen on loopback: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
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

pub(super) fn egress(c: &mut Ctx) -> CheckResult {
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
    let mut req = c.request(&work, c.probe_cmd(&out, &args));
    req.allow = vec![a.clone()];
    req.forward = vec![forwarded.port];
    c.launch(req, None)?;
    let r = read_report(&out)?;
    // Each listener must have seen exactly the one connection the proxy
    // made for it.
    // (A direct "connect ok" alone may have met something of the run's own
    // on its loopback, such as a bridge whose port equals a host port.)
    for (t, s) in [(&a, &allowed), (&f, &forwarded)] {
        let n = s.accepted.load(Ordering::SeqCst);
        if n > 1 || (r["connect"][t] == "ok" && n != 1) {
            return Err(format!(
                "a direct connection to the host's {t} succeeded ({n} connections reached it)"
            ));
        }
    }
    let get = |k: &str| r["proxy_get"][k].clone();
    for (key, want, what) in [
        (format!("auth {ua}"), 200, format!("the allowed host {a}")),
        (
            format!("auth {uf}"),
            200,
            format!("the forwarded port {}", forwarded.port),
        ),
    ] {
        if get(&key) != want {
            return Err(format!(
                "{what} did not answer through the proxy: {}",
                get(&key)
            ));
        }
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

pub(super) fn ingress(c: &mut Ctx) -> CheckResult {
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let work = c.dir("ingress")?;
    let out = work.join("r.json");
    let ps = port.to_string();
    let req = c.request(
        &work,
        c.probe_cmd(&out, &["--listen", &ps, "--hold-ms", "20000"]),
    );
    let (cancel, mut fire) = cancel_pair()?;
    let c = &*c;
    let (reached, run) = std::thread::scope(|s| {
        let h = s.spawn(|| c.launch(req, Some(cancel)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.exists() && Instant::now() < deadline && !h.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let reached =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
                .is_ok();
        let _ = fire.write_all(b"x");
        let run = h
            .join()
            .unwrap_or_else(|_| Err("the listening run panicked".to_string()));
        (reached, run)
    });
    let o = run?;
    let r = read_report(&out)?;
    if reached {
        return Err(format!(
            "the host reached a listener inside the sandbox on 127.0.0.1:{port}"
        ));
    }
    if o.ended != Ended::Cancelled {
        return Err("the listening run did not stay up for the check".into());
    }
    if r["listen"] == "ok" {
        Ok(format!(
            "a process in the sandbox listened on 127.0.0.1:{port}; the host could not reach it"
        ))
    } else {
        Ok(format!(
            "the sandbox refused a process in it a listener on 127.0.0.1:{port} ({}); the host reached nothing there",
            r["listen"].as_str().unwrap_or("refused")
        ))
    }
}

// --- job_limits ---------------------------------------------------------------

pub(super) fn job_limits(c: &mut Ctx) -> CheckResult {
    // Closing the job kills its processes: a run cancelled while it holds
    // a child in its group and one in a group of its own.
    let work = c.dir("close")?;
    let beats = [work.join("bg.beat"), work.join("detached.json.beat")];
    let probe = shell_quote(&c.cfg.probe);
    let script = format!(
        "{probe} sandbox probe --no-syscalls --out bg.json --beat bg.beat --detach detached.json --hold-ms 20000 >/dev/null 2>&1 & wait"
    );
    let (cancel, mut fire) = cancel_pair()?;
    let req = c.request(&work, vec!["/bin/sh".into(), "-c".into(), script]);
    let c2 = &*c;
    let run = std::thread::scope(|s| {
        let h = s.spawn(|| c2.launch(req, Some(cancel)));
        let started = wait_for(&[&beats[0], &beats[1]]);
        let _ = fire.write_all(b"x");
        let run = h
            .join()
            .unwrap_or_else(|_| Err("the run panicked".to_string()));
        run.map(|o| (o, started))
    });
    let (o, started) = run?;
    if !started {
        return Err("the run's processes did not start".into());
    }
    if o.ended != Ended::Cancelled {
        return Err("the run ended before it was closed".into());
    }
    if beats.iter().any(|b| beating(b)) {
        return Err("closing the run left its processes running".into());
    }
    let closed = "closing the run killed its processes, one in a process group of its own";
    // Processes: 20 children under a limit of 8.
    let work = c.dir("procs")?;
    let out = work.join("r.json");
    let mut req = c.request(&work, c.probe_cmd(&out, &["--spawn", "20"]));
    req.limits = Limits {
        processes: Some(8),
        ..Default::default()
    };
    let o = c
        .launch(req, None)
        .map_err(|e| format!("{closed}; but a run limited to 8 processes was refused: {e}"))?;
    let r = read_report(&out)?;
    let started = r["spawned"]
        .as_u64()
        .ok_or("the probe did not report its children")?;
    if started == 0 {
        return Err(format!(
            "{closed}; but no process started under the process limit (exit {})",
            o.exit_code
        ));
    }
    if started > 6 {
        return Err(format!(
            "{closed}; but {started} of 20 processes started under a limit of 8 (at most 6 may)"
        ));
    }
    // Memory: 512 MiB under a limit of 256 MiB.
    let work = c.dir("mem")?;
    let out = work.join("r.json");
    let mut req = c.request(&work, c.probe_cmd(&out, &["--alloc", "512"]));
    req.limits = Limits {
        memory_mib: Some(256),
        ..Default::default()
    };
    let o = c
        .launch(req, None)
        .map_err(|e| format!("{closed}; but a run limited to 256 MiB was refused: {e}"))?;
    if read_report(&out).is_ok_and(|r| r["alloc"] == "ok") {
        return Err(format!(
            "{closed}; but 512 MiB were allocated and touched under a limit of 256 MiB"
        ));
    }
    Ok(format!(
        "{closed}; {started} of 20 processes started under a limit of 8; 512 MiB under 256 MiB refused (exit {})",
        o.exit_code
    ))
}

// --- fail_closed --------------------------------------------------------------

pub(super) fn fail_closed(c: &mut Ctx) -> CheckResult {
    let work = c.dir("failclosed")?;
    let req = c.request(
        &work,
        vec!["/bin/sh".into(), "-c".into(), "echo ran > ran".into()],
    );
    let spec = super::Ctx::spec(req)?;
    let r = c.cfg.runs.run_unconfinable(&spec);
    if work.join("ran").exists() {
        return Err("a process whose sandbox could not be applied ran anyway".into());
    }
    Ok(match r {
        Err(e) => format!(
            "a run whose sandbox could not be applied was refused ({e}); its command never ran"
        ),
        Ok(o) => format!(
            "a run whose sandbox could not be applied ended with {} and its command never ran",
            o.exit_code
        ),
    })
}

// --- protected_paths ----------------------------------------------------------

pub(super) fn protected_paths(c: &mut Ctx) -> CheckResult {
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

/// Variables a run may have that it was not given: what the wall adds
/// (PATH, HOME, TMPDIR, the proxy's), the shell's PWD, and the text
/// encoding macOS's CoreFoundation adds to a process it starts.
const ADDED: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "PWD",
    "__CF_USER_TEXT_ENCODING",
];

pub(super) fn environment(c: &mut Ctx) -> CheckResult {
    let server = Server::start()?;
    let work = c.dir("env")?;
    let out = work.join("r.json");
    let a = format!("127.0.0.1:{}", server.port);
    let ua = format!("http://{a}/");
    let mut req = c.request(&work, c.probe_cmd(&out, &["--env", "--proxy-get", &ua]));
    req.allow = vec![a];
    req.env = vec![EnvVar::new("OZ0SELFTEST_GIVEN", "given").map_err(|e| e.to_string())?];
    c.launch(req, None)?;
    let r = read_report(&out)?;
    let env = r["env"]
        .as_object()
        .ok_or("the probe reported no environment")?;
    if let Some(k) = env
        .keys()
        .find(|k| k.to_ascii_uppercase().starts_with("OZ0_"))
    {
        return Err(format!(
            "the node's variable {k} reached the run (the node has {CANARY})"
        ));
    }
    if env.get("OZ0SELFTEST_GIVEN").and_then(|v| v.as_str()) != Some("given") {
        return Err("the caller's variable did not reach the run".into());
    }
    for need in &ADDED[..9] {
        if !env.contains_key(*need) {
            return Err(format!("{need} is missing"));
        }
    }
    if env.contains_key("NO_PROXY") || env.contains_key("no_proxy") {
        return Err("NO_PROXY is set".into());
    }
    if let Some(k) = env
        .keys()
        .find(|k| k.as_str() != "OZ0SELFTEST_GIVEN" && !ADDED.contains(&k.as_str()))
    {
        return Err(format!("{k} reached the run without being given"));
    }
    if r["proxy_get"][format!("auth {ua}")] != 200 {
        return Err("the proxy variables do not carry the run's token".into());
    }
    Ok("the caller's variable, PATH, HOME, TMPDIR and the proxy's with the run's token; no OZ0_ variable of the node".into())
}
