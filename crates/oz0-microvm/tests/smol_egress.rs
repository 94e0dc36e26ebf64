//! The smolvm guest's egress wrapper (`__oz0-vm-egress`), run on the host
//! against a real proxy run whose socket is reached through a relay that
//! carries bytes but no descriptors, as smolvm's `--mount-socket` does.
//! What smolvm itself does with the socket cannot be shown on a machine
//! where no KVM guest boots; everything on either side of it is shown here:
//! the server gets proxy variables, not the token variable; an allowed
//! listener answers through the proxy; an unlisted one gets 403; without a
//! token the wrapper refuses and the server never runs.

use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;

use oz0_egress::{RunEgress, Token};
use oz0_policy::net::Egress;

mod stage;
use stage::{egress_script, http_listener, quiet_proxy, tcp_run};

/// Relays each connection on `at` to `to`, bytes only.
fn byte_relay(to: &Path, at: &Path) {
    let l = UnixListener::bind(at).unwrap();
    let to = to.to_path_buf();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let to = to.clone();
            thread::spawn(move || {
                let Ok(p) = UnixStream::connect(&to) else {
                    return;
                };
                let (mut c2, mut p2) = (c.try_clone().unwrap(), p.try_clone().unwrap());
                let t = thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut p2);
                    let _ = p2.shutdown(Shutdown::Write);
                });
                let (mut p, mut c) = (p, c);
                let _ = std::io::copy(&mut p, &mut c);
                let _ = c.shutdown(Shutdown::Write);
                let _ = t.join();
            });
        }
    });
}

fn have_curl() -> bool {
    let ok = Command::new("curl").arg("--version").output().is_ok();
    if !ok {
        if std::env::var("OZ0_MUST_WORK").as_deref() == Ok("1") {
            panic!("OZ0_MUST_WORK=1 and curl is not installed (apt-get install curl)");
        }
        eprintln!("SKIP: curl is not installed (apt-get install curl)");
    }
    ok
}

#[test]
fn the_guest_wrapper_bridges_to_the_proxy_socket_and_hides_the_token() {
    if !have_curl() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("oz0-smol-egress-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let allowed = http_listener("hello through the guest bridge");
    let unlisted = http_listener("must never be seen");
    let proxy = quiet_proxy();
    let token = Token::generate().unwrap();
    let sock: PathBuf = dir.join("egress.sock");
    let _run = proxy
        .add_run(RunEgress {
            run_id: "vm-test".into(),
            token: token.clone(),
            egress: Egress::parse(&[format!("127.0.0.1:{allowed}")], &[]).unwrap(),
            socket_path: sock.clone(),
        })
        .unwrap();
    let relay = dir.join("guest.sock");
    byte_relay(&sock, &relay);

    let script = egress_script(allowed, unlisted);
    let out = Command::new(env!("CARGO_BIN_EXE_oz0-vm-testnode"))
        .args([oz0_microvm::smolguest::EGRESS_ARG])
        .arg(&relay)
        .args(["--", "/bin/sh", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env(oz0_microvm::smolguest::TOKEN_VAR, token.expose())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("token=none"),
        "the server saw the token variable: {text}"
    );
    assert!(!text.contains(token.expose()), "{text}");
    assert!(text.contains("proxy=http://oz0:T@127.0.0.1:"), "{text}");
    assert!(text.contains("hello through the guest bridge"), "{text}");
    assert!(text.contains("unlisted=403"), "{text}");

    // Without the token the wrapper refuses, and the server never runs.
    let marker = dir.join("ran");
    let out = Command::new(env!("CARGO_BIN_EXE_oz0-vm-testnode"))
        .args([oz0_microvm::smolguest::EGRESS_ARG])
        .arg(&relay)
        .args(["--", "/usr/bin/touch"])
        .arg(&marker)
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(oz0_microvm::smolguest::EGRESS_FAILED)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(oz0_microvm::smolguest::TOKEN_VAR));
    assert!(!marker.exists());
    proxy.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The runtime's `--publish-socket HOST:GUEST` as Apple's container
/// behaves: a connection to HOST is taken even before the guest listens
/// (and then dropped); otherwise it is relayed, bytes only, to GUEST.
fn publish_socket(host: &Path, guest: &Path) {
    let l = UnixListener::bind(host).unwrap();
    let guest = guest.to_path_buf();
    thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let Ok(g) = UnixStream::connect(&guest) else {
                continue;
            };
            thread::spawn(move || {
                let (mut c2, mut g2) = (c.try_clone().unwrap(), g.try_clone().unwrap());
                let t = thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut g2);
                    let _ = g2.shutdown(Shutdown::Write);
                });
                let (mut g, mut c) = (g, c);
                let _ = std::io::copy(&mut g, &mut c);
                let _ = c.shutdown(Shutdown::Write);
                let _ = t.join();
            });
        }
    });
}

/// The wrapper as a Mac's node starts it in a VM of Apple's container
/// (`--accept`): it listens on the published socket, the node's
/// connections (opened from the start, while nothing listens yet) reach
/// the run's proxy on loopback TCP, and the server sees what it sees with
/// smolvm: proxy variables, no token variable, its allowlist held.
#[test]
fn the_accepting_wrapper_takes_the_nodes_connections_to_the_proxy() {
    if !have_curl() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("oz0-apple-egress-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let allowed = http_listener("hello through the published socket");
    let unlisted = http_listener("must never be seen");
    let proxy = quiet_proxy();
    let (run, token) = tcp_run(&proxy, "vm-apple", allowed);
    let (host, guest) = (dir.join("host.sock"), dir.join("guest.sock"));
    publish_socket(&host, &guest);
    let dialing = oz0_egress::reverse::serve_dialing(&host, run.tcp_addr().unwrap()).unwrap();

    let script = egress_script(allowed, unlisted);
    let out = Command::new(env!("CARGO_BIN_EXE_oz0-vm-testnode"))
        .args([
            oz0_microvm::smolguest::EGRESS_ARG,
            oz0_microvm::smolguest::ACCEPT_FLAG,
        ])
        .arg(&guest)
        .args(["--", "/bin/sh", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env(oz0_microvm::smolguest::TOKEN_VAR, token.expose())
        .output()
        .unwrap();
    drop(dialing);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("token=none"), "{text}");
    assert!(!text.contains(token.expose()), "{text}");
    assert!(
        text.contains("hello through the published socket"),
        "{text}"
    );
    assert!(text.contains("unlisted=403"), "{text}");
    // A socket already there is not taken over: the wrapper refuses.
    let out = Command::new(env!("CARGO_BIN_EXE_oz0-vm-testnode"))
        .args([
            oz0_microvm::smolguest::EGRESS_ARG,
            oz0_microvm::smolguest::ACCEPT_FLAG,
        ])
        .arg(&host)
        .args(["--", "/bin/true"])
        .env_clear()
        .env(oz0_microvm::smolguest::TOKEN_VAR, token.expose())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(oz0_microvm::smolguest::EGRESS_FAILED)
    );
    proxy.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}
