//! What every platform's self-test shares: the loopback server the egress
//! checks reach, and the judgements of `egress`, `protected_paths` and
//! `environment` from what the probe reported and the host saw. Every
//! platform's checks ([`super`]) and Linux's proofs of each layer use
//! these, so a property means the same on every platform.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oz0_policy::describe::SANDBOX_VAR;
use serde_json::Value;

use super::Failed;

/// A loopback HTTP server answering 200 to everything, until dropped. It
/// counts the connections it accepted.
pub struct Server {
    /// Its port on 127.0.0.1.
    pub port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
}

impl Server {
    /// Starts one on a free port.
    pub fn start() -> Result<Server, Failed> {
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

    /// Waits until the connections waiting to be accepted are (the accept
    /// loop's pause, and a little more).
    fn settle(&self) {
        std::thread::sleep(Duration::from_millis(30));
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// `PROBE sandbox probe --no-syscalls --out OUT ARGS…`: the witness run
/// inside a sandbox, `probe` being the node binary as the run names it.
pub fn probe_cmd(probe: &str, out: &Path, args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [probe, "sandbox", "probe", "--no-syscalls", "--out"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.push(out.display().to_string());
    v.extend(args.iter().map(|s| s.to_string()));
    v
}

/// The probe's JSON report in `p`.
pub fn read_report(p: &Path) -> Result<Value, Failed> {
    let text = fs::read_to_string(p).map_err(|e| format!("the probe wrote no report ({e})"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad probe report: {e}").into())
}

/// What the files check tries inside a run, and its verdict: a write to a
/// file outside the work directory, a listing of the stand-in data
/// directory and a read of its key, and the same of the node's real data
/// directory when it has one.
pub struct Files {
    /// The file outside the work directory the run tries to write.
    pub outside_file: String,
    /// The stand-in data directory.
    pub standin: String,
    /// Its key.
    pub standin_key: String,
    /// The node's data directory and its key, when it exists.
    pub real: Option<(String, String)>,
}

impl Files {
    /// The targets for a run whose outside file is `outside_file`.
    pub fn new(outside_file: &Path, standin: &Path, data_dir: Option<&Path>) -> Files {
        let key = |d: &str| format!("{d}/identity/node.key");
        let standin = standin.display().to_string();
        Files {
            outside_file: outside_file.display().to_string(),
            standin_key: key(&standin),
            standin,
            real: data_dir.filter(|d| d.exists()).map(|d| {
                let d = d.display().to_string();
                (d.clone(), key(&d))
            }),
        }
    }

    /// What the probe tries: `(report section, path)`.
    pub fn targets(&self) -> Vec<(&'static str, &str)> {
        let mut t = vec![
            ("write", self.outside_file.as_str()),
            ("list", self.standin.as_str()),
            ("read", self.standin_key.as_str()),
        ];
        if let Some((d, k)) = &self.real {
            t.extend([("list", d.as_str()), ("read", k.as_str())]);
        }
        t
    }

    /// The probe's arguments for [`Files::targets`].
    pub fn probe_args(&self) -> Vec<String> {
        self.targets()
            .into_iter()
            .flat_map(|(section, p)| [format!("--{section}"), p.to_string()])
            .collect()
    }

    /// The verdict on the probe's report `r`: Err naming what was
    /// reached (the stand-in's prefixed with `layer`, the layer that must
    /// hide it), else what was refused of the data directories.
    pub fn judge(&self, r: &Value, layer: &str) -> Result<String, Failed> {
        let reached = |section: &str, key: &str| r[section][key] == "ok";
        let f = &self.outside_file;
        if reached("write", f) || Path::new(f).exists() {
            return Err(format!("a write outside the work directory ({f}) succeeded").into());
        }
        if reached("list", &self.standin) || reached("read", &self.standin_key) {
            return Err(format!(
                "{layer}the stand-in data directory {} could be listed or its key read",
                self.standin
            )
            .into());
        }
        match &self.real {
            Some((d, k)) => {
                if reached("list", d) || reached("read", k) {
                    return Err(format!(
                        "the node's data directory {d} could be listed or its key read"
                    ).into());
                }
                Ok(format!("the node's data directory {d}: listing refused, reading identity/node.key refused; the stand-in too"))
            }
            None => Ok("a stand-in data directory: listing and reading its key refused (the node has no data directory yet)".into()),
        }
    }
}

/// The egress check's probe arguments and their judgement: direct
/// connections to an allowed host's and a forwarded port's listeners
/// refused, both reached through the proxy, 407 without the token, 403 for
/// a name the allowlist does not name.
pub struct Egress {
    /// The allowed host's listener.
    pub allowed: Server,
    /// The forwarded port's listener.
    pub forwarded: Server,
}

/// A name under `.invalid`: refused by the proxy before any lookup.
pub const UNLISTED: &str = "http://oz0-selftest.invalid/";

impl Egress {
    /// Starts both listeners.
    pub fn start() -> Result<Egress, Failed> {
        Ok(Egress {
            allowed: Server::start()?,
            forwarded: Server::start()?,
        })
    }

    /// `127.0.0.1:PORT` of the allowed host (the run's `--allow`).
    pub fn allow(&self) -> String {
        format!("127.0.0.1:{}", self.allowed.port)
    }

    /// The probe's arguments.
    pub fn probe_args(&self) -> Vec<String> {
        let (a, f) = (self.allow(), format!("127.0.0.1:{}", self.forwarded.port));
        [
            "--connect",
            &a,
            "--connect",
            &f,
            "--proxy-get",
            &format!("http://{a}/"),
            "--proxy-get",
            &format!("http://{f}/"),
            "--proxy-get-noauth",
            &format!("http://{a}/"),
            "--proxy-get",
            UNLISTED,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// What the probe's report `r` and the listeners show.
    pub fn judge(&self, r: &Value) -> Result<String, Failed> {
        let (a, f) = (self.allow(), format!("127.0.0.1:{}", self.forwarded.port));
        let (ua, uf) = (format!("http://{a}/"), format!("http://{f}/"));
        // Each listener must have seen exactly the one connection the proxy
        // made for it, and answered it. (A direct "connect ok" alone may
        // have met something of the run's own on its loopback, such as a
        // bridge whose port equals a host port.)
        for (t, s) in [(&a, &self.allowed), (&f, &self.forwarded)] {
            if r["connect"][t.as_str()] == "ok" {
                // A connection the run made may wait in the listener's
                // queue a moment after the run ended.
                s.settle();
            }
            let n = s.accepted();
            let proxied = r["proxy_get"][format!("auth http://{t}/")] == 200;
            if n > 1 || (r["connect"][t.as_str()] == "ok" && (n != 1 || !proxied)) {
                return Err(format!(
                    "a direct connection to the host's {t} succeeded ({n} connections reached it)"
                )
                .into());
            }
        }
        let get = |k: &str| r["proxy_get"][k].clone();
        for (key, what) in [
            (format!("auth {ua}"), format!("the allowed host {a}")),
            (
                format!("auth {uf}"),
                format!("the forwarded port {}", self.forwarded.port),
            ),
        ] {
            if get(&key) != 200 {
                return Err(
                    format!("{what} did not answer through the proxy: {}", get(&key)).into(),
                );
            }
        }
        if get(&format!("noauth {ua}")) != 407 {
            return Err(format!(
                "the proxy answered {} without the run's token (407 expected)",
                get(&format!("noauth {ua}"))
            )
            .into());
        }
        if get(&format!("auth {UNLISTED}")) != 403 {
            return Err(format!(
                "a host the allowlist does not name got {} (403 expected)",
                get(&format!("auth {UNLISTED}"))
            )
            .into());
        }
        Ok(format!("direct connections to {a} and the forwarded port refused; through the proxy {a} and the forwarded port answer; 407 without the token; 403 for a name the allowlist does not name"))
    }
}

/// Makes a repository's `.git` in `work` for the protected-paths check: a
/// hook, a config, the objects' info folder.
pub fn prepare_git(work: &Path) -> Result<(), Failed> {
    let git = work.join(".git");
    let failed =
        |p: &Path, e: std::io::Error| Failed::from(format!("cannot make {}: {e}", p.display()));
    for d in ["hooks", "objects/info"] {
        let p = git.join(d);
        fs::create_dir_all(&p).map_err(|e| failed(&p, e))?;
    }
    for (f, text) in [("hooks/pre-commit", "#!/bin/sh\n"), ("config", "[core]\n")] {
        let p = git.join(f);
        fs::write(&p, text).map_err(|e| failed(&p, e))?;
    }
    Ok(())
}

/// The protected-paths check's verdict from the work folder the probe's
/// `--try-git` ran in (its `results`: the word of each attempt that
/// succeeded).
pub fn judge_protected(work: &Path) -> Result<String, Failed> {
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

/// The variable the environment check gives a run.
pub const GIVEN: (&str, &str) = ("OZ0SELFTEST_GIVEN", "given");

/// What the system a run starts on needs in its environment: `PATH`,
/// `HOME` and `TMPDIR` (on Windows `PATH`, `TEMP` and `TMP`).
#[cfg(unix)]
const SYSTEM_NEEDED: &[&str] = &["PATH", "HOME", "TMPDIR"];
/// See the Unix spelling.
#[cfg(not(unix))]
const SYSTEM_NEEDED: &[&str] = &["PATH", "TEMP", "TMP"];

/// What a run needs besides what it was given: [`SYSTEM_NEEDED`], and the
/// proxy's variables the sandbox sets (`oz0_policy::env::PROXY_VARS` but
/// `NO_PROXY`, which a run must not have).
fn needed() -> impl Iterator<Item = &'static str> {
    SYSTEM_NEEDED.iter().copied().chain(
        oz0_policy::env::PROXY_VARS
            .iter()
            .copied()
            .filter(|v| !v.eq_ignore_ascii_case("no_proxy")),
    )
}

/// The environment check's verdict from the probe's report `r` of a run
/// given [`GIVEN`] with egress to `allowed_url`: the given variable, what
/// its system needs (`PATH`, `HOME`, `TMPDIR`; on Windows `PATH`, `TEMP`,
/// `TMP`), the proxy's variables with the run's token, [`SANDBOX_VAR`]
/// telling it tier 1, no other `OZ0_` variable, and nothing else but `PWD`
/// and the platform's `also` (what its system adds to a process it starts).
pub fn judge_environment(r: &Value, allowed_url: &str, also: &[&str]) -> Result<String, Failed> {
    let env = r["env"]
        .as_object()
        .ok_or("the probe reported no environment")?;
    if let Some(k) = env
        .keys()
        .find(|k| k.to_ascii_uppercase().starts_with("OZ0_") && *k != SANDBOX_VAR)
    {
        return Err(format!("the node's variable {k} reached the run").into());
    }
    if env.get(GIVEN.0).and_then(|v| v.as_str()) != Some(GIVEN.1) {
        return Err("the caller's variable did not reach the run".into());
    }
    if let Some(need) = needed().find(|n| !env.contains_key(*n)) {
        return Err(format!("{need} is missing").into());
    }
    if env.contains_key("NO_PROXY") || env.contains_key("no_proxy") {
        return Err("NO_PROXY is set".into());
    }
    if let Some(k) = env.keys().find(|k| {
        let k = k.as_str();
        k != GIVEN.0
            && k != "PWD"
            && k != SANDBOX_VAR
            && !needed().any(|n| n == k)
            && !also.contains(&k)
    }) {
        return Err(format!("{k} reached the run without being given").into());
    }
    match env.get(SANDBOX_VAR).and_then(|v| v.as_str()) {
        Some(v) if v.starts_with("tier=1;wall=") => {}
        Some(v) => {
            return Err(format!(
                "the run was told {SANDBOX_VAR}={}, not tier 1",
                v.chars().take(80).collect::<String>().escape_debug()
            )
            .into())
        }
        None => {
            return Err(format!("{SANDBOX_VAR} is missing: the run is not told its wall").into())
        }
    }
    if r["proxy_get"][format!("auth {allowed_url}")] != 200 {
        return Err("the proxy variables do not carry the run's token".into());
    }
    Ok(format!(
        "the caller's variable, {}, the proxy's with the run's token and OZ0_SANDBOX (tier 1); no OZ0_ variable of the node",
        SYSTEM_NEEDED.join(", ")
    ))
}
