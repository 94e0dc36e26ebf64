//! TLS end to end, with a CA the test makes at run time: the edge serves
//! HTTPS and its clients verify it against the operator's CA; a client that
//! trusts another CA (or only the system's), an expired certificate and a
//! certificate for another name are each refused; the edge loads a new
//! certificate on SIGHUP without a restart; plain HTTP is for loopback only,
//! on both sides; the store is its user's alone.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::certs::TestCa;
use common::{start_with, OPERATOR};
use oz0_edge::client::{ClientError, OperatorClient, Trust};
use oz0_edge::serve::{Limits, ServerCert};
use oz0_edge::Store;

fn temp(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("oz0-edge-tls-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn tls_err(r: Result<Vec<oz0_edge::wire::NodeView>, ClientError>) -> String {
    match r {
        Err(ClientError::Certificate(m)) => m,
        other => panic!("not a TLS refusal: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_trust_only_what_verifies() {
    let d = temp("verify");
    let ca = TestCa::new(&d, "one");
    let other = TestCa::new(&d, "two");
    let (cert, key) = ca.leaf("edge", &["127.0.0.1", "localhost"], None);
    let served = ServerCert::load(&cert, &key).unwrap();
    let e = start_with(
        Store::open("sqlite::memory:").await.unwrap(),
        30_000,
        Some(served.config().unwrap()),
        Limits::default(),
        Trust::CaFile(ca.ca.clone()),
    )
    .await;
    assert!(e.url.starts_with("https://127.0.0.1:"), "{}", e.url);
    assert!(e.op.nodes(None).await.unwrap().is_empty());
    let by = |trust: Trust| OperatorClient::with_trust(&e.url, OPERATOR, &trust).unwrap();
    // Another CA, and the system's (which never signed this one).
    let m = tls_err(by(Trust::CaFile(other.ca.clone())).nodes(None).await);
    assert!(
        m.contains("UnknownIssuer") && m.contains("--edge-ca"),
        "{m}"
    );
    let m = tls_err(by(Trust::System).nodes(None).await);
    assert!(m.contains("UnknownIssuer"), "{m}");
    // localhost is a name the certificate has too.
    let port = e.url.rsplit(':').next().unwrap();
    let local = OperatorClient::with_trust(
        &format!("https://localhost:{port}"),
        OPERATOR,
        &Trust::CaFile(ca.ca.clone()),
    )
    .unwrap();
    assert!(local.nodes(None).await.is_ok());
    // Plain HTTP to the TLS port gets no answer it can read.
    let plain = OperatorClient::new(&format!("http://127.0.0.1:{port}"), OPERATOR).unwrap();
    assert!(plain.nodes(None).await.is_err());

    // The same edge, its files swapped and loaded again: expired, then for
    // another name, then valid again. Each check is a new client: one that
    // talked to the edge before resumes its TLS session, as TLS lets it.
    let fresh = || by(Trust::CaFile(ca.ca.clone()));
    let (c, k) = ca.leaf("expired", &["127.0.0.1"], Some((2021, 1, 1)));
    std::fs::copy(&c, &cert).unwrap();
    std::fs::copy(&k, &key).unwrap();
    served.reload().unwrap();
    let m = tls_err(fresh().nodes(None).await);
    assert!(m.contains("certificate expired"), "{m}");
    let (c, k) = ca.leaf("elsewhere", &["edge.example"], None);
    std::fs::copy(&c, &cert).unwrap();
    std::fs::copy(&k, &key).unwrap();
    served.reload().unwrap();
    let m = tls_err(fresh().nodes(None).await);
    assert!(
        m.contains("certificate not valid for name \"127.0.0.1\""),
        "{m}"
    );
    // A key that is not the certificate's is refused, and the one served stays.
    let (c2, _) = ca.leaf("mismatch", &["127.0.0.1"], None);
    std::fs::copy(&c2, &cert).unwrap();
    let r = served.reload().unwrap_err().to_string();
    assert!(r.contains("is not the key of --tls-cert"), "{r}");
    let (c, k) = ca.leaf("again", &["127.0.0.1"], None);
    std::fs::copy(&c, &cert).unwrap();
    std::fs::copy(&k, &key).unwrap();
    served.reload().unwrap();
    assert!(fresh().nodes(None).await.is_ok());
    std::fs::remove_dir_all(&d).unwrap();
}

/// A v1 certificate (openssl x509 -req without extensions makes one) is
/// refused for what it is, not as a key that is not its own.
#[test]
fn a_v1_certificate_is_refused_naming_its_version_and_the_fix() {
    let d = temp("v1");
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(&d)
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
    };
    let made = run(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "k.pem",
        "-out",
        "r.csr",
        "-subj",
        "/CN=edge",
    ])
    .is_ok_and(|s| s.success())
        && run(&[
            "x509", "-req", "-in", "r.csr", "-signkey", "k.pem", "-out", "c.pem", "-days", "1",
        ])
        .is_ok_and(|s| s.success());
    if !made {
        if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
            panic!("OZ0_MUST_WORK=1 and openssl could not make a v1 certificate: apt-get install openssl");
        }
        eprintln!("SKIPPED: openssl could not make a v1 certificate (apt-get install openssl)");
        return;
    }
    let e = ServerCert::load(&d.join("c.pem"), &d.join("k.pem"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("an X.509 v1 certificate") && e.contains("subjectAltName"),
        "{e}"
    );
    assert!(!e.contains("is not the key of"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// A running `oz0-edge` binary.
struct EdgeProcess {
    child: std::process::Child,
    url: String,
}

impl EdgeProcess {
    /// Sends it `signal` (`kill`'s form: `-TERM`).
    fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill {signal}");
    }
}

impl Drop for EdgeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn secrets(d: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(d.join("tenants"), format!("acme={}\n", common::ACME)).unwrap();
    std::fs::write(d.join("operators"), format!("{OPERATOR}\n")).unwrap();
    for f in ["tenants", "operators"] {
        std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

fn edge_cmd(d: &Path, listen: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_oz0-edge"));
    c.args(["--listen", listen, "--store"])
        .arg(format!("sqlite:{}", d.join("edge.db").display()))
        .arg("--tenant-tokens")
        .arg(d.join("tenants"))
        .arg("--operator-tokens")
        .arg(d.join("operators"))
        .args(extra)
        .stdin(Stdio::null());
    c
}

fn start_edge(d: &Path, extra: &[&str]) -> EdgeProcess {
    started(edge_cmd(d, "127.0.0.1:0", extra))
}

/// Starts `c` and reads the address it says it listens on.
fn started(mut c: Command) -> EdgeProcess {
    use std::io::BufRead;
    let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("https://") || w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    EdgeProcess { child, url }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_binary_serves_https_reloads_on_sighup_and_keeps_its_store_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = temp("bin");
    secrets(&d);
    let (one, two) = (TestCa::new(&d, "one"), TestCa::new(&d, "two"));
    let (cert, key) = one.leaf("edge", &["127.0.0.1"], None);
    let c = cert.display().to_string();
    let k = key.display().to_string();
    let e = start_edge(&d, &["--tls-cert", &c, "--tls-key", &k]);
    assert!(e.url.starts_with("https://"), "{}", e.url);
    let op = |ca: &Path| {
        OperatorClient::with_trust(&e.url, OPERATOR, &Trust::CaFile(ca.to_path_buf())).unwrap()
    };
    assert!(op(&one.ca).nodes(None).await.is_ok());
    assert!(op(&two.ca).nodes(None).await.is_err());
    // A certificate of the other CA, loaded on SIGHUP.
    let (c2, k2) = two.leaf("edge2", &["127.0.0.1"], None);
    std::fs::copy(&c2, &cert).unwrap();
    std::fs::copy(&k2, &key).unwrap();
    e.signal("-HUP");
    let until = Instant::now() + Duration::from_secs(10);
    while op(&two.ca).nodes(None).await.is_err() {
        assert!(
            Instant::now() < until,
            "SIGHUP did not load the new certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        op(&one.ca).nodes(None).await.is_err(),
        "the old certificate is gone"
    );
    // The store and its journal are the edge's user's alone.
    for f in ["edge.db", "edge.db-wal"] {
        let mode = std::fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f} has mode {mode:o}");
    }
    // The edge holds its SQLite file alone: a second edge on it is
    // refused (after SQLite's 5 s wait for the first to let go), naming
    // the store replicas share.
    // A second edge that starts serves until killed: waited for, with a
    // bound, so that the test fails rather than hangs.
    let mut second = edge_cmd(&d, "127.0.0.1:0", &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = second.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= until {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second edge started on the first one's SQLite store");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("is held by another process (another edge?)")
            && err.contains("share a PostgreSQL store"),
        "{err}"
    );
    assert!(
        op(&two.ca).nodes(None).await.is_ok(),
        "the first edge serves on"
    );
    drop(e);

    // A store file another could read is made private, and said so.
    std::fs::set_permissions(d.join("edge.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = start_edge(&d, &["--tls-cert", &c, "--tls-key", &k]);
    drop(e);
    let mode = std::fs::metadata(d.join("edge.db"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);

    // Off loopback without TLS, and a key others can read: refused.
    let o = edge_cmd(&d, "0.0.0.0:0", &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("give --tls-cert FILE and --tls-key FILE"),
        "{err}"
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = edge_cmd(&d, "127.0.0.1:0", &["--tls-cert", &c, "--tls-key", &k])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("readable by others: chmod 600"), "{err}");
    // Clients: plain HTTP off loopback is refused before anything is sent.
    let e = OperatorClient::new("http://192.0.2.1:8440", OPERATOR).unwrap_err();
    assert!(matches!(e, ClientError::PlainOffLoopback(_)), "{e:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// What docs/operators.md says of backing up a SQLite store: no other
/// process reads it while the edge runs; stopped (SIGTERM, as a service
/// manager stops it, or SIGINT), the edge closes it and the file alone is
/// the whole store; killed, it leaves its last writes in the journal
/// (`-wal`), and the file and the journal copied together are the whole
/// store. Each time, an edge on the copy knows the node the first one
/// registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_edges_store_copied_with_its_journal_is_whole() {
    use oz0_edge::client::{NodeClient, NodeKey};
    for (signal, journal) in [("-TERM", false), ("-INT", false), ("-KILL", true)] {
        let d = temp("backup");
        secrets(&d);
        let mut e = start_edge(&d, &[]);
        let n = NodeClient::new(&e.url, "acme", NodeKey::generate()).unwrap();
        n.register(common::ACME, Some("kept")).await.unwrap();
        // While it runs, no other process reads the store.
        let other = rusqlite::Connection::open(d.join("edge.db")).unwrap();
        other.busy_timeout(Duration::ZERO).unwrap();
        let err = other
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap_err();
        assert!(err.to_string().contains("database is locked"), "{err}");
        drop(other);
        e.signal(signal);
        let status = e.child.wait().unwrap();
        assert_eq!(status.success(), !journal, "{signal}: {status:?}");
        assert_eq!(
            d.join("edge.db-wal").exists(),
            journal,
            "{signal}: the journal"
        );
        let copy = temp("backup-copy");
        secrets(&copy);
        for f in ["edge.db", "edge.db-wal"] {
            if d.join(f).exists() {
                std::fs::copy(d.join(f), copy.join(f)).unwrap();
            }
        }
        let again = start_edge(&copy, &[]);
        let op = OperatorClient::new(&again.url, OPERATOR).unwrap();
        let nodes = op.nodes(None).await.unwrap();
        assert!(
            nodes.iter().any(|v| v.name.as_deref() == Some("kept")),
            "{signal}: {nodes:?}"
        );
        drop((e, again));
        for dir in [d, copy] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

/// A stopped edge (SIGTERM, as `systemctl stop` sends) answers what it
/// holds before it exits: a node's long poll, held for up to 15 s, is
/// answered at once (nothing to take) instead of having its connection
/// cut, a held renewal is answered renewed, and the edge says it is
/// stopping and exits 0 well within its drain bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_edge_answers_its_held_requests_before_it_exits() {
    use oz0_edge::client::{NodeClient, NodeKey};
    use oz0_edge::routing::Origin;
    use oz0_edge::wire::PollRequest;
    use std::io::Read;
    let d = temp("drain");
    secrets(&d);
    let mut c = edge_cmd(&d, "127.0.0.1:0", &[]);
    c.stderr(Stdio::piped());
    let mut e = started(c);
    let node = |name: &'static str| {
        let url = e.url.clone();
        async move {
            let n = NodeClient::new(&url, "acme", NodeKey::generate()).unwrap();
            n.register(common::ACME, Some(name)).await.unwrap();
            n.report_facts(&common::linux_facts(false, false))
                .await
                .unwrap();
            std::sync::Arc::new(n)
        }
    };
    let (waiting, working) = (node("waiting").await, node("working").await);
    // One node holds a job and renews it with a held renewal; the other
    // waits for work with a long poll.
    let op = OperatorClient::new(&e.url, OPERATOR).unwrap();
    op.submit_job(
        "acme",
        &common::job(Origin::Internal, oz0_edge::routing::Isolation::None),
    )
    .await
    .unwrap();
    let held = |wait_ms| PollRequest {
        wait_ms,
        below: true,
        ..PollRequest::tier(1)
    };
    let mut lease = working
        .poll_with(&held(0))
        .await
        .unwrap()
        .lease
        .expect("the job");
    let w = waiting.clone();
    let poll = tokio::spawn(async move { w.poll_with(&held(15_000)).await });
    let renew = tokio::spawn(async move {
        let r = working.renew_held(&mut lease, Duration::from_secs(9)).await;
        (r, lease)
    });
    // Both are held by now (each waits 9 s or more unless answered).
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!poll.is_finished() && !renew.is_finished());
    let asked = Instant::now();
    e.signal("-TERM");
    let p = poll
        .await
        .unwrap()
        .expect("the long poll is answered, not cut");
    assert!(p.lease.is_none(), "{p:?}");
    let (r, _) = renew.await.unwrap();
    r.expect("the held renewal is answered, not cut");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "answered {:?} after the signal",
        asked.elapsed()
    );
    let status = e.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    // It exits as its last connection closes, not at the drain's bound.
    assert!(
        asked.elapsed() < oz0_edge::serve::DRAIN / 2,
        "exited {:?} after the signal",
        asked.elapsed()
    );
    let mut log = String::new();
    e.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    // --help says so.
    let help = Command::new(env!("CARGO_BIN_EXE_oz0-edge"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(
        help.contains("SIGTERM, SIGINT  stop the edge")
            && help.contains(&format!("(at most {} s)", oz0_edge::serve::DRAIN.as_secs())),
        "{help}"
    );
    // Stopped: no connection is taken any more.
    assert!(op.nodes(None).await.is_err());
    drop(e);
    std::fs::remove_dir_all(&d).unwrap();
}

/// `oz0-edge --config FILE` (or OZ0_EDGE_CONFIG) starts from the file
/// alone; a flag overrides a key; `--show-config` says where each value
/// came from and hides a store's password; a wrong file is refused with
/// its line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_binary_reads_its_config_file_and_flags_override_it() {
    use std::os::unix::fs::PermissionsExt;
    let d = temp("config");
    secrets(&d);
    let f = d.join("edge.toml");
    let write = |text: &str, mode: u32| {
        std::fs::write(&f, text).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write(
        &format!(
            "# the edge\nlisten = \"127.0.0.1:0\"\nstore = \"sqlite:{db}\"\ntenant-tokens = \"{t}\"\noperator-tokens = \"{o}\"\nlease-secs = 7\nrequire-approval = [\"acme\"]\n",
            db = d.join("edge.db").display(),
            t = d.join("tenants").display(),
            o = d.join("operators").display()
        ),
        0o644,
    );
    let bin = env!("CARGO_BIN_EXE_oz0-edge");
    let show = |args: &[&str], env: Option<&Path>| {
        let mut c = Command::new(bin);
        c.args(args)
            .arg("--show-config")
            .env_remove("OZ0_EDGE_STORE");
        match env {
            Some(p) => c.env("OZ0_EDGE_CONFIG", p),
            None => c.env_remove("OZ0_EDGE_CONFIG"),
        };
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let fp = f.display().to_string();
    let out = show(&["--config", &fp, "--lease-secs", "9"], None);
    assert!(
        out.contains(&format!("listen = \"127.0.0.1:0\"    # {fp}:2")),
        "{out}"
    );
    assert!(out.contains("lease-secs = 9    # flag"), "{out}");
    assert!(
        out.contains(&format!("require-approval = \"acme\"    # {fp}:7")),
        "{out}"
    );
    assert!(out.contains("node-live-secs = 30    # default"), "{out}");
    let out = show(&[], Some(&f));
    assert!(
        out.contains(&format!("lease-secs = 7    # {fp}:6")),
        "{out}"
    );

    // Started from the file alone, it serves.
    let mut child = Command::new(bin)
        .args(["--config", &fp])
        .env_remove("OZ0_EDGE_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    let e = EdgeProcess { child, url };
    let op = OperatorClient::new(&e.url, OPERATOR).unwrap();
    assert!(op.nodes(None).await.is_ok());
    drop(e);

    // Refused, each with the file, the line and the fix (a usage error).
    let refused = |text: &str, mode: u32| {
        write(text, mode);
        let o = Command::new(bin).args(["--config", &fp]).output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        String::from_utf8_lossy(&o.stderr).replace(&fp, "F")
    };
    let err = refused("listen = \"127.0.0.1:0\"\nlisten-on = 1\n", 0o600);
    assert!(
        err.starts_with("oz0-edge: F:2: unknown key `listen-on` — the keys are"),
        "{err}"
    );
    let err = refused("lease-secs = -1\n", 0o600);
    assert!(
        err.starts_with("oz0-edge: F:1: `lease-secs = \"-1\"`: invalid value"),
        "{err}"
    );
    let err = refused("store = \"postgres://edge:hunter22@db/edge\"\n", 0o644);
    assert!(
        err.starts_with(
            "oz0-edge: F:1: `store` holds a password and the file is readable by everyone"
        ),
        "{err}"
    );
    assert!(!err.contains("hunter22"), "{err}");
    // The password as a parameter of the URL is one too.
    let err = refused(
        "store = \"postgres://edge@db/edge?password=hunter22\"\n",
        0o644,
    );
    assert!(
        err.starts_with(
            "oz0-edge: F:1: `store` holds a password and the file is readable by everyone"
        ),
        "{err}"
    );
    assert!(!err.contains("hunter22"), "{err}");
    let err = refused("lease-secs = 1\n", 0o666);
    assert!(err.contains("others may change it — chmod go-w F"), "{err}");
    // The password is never shown.
    write("store = \"postgres://edge:hunter22@db/edge\"\n", 0o600);
    let out = show(&["--config", &fp], None);
    assert!(
        out.contains("store = \"postgres://edge:***@db/edge\""),
        "{out}"
    );
    assert!(!out.contains("hunter22"), "{out}");
    write(
        "store = \"postgres://edge@db/edge?Password=hunter22\"\n",
        0o600,
    );
    let out = show(&["--config", &fp], None);
    assert!(
        out.contains("store = \"postgres://edge@db/edge?Password=***\""),
        "{out}"
    );
    assert!(!out.contains("hunter22"), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}
