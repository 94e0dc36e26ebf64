//! Inside a smolvm guest with egress: `/oz0/oz0-node __oz0-vm-egress SOCKET
//! -- SERVER…` listens on the guest's own `127.0.0.1`, carries each
//! connection byte for byte to the run's proxy socket that smolvm mounted
//! into the guest at SOCKET (`--mount-socket`; it carries bytes, not
//! descriptors, so the bridge copies), and runs the server with the proxy
//! variables pointing at that listener.
//!
//! In a VM of Apple's container (a Mac's node) the connections run the
//! other way: `__oz0-vm-egress --accept SOCKET -- SERVER…` listens on
//! SOCKET, which the runtime publishes to the node (`--publish-socket`),
//! and carries each of the server's connections over one the node opened
//! (`oz0_egress::reverse`).
//!
//! The run's token reaches the guest by name only: smolvm resolves
//! `--secret-env OZ0_EGRESS_TOKEN=OZ0_VMENV_OZ0_EGRESS_TOKEN` from its own
//! environment. The server never sees `OZ0_EGRESS_TOKEN` itself, only the
//! proxy variables that carry the token, as every run with egress does.

use std::ffi::OsString;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

/// The hidden argument.
pub const EGRESS_ARG: &str = oz0_egress::reverse::WRAPPER_ARG;
/// The guest variable carrying the run's token to the wrapper.
pub const TOKEN_VAR: &str = oz0_egress::reverse::TOKEN_VAR;
/// Where smolvm mounts the run's proxy socket in the guest.
pub const GUEST_EGRESS_SOCKET: &str = "/run/oz0/egress.sock";
/// The wrapper's flag for a runtime whose host opens the connections: the
/// bridge listens on SOCKET and takes them (`oz0_egress::reverse`).
pub const ACCEPT_FLAG: &str = oz0_egress::reverse::ACCEPT_FLAG;

/// Exit status when the wrapper could not set egress up (the server never ran).
pub const EGRESS_FAILED: i32 = oz0_core::exit::Exit::Sandbox as i32;

/// Runs the wrapper with `args` (its command line after the role's
/// argument: `SOCKET -- SERVER…`). Returns the server's exit status (128+N
/// for signal N).
pub fn egress_main(mut args: Vec<OsString>) -> i32 {
    // `--accept`: the host opens the connections (Apple's container's
    // `--publish-socket`), and the bridge takes them on SOCKET.
    let accept = args.first().is_some_and(|a| a == ACCEPT_FLAG);
    if accept {
        args.remove(0);
    }
    if args.len() < 3 || args[1] != "--" {
        eprintln!("usage: oz0-node {EGRESS_ARG} [{ACCEPT_FLAG}] SOCKET -- SERVER… (started by `sandbox vm` in a smolvm guest, or by a Mac's node in a VM of Apple's container)");
        return 2;
    }
    let socket = PathBuf::from(&args[0]);
    let cmd = &args[2..];
    let token = match std::env::var(TOKEN_VAR) {
        Ok(t) => t,
        Err(_) => {
            eprintln!("oz0-node: {EGRESS_ARG}: no {TOKEN_VAR}: it is started only by `sandbox vm`, with egress, in a smolvm guest");
            return EGRESS_FAILED;
        }
    };
    let token = match oz0_egress::Token::from_secret(&token) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("oz0-node: {EGRESS_ARG}: {e}");
            return EGRESS_FAILED;
        }
    };
    // Bound before the server starts, so its connections always find it.
    let inbound = if accept {
        match std::os::unix::net::UnixListener::bind(&socket) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!(
                    "oz0-node: {EGRESS_ARG}: cannot listen on {} for the node's connections: {e}",
                    socket.display()
                );
                return EGRESS_FAILED;
            }
        }
    } else {
        None
    };
    let listener = match TcpListener::bind(("127.0.0.1", 0)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("oz0-node: {EGRESS_ARG}: cannot listen on the guest's loopback: {e}");
            return EGRESS_FAILED;
        }
    };
    let port = match listener.local_addr() {
        Ok(a) => a.port(),
        Err(e) => {
            eprintln!("oz0-node: {EGRESS_ARG}: {e}");
            return EGRESS_FAILED;
        }
    };
    std::thread::spawn(move || {
        let served = match inbound {
            Some(inbound) => oz0_egress::reverse::serve_accepting(listener, inbound),
            None => oz0_egress::bridge::serve_copying(listener, &socket),
        };
        if let Err(e) = served {
            eprintln!("oz0-node: egress bridge: {e}");
        }
    });
    let proxy = token.proxy_env(port);
    let env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != TOKEN_VAR && !proxy.iter().any(|(p, _)| k == p.as_str()))
        .chain(proxy.iter().map(|(k, v)| (k.into(), v.into())))
        .collect();
    match Command::new(&cmd[0])
        .args(&cmd[1..])
        .env_clear()
        .envs(env)
        .status()
    {
        Ok(s) => oz0_core::exit::status_code(s),
        Err(e) => {
            eprintln!("oz0-node: cannot execute {:?}: {e}", cmd[0]);
            oz0_core::exit::exec_failure_code(&e)
        }
    }
}
