//! `sandbox relay`: the egress relay of one PSEC run, and the removal of
//! its AppContainer profile.
//!
//! On a build that closes a PSEC container's own loopback, a run reaches
//! the node's egress proxy through a relay: this process, listening on the
//! first free port of 127.0.0.1:47330–47361 (at most 32 relays on a
//! machine: the bind is the allocator, so another node's relays count too)
//! and carrying each connection's bytes to the run's proxy, which still
//! wants the run's token and allows only its allowlist. The relay parses
//! nothing and holds no secret.
//!
//! The node would start it in the AppContainer profile `oz0.egress-relay`,
//! in a job that ends with the run; this build starts no PSEC run, so the
//! relay runs only by hand, as an ordinary process. `--remove-profile`
//! removes the profile, as an uninstall does.
//!
//! The relay's listener (like `sandbox proxy`'s) is bound with
//! `SO_EXCLUSIVEADDRUSE`: without it another process of the same user could
//! bind the same port with `SO_REUSEADDR` and take some of its connections,
//! and with them a run's token.

use std::io;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_windows::native::{delete_appcontainer_profile, exclusive_listener, ProfileRemoval};
use oz0_windows::relay::{RelayPorts, RELAY_PROFILE};

use super::log;

/// Connections carried at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 256;

/// `sandbox relay` flags.
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// The run's egress proxy, on loopback (what `sandbox proxy` printed).
    #[arg(long, value_name = "ADDR", required_unless_present = "remove_profile")]
    pub to: Option<SocketAddr>,
    /// Remove the relay's AppContainer profile (oz0.egress-relay) of this
    /// user, as an uninstall does; a later PSEC run makes it again.
    #[arg(long = "remove-profile", conflicts_with = "to")]
    pub remove_profile: bool,
}

/// Runs `sandbox relay`.
pub fn main(a: RelayArgs) -> i32 {
    if a.remove_profile {
        return remove_profile();
    }
    let to = a.to.expect("clap requires --to");
    if !to.ip().is_loopback() {
        log(&format!(
            "--to {to}: the relay forwards only to the node's egress proxy on loopback (127.0.0.1 or [::1])"
        ));
        return Exit::Usage.code();
    }
    let mut listener = None;
    let port = RelayPorts::new().allocate(|p| {
        match exclusive_listener((Ipv4Addr::LOCALHOST, p.get()).into()) {
            Ok(l) => {
                listener = Some(l);
                true
            }
            Err(_) => false,
        }
    });
    let (port, listener) = match (port, listener) {
        (Ok(p), Some(l)) => (p, l),
        (Err(e), _) => {
            log(&e.to_string());
            return Exit::Sandbox.code();
        }
        (Ok(_), None) => unreachable!("a port is given only with its listener"),
    };
    println!(
        "Egress relay: listening on 127.0.0.1:{}, forwarding to {to}; Ctrl-C stops it",
        port.get()
    );
    let open = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let client = match conn {
            Ok(c) => c,
            Err(e) => {
                log(&format!("relay: accept failed: {e}"));
                continue;
            }
        };
        if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            // Over the bound: refused at once rather than queued unseen.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        let open = open.clone();
        std::thread::spawn(move || {
            if let Err(e) = carry(client, to) {
                log(&format!("relay: a connection to {to} failed: {e}"));
            }
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Exit::Ok.code()
}

/// Carries one connection's bytes both ways until each side is done.
fn carry(client: TcpStream, to: SocketAddr) -> io::Result<()> {
    let upstream = TcpStream::connect_timeout(&to, std::time::Duration::from_secs(10))?;
    let (mut c_read, mut u_write) = (client.try_clone()?, upstream.try_clone()?);
    let up = std::thread::spawn(move || {
        let r = io::copy(&mut c_read, &mut u_write);
        let _ = u_write.shutdown(Shutdown::Write);
        r
    });
    let (mut u_read, mut c_write) = (upstream, client);
    let down = io::copy(&mut u_read, &mut c_write);
    let _ = c_write.shutdown(Shutdown::Write);
    let up = up
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("panicked")));
    down.and(up).map(|_| ())
}

fn remove_profile() -> i32 {
    match delete_appcontainer_profile(RELAY_PROFILE) {
        Ok(ProfileRemoval::Removed) => {
            println!("Removed the AppContainer profile {RELAY_PROFILE} of this user (or it did not exist)");
            Exit::Ok.code()
        }
        Ok(ProfileRemoval::NotFound) => {
            println!("No AppContainer profile {RELAY_PROFILE} of this user: nothing to remove");
            Exit::Ok.code()
        }
        Ok(ProfileRemoval::Unsupported) => {
            println!("This Windows has no AppContainer profiles (userenv.dll exports no DeleteAppContainerProfile), so there is no {RELAY_PROFILE} profile to remove");
            Exit::Ok.code()
        }
        Err(e) => {
            log(&format!(
                "cannot remove the AppContainer profile {RELAY_PROFILE}: {e}; is a PSEC run still using it? Stop the node's runs and try again"
            ));
            Exit::CheckFailed.code()
        }
    }
}
