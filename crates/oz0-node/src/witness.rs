//! The witness behind `oz0-node sandbox probe`: what this process can see and do.
//!
//! Run inside a sandbox, it is the witness the tests and the self-test
//! believe: it tries each operation for real and reports the errno. It
//! runs on every platform (the self-test every platform shares starts
//! nothing else inside a wall, not even a shell): what a platform has not
//! (unix sockets on Windows) is reported refused with the reason.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::PathBuf;

use clap::Args;
#[cfg(target_os = "linux")]
use oz0_sys::kernel as sys;
use serde_json::{json, Value};

use oz0_core::exit::Exit;

mod procs;
use procs::{detach, hold, leave_pair, sleeper, try_git};

/// `sandbox probe` flags.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Try to read the first bytes of PATH.
    #[arg(long = "read", value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Try to create-or-append PATH.
    #[arg(long = "write", value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Try to open PATH for reading and writing (e.g. another process's
    /// `/proc/PID/mem`), without creating it.
    #[arg(long = "open-rw", value_name = "PATH")]
    open_rw: Vec<PathBuf>,
    /// Try each --open-rw again and again, as fast as possible, for MS
    /// milliseconds from this process's start (a race): "ok" when any
    /// attempt succeeded, with the count of successes in `open_rw_hits`.
    #[arg(long = "repeat-ms", value_name = "MS", default_value_t = 0)]
    repeat_ms: u64,
    /// Try to list the folder PATH.
    #[arg(long = "list", value_name = "PATH")]
    list: Vec<PathBuf>,
    /// Try a TCP connection to HOST:PORT (1 s deadline).
    #[arg(long = "connect", value_name = "HOST:PORT")]
    connect: Vec<String>,
    /// Try a unix-socket connection to PATH, or to @NAME in the abstract namespace.
    #[arg(long = "unix", value_name = "PATH|@NAME")]
    unix: Vec<String>,
    /// Try to hard-link SRC to DST (SRC:DST).
    #[arg(long = "link", value_name = "SRC:DST")]
    link: Vec<String>,
    /// Skip the system-call checks.
    #[arg(long = "no-syscalls")]
    no_syscalls: bool,
    /// GET URL through $HTTP_PROXY with its credentials; report the status.
    #[arg(long = "proxy-get", value_name = "URL")]
    proxy_get: Vec<String>,
    /// GET URL through $HTTP_PROXY without credentials.
    #[arg(long = "proxy-get-noauth", value_name = "URL")]
    proxy_get_noauth: Vec<String>,
    /// GET URL through $HTTP_PROXY with a wrong token.
    #[arg(long = "proxy-get-badauth", value_name = "URL")]
    proxy_get_badauth: Vec<String>,
    /// Resolve NAME with the system resolver.
    #[arg(long = "resolve", value_name = "NAME")]
    resolve: Vec<String>,
    /// Report the whole environment.
    #[arg(long = "env")]
    env: bool,
    /// Start N child processes (`/bin/sleep 30`; on Windows copies of this
    /// probe that hold for 30 s) and report how many the system let start;
    /// they end with the run.
    #[arg(long = "spawn", value_name = "N")]
    spawn: Option<u32>,
    /// Allocate and touch MiB of memory.
    #[arg(long = "alloc", value_name = "MiB")]
    alloc: Option<usize>,
    /// Listen on 127.0.0.1:PORT, write the report, then hold for --hold-ms.
    #[arg(long = "listen", value_name = "PORT")]
    listen: Option<u16>,
    /// Listen on a free port of 127.0.0.1 and connect to it (1 s
    /// deadline): whether this process reaches its own loopback (a PSEC
    /// container's egress route is decided by it).
    #[arg(long = "self-dial")]
    self_dial: bool,
    /// How long to stay alive after writing the report (e.g. with --listen).
    #[arg(long = "hold-ms", value_name = "MS", default_value_t = 0)]
    hold_ms: u64,
    /// While holding (--hold-ms), rewrite FILE with a count every 50 ms:
    /// a heartbeat the host can watch stop when the process is killed
    /// (pids inside a sandbox may not be the host's).
    #[arg(long = "beat", value_name = "FILE")]
    beat: Option<PathBuf>,
    /// Start a copy of this probe in a process group of its own, which
    /// writes its report to FILE, beats in FILE.beat and stays alive for
    /// --hold-ms, and do not wait for it: a process that tries to outlive
    /// its run.
    #[arg(long = "detach", value_name = "FILE")]
    detach: Option<PathBuf>,
    /// Before the report, start a copy of this probe in the background (in
    /// this process's own group) that beats in bg.beat and starts one more
    /// with --detach detached.json, both holding for 20 s, in the current
    /// folder; wait until both beat (at most 10 s): processes the wall
    /// must end with the run.
    #[arg(long = "leave-pair")]
    leave_pair: bool,
    /// In the current folder, try what a run must not do to a repository's
    /// .git (write its hooks, config, commondir and alternates, rename it
    /// aside) and what it may (write its objects), and write the word of
    /// each attempt that succeeded to `results`.
    #[arg(long = "try-git")]
    try_git: bool,
    /// A tag that marks this process's command line (ignored otherwise).
    #[arg(long = "tag", value_name = "TAG", hide = true)]
    _tag: Option<String>,
    /// Write the report to FILE instead of stdout.
    #[arg(long = "out", value_name = "FILE")]
    out: Option<PathBuf>,
}

/// GET `url` through the proxy named by `$HTTP_PROXY`, with `auth` as the
/// `Proxy-Authorization` value (None: no header). Returns the status code.
fn proxy_get(url: &str, auth: Option<String>) -> Result<u16, String> {
    let proxy = std::env::var("HTTP_PROXY").map_err(|_| "no HTTP_PROXY".to_string())?;
    let rest = proxy
        .strip_prefix("http://")
        .ok_or("HTTP_PROXY is not http://")?;
    let hostport = rest
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(rest)
        .trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(hostport).map_err(|e| errno_name(&e))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok();
    let host = url
        .strip_prefix("http://")
        .and_then(|r| r.split('/').next())
        .unwrap_or("");
    let mut req = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(a) = auth {
        req.push_str(&format!("Proxy-Authorization: {a}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).map_err(|e| errno_name(&e))?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let head = String::from_utf8_lossy(&buf);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            format!(
                "no HTTP status in {:?}",
                head.chars().take(40).collect::<String>()
            )
        })
}

/// The `Proxy-Authorization` value for the credentials in `$HTTP_PROXY`.
fn proxy_auth_from_env(wrong: bool) -> Option<String> {
    let proxy = std::env::var("HTTP_PROXY").ok()?;
    let rest = proxy.strip_prefix("http://")?;
    let (cred, _) = rest.rsplit_once('@')?;
    let (user, pass) = cred.split_once(':')?;
    let pass = if wrong {
        "0".repeat(pass.len())
    } else {
        pass.to_string()
    };
    Some(format!(
        "Basic {}",
        base64(format!("{user}:{pass}").as_bytes())
    ))
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// How Windows' error `e` reads in a report: its name where it is one a
/// wall gives, else its number.
#[cfg(windows)]
pub fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(2) => "ERROR_FILE_NOT_FOUND".into(),
        Some(3) => "ERROR_PATH_NOT_FOUND".into(),
        Some(5) => "ERROR_ACCESS_DENIED".into(),
        Some(32) => "ERROR_SHARING_VIOLATION".into(),
        Some(10013) => "WSAEACCES".into(),
        Some(10049) => "WSAEADDRNOTAVAIL".into(),
        Some(10051) => "WSAENETUNREACH".into(),
        Some(10060) => "WSAETIMEDOUT".into(),
        Some(10061) => "WSAECONNREFUSED".into(),
        Some(n) => format!("WINERROR{n}"),
        None => format!("{:?}", e.kind()),
    }
}

/// The conventional name of an errno, for reports.
#[cfg(unix)]
pub fn errno_name(e: &io::Error) -> String {
    let Some(n) = e.raw_os_error() else {
        return format!("{:?}", e.kind());
    };
    let name = match n {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        _ => return format!("E{n}"),
    };
    name.to_string()
}

fn res(r: io::Result<()>) -> Value {
    match r {
        Ok(()) => json!("ok"),
        Err(e) => json!(errno_name(&e)),
    }
}

#[cfg(target_os = "linux")]
fn status_field(status: &str, key: &str) -> Option<String> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string()))
}

/// Opens each of `paths` for reading and writing, once or, with a
/// `repeat` window, as often as it can until it ends: each path's last
/// result ("ok" if any attempt succeeded) and how many attempts succeeded.
fn open_rw(paths: &[PathBuf], repeat: std::time::Duration) -> (Value, Value) {
    let start = std::time::Instant::now();
    let mut results = BTreeMap::new();
    let mut hits = BTreeMap::new();
    loop {
        for p in paths {
            let r = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map(drop);
            let key = p.display().to_string();
            let n: &mut u64 = hits.entry(key.clone()).or_default();
            if r.is_ok() {
                *n += 1;
            }
            if *n == 0 || r.is_ok() {
                results.insert(key, res(r));
            }
        }
        if start.elapsed() >= repeat {
            return (json!(results), json!(hits));
        }
    }
}

/// What only Linux tells: capabilities, seccomp, Landlock, open descriptors.
#[cfg(target_os = "linux")]
fn linux_facts(report: &mut BTreeMap<&str, Value>) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    report.insert("cap_eff", json!(status_field(&status, "CapEff:")));
    report.insert("cap_prm", json!(status_field(&status, "CapPrm:")));
    report.insert("cap_bnd", json!(status_field(&status, "CapBnd:")));
    report.insert("cap_inh", json!(status_field(&status, "CapInh:")));
    report.insert("cap_amb", json!(status_field(&status, "CapAmb:")));
    report.insert("no_new_privs", json!(status_field(&status, "NoNewPrivs:")));
    report.insert("seccomp", json!(status_field(&status, "Seccomp:")));
    report.insert("landlock_abi", json!(sys::landlock_abi()));
    let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    report.insert("open_fds", json!(fds));
}

/// Runs the probe and prints its JSON report.
pub fn main(a: ProbeArgs) -> i32 {
    // A race is tried first, before anything else of the probe.
    let raced = (!a.open_rw.is_empty())
        .then(|| open_rw(&a.open_rw, std::time::Duration::from_millis(a.repeat_ms)));
    let mut report = BTreeMap::<&str, Value>::new();
    #[cfg(unix)]
    report.insert("uid", json!(rustix::process::getuid().as_raw()));
    report.insert("pid", json!(std::process::id()));
    #[cfg(target_os = "linux")]
    linux_facts(&mut report);
    if let Some((results, hits)) = raced {
        report.insert("open_rw", results);
        report.insert("open_rw_hits", hits);
    }
    try_files(&a, &mut report);
    if a.try_git {
        report.insert("try_git", res(try_git()));
    }
    try_connections(&a, &mut report);
    try_links(&a, &mut report);
    try_proxy(&a, &mut report);
    if a.env {
        let vars: BTreeMap<String, String> = std::env::vars().collect();
        report.insert("env", json!(vars));
    }
    if a.self_dial {
        report.insert("self_dial", res(self_dial()));
    }
    // The children end with the run; the listener is held with the probe.
    let _children = try_resources(&a, &mut report);
    let listener = a
        .listen
        .map(|p| std::net::TcpListener::bind(("127.0.0.1", p)));
    if let Some(l) = &listener {
        report.insert(
            "listen",
            json!(match l {
                Ok(_) => "ok".to_string(),
                Err(e) => errno_name(e),
            }),
        );
    }

    #[cfg(target_os = "linux")]
    if !a.no_syscalls {
        report.insert("syscalls", json!(syscalls()));
    }
    if let Some(out) = &a.detach {
        report.insert("detached", res(detach(out, a.hold_ms)));
    }
    // Kept to the end: it ends with the run, not with this process.
    let _pair = if a.leave_pair {
        let p = leave_pair();
        report.insert(
            "pair",
            res(p
                .as_ref()
                .map(|_| ())
                .map_err(|e| io::Error::new(e.kind(), e.to_string()))),
        );
        p.ok()
    } else {
        None
    };
    if let Err(code) = write_report(&report, a.out.as_deref()) {
        return code;
    }
    if a.hold_ms > 0 {
        hold(
            std::time::Duration::from_millis(a.hold_ms),
            a.beat.as_deref(),
        );
    }
    drop(listener);
    Exit::Ok.code()
}

/// `--self-dial`: a listener on 127.0.0.1 and a connection to it, accepted.
fn self_dial() -> io::Result<()> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let addr = l.local_addr()?;
    let _c = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1))?;
    l.accept().map(drop)
}

/// `--read`, `--write` (create or append) and `--list`, in that order.
fn try_files(a: &ProbeArgs, report: &mut BTreeMap<&str, Value>) {
    let mut reads = BTreeMap::new();
    for p in &a.read {
        let r = std::fs::File::open(p).and_then(|mut f| f.read(&mut [0u8; 16]).map(|_| ()));
        reads.insert(p.display().to_string(), res(r));
    }
    report.insert("read", json!(reads));
    let mut writes = BTreeMap::new();
    for p in &a.write {
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .and_then(|mut f| f.write_all(b"oz0-probe\n"));
        writes.insert(p.display().to_string(), res(r));
    }
    report.insert("write", json!(writes));
    let mut lists = BTreeMap::new();
    for p in &a.list {
        lists.insert(
            p.display().to_string(),
            res(std::fs::read_dir(p).map(|_| ())),
        );
    }
    report.insert("list", json!(lists));
}

/// `--connect` (TCP, 1 s deadline) and `--unix` (a path or `@NAME`).
fn try_connections(a: &ProbeArgs, report: &mut BTreeMap<&str, Value>) {
    let mut connects = BTreeMap::new();
    for t in &a.connect {
        let r = std::net::ToSocketAddrs::to_socket_addrs(t.as_str()).and_then(|mut it| {
            let addr = it
                .next()
                .ok_or_else(|| io::Error::from(io::ErrorKind::AddrNotAvailable))?;
            std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(1))
                .map(|_| ())
        });
        connects.insert(t.clone(), res(r));
    }
    report.insert("connect", json!(connects));
    let mut unixes = BTreeMap::new();
    for u in &a.unix {
        let r = if let Some(name) = u.strip_prefix('@') {
            abstract_connect(name)
        } else {
            unix_connect(u)
        };
        unixes.insert(u.clone(), res(r));
    }
    report.insert("unix", json!(unixes));
}

/// `--link SRC:DST`: hard links.
fn try_links(a: &ProbeArgs, report: &mut BTreeMap<&str, Value>) {
    let mut links = BTreeMap::new();
    for l in &a.link {
        let r = match l.split_once(':') {
            Some((s, d)) => std::fs::hard_link(s, d),
            None => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        };
        links.insert(l.clone(), res(r));
    }
    report.insert("link", json!(links));
}

/// The `--proxy-get*` requests (with the run's token, none, a wrong one),
/// then `--resolve`.
fn try_proxy(a: &ProbeArgs, report: &mut BTreeMap<&str, Value>) {
    let mut gets = BTreeMap::new();
    for (kind, urls, auth) in [
        ("auth", &a.proxy_get, proxy_auth_from_env(false)),
        ("noauth", &a.proxy_get_noauth, None),
        ("badauth", &a.proxy_get_badauth, proxy_auth_from_env(true)),
    ] {
        for u in urls {
            let r = match proxy_get(u, auth.clone()) {
                Ok(code) => json!(code),
                Err(e) => json!(e),
            };
            gets.insert(format!("{kind} {u}"), r);
        }
    }
    report.insert("proxy_get", json!(gets));
    let mut resolved = BTreeMap::new();
    for n in &a.resolve {
        let r = std::net::ToSocketAddrs::to_socket_addrs(&(n.as_str(), 80))
            .map(|_| ())
            .map_err(|e| io::Error::other(e.to_string()));
        resolved.insert(n.clone(), res(r));
    }
    report.insert("resolve", json!(resolved));
}

/// `--spawn` and `--alloc`: the children started (kept, to end with the
/// run), and the memory touched.
fn try_resources(a: &ProbeArgs, report: &mut BTreeMap<&str, Value>) -> Vec<std::process::Child> {
    let mut children = Vec::new();
    if let Some(n) = a.spawn {
        let mut refused = 0;
        for _ in 0..n {
            match sleeper()
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                Ok(c) => children.push(c),
                Err(_) => refused += 1,
            }
        }
        report.insert("spawned", json!(children.len()));
        report.insert("spawn_refused", json!(refused));
    }
    if let Some(mib) = a.alloc {
        // Said before the memory is touched (`OUT.alloc`), so that a check
        // tells a run its memory limit stopped from one that never started.
        if let Some(out) = &a.out {
            let mut started = out.clone().into_os_string();
            started.push(".alloc");
            let _ = std::fs::write(started, b"started\n");
        }
        // Zeroed pages come straight from the kernel; touch one byte in each
        // so that the memory is really charged to the run.
        let mut v = vec![0u8; mib << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        report.insert("alloc", json!("ok"));
        drop(v);
    }
    children
}

/// Writes the report to `out` (then renamed into place, so a reader never
/// sees half a report) or stdout; the exit status when it cannot.
fn write_report(report: &BTreeMap<&str, Value>, out: Option<&std::path::Path>) -> Result<(), i32> {
    let text = match serde_json::to_string(report) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oz0-node: probe: {e}");
            return Err(Exit::CheckFailed.code());
        }
    };
    match out {
        Some(path) => {
            let tmp = path.with_extension("partial");
            if let Err(e) =
                std::fs::write(&tmp, text + "\n").and_then(|_| std::fs::rename(&tmp, path))
            {
                eprintln!("oz0-node: probe: cannot write {}: {e}", path.display());
                return Err(Exit::CheckFailed.code());
            }
        }
        None => println!("{text}"),
    }
    Ok(())
}

/// What the sandbox's seccomp filter, namespaces and capabilities answer
/// to the calls it refuses.
#[cfg(target_os = "linux")]
fn syscalls() -> BTreeMap<&'static str, Value> {
    let mut s = BTreeMap::new();
    s.insert("ptrace", res(sys::ptrace_peek_pid1()));
    s.insert("process_vm_readv", res(sys::process_vm_readv_pid1()));
    s.insert("mount", res(sys::mount_tmpfs()));
    s.insert("io_uring_setup", res(sys::io_uring_setup()));
    s.insert("bpf", res(sys::bpf()));
    s.insert("perf_event_open", res(sys::perf_event_open()));
    s.insert("keyctl", res(sys::keyctl()));
    s.insert("add_key", res(sys::add_key()));
    s.insert("userfaultfd", res(sys::userfaultfd()));
    s.insert("kexec_load", res(sys::kexec_load()));
    s.insert("init_module", res(sys::init_module()));
    s.insert("tiocsti", res(sys::tiocsti(0)));
    s.insert("tiocsetd", res(sys::tiocsetd(0)));
    s.insert("statmount", res(sys::statmount()));
    s.insert("listmount", res(sys::listmount()));
    s.insert("quotactl_fd", res(sys::quotactl_fd()));
    s.insert(
        "socket_netlink",
        res(sys::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW,
            libc::NETLINK_ROUTE,
        )),
    );
    s.insert(
        "socket_vsock",
        res(sys::socket(libc::AF_VSOCK, libc::SOCK_STREAM, 0)),
    );
    s.insert(
        "socket_packet",
        res(sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)),
    );
    s.insert(
        "socket_unix",
        res(sys::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)),
    );
    s.insert(
        "socket_inet",
        res(sys::socket(libc::AF_INET, libc::SOCK_STREAM, 0)),
    );
    #[cfg(target_arch = "x86_64")]
    s.insert(
        "x32_getpid",
        res(sys::raw_syscall0(0x4000_0000 | libc::SYS_getpid)),
    );
    // Last: when allowed, these change this process's namespaces.
    s.insert("unshare_mount_ns", res(sys::unshare_mount_ns()));
    s.insert("unshare_user", res(sys::unshare_user()));
    s
}

/// Connects to the abstract unix socket `name` (Linux only).
fn abstract_connect(name: &str) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|addr| std::os::unix::net::UnixStream::connect_addr(&addr))
            .map(|_| ())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = name;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "no abstract unix sockets on this system",
        ))
    }
}

/// Connects to the unix socket at `path`.
fn unix_connect(path: &str) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::net::UnixStream::connect(path).map(|_| ())
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this probe tries no unix sockets on Windows",
        ))
    }
}
