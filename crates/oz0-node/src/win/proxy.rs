//! `sandbox proxy`: one run's egress proxy on a loopback TCP port.
//!
//! The same proxy the node's runs reach (`oz0-egress`): the run's token in
//! constant time before anything else (407), the allowlist with the code
//! that checked `--allow` (403), names under `.invalid` refused before any
//! lookup, one JSON line per decision, never the token. The token is read
//! from `--token-file`, or made and written there (a new file) when it does
//! not exist: it never appears on a command line or in a log.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use oz0_core::exit::Exit;
use oz0_egress::{AuditSink, FileSink, Proxy, ProxyConfig, StderrSink, Token};
use oz0_policy::net::Egress;

use super::log;

/// `sandbox proxy` flags.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// The loopback address to listen on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Let requests reach HOST[:PORT] (repeatable).
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// Let requests reach the node-local 127.0.0.1:PORT (repeatable).
    #[arg(long = "forward", value_name = "PORT")]
    pub forward: Vec<u16>,
    /// The run's token: read from FILE, or made and written to FILE (a new
    /// file) when it does not exist. Clients send it as
    /// `Proxy-Authorization: Basic` of `oz0:<token>`.
    #[arg(long = "token-file", value_name = "FILE")]
    pub token_file: PathBuf,
    /// Append each decision's JSON line to FILE [default: stderr].
    #[arg(long = "audit-log", value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// The run's id in the audit lines.
    #[arg(long = "run-id", value_name = "ID", default_value = "proxy")]
    pub run_id: String,
}

/// The token in `path`, or a new one written there.
fn token(path: &std::path::Path) -> Result<Token, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Token::from_secret(t.trim()).map_err(|e| {
            format!(
                "--token-file {}: {e}: remove the file to have a new token made",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let t = Token::generate().map_err(|e| e.to_string())?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .and_then(|mut f| f.write_all(t.expose().as_bytes()))
                .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
            Ok(t)
        }
        Err(e) => Err(format!("--token-file {}: {e}", path.display())),
    }
}

/// Runs `sandbox proxy` until Ctrl-C.
pub fn main(a: ProxyArgs) -> i32 {
    let egress = match Egress::parse(&a.allow, &a.forward) {
        Ok(e) => e,
        Err(e) => {
            log(&format!("--allow/--forward: {e}"));
            return Exit::Usage.code();
        }
    };
    let token = match token(&a.token_file) {
        Ok(t) => t,
        Err(e) => {
            log(&e);
            return Exit::Usage.code();
        }
    };
    let audit: Arc<dyn AuditSink> = match &a.audit_log {
        None => Arc::new(StderrSink),
        Some(p) => match std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(p)
        {
            Ok(f) => Arc::new(FileSink::new(f)),
            Err(e) => {
                log(&format!("--audit-log {}: {e}", p.display()));
                return Exit::Usage.code();
            }
        },
    };
    let proxy = match Proxy::start(ProxyConfig {
        audit,
        ..ProxyConfig::default()
    }) {
        Ok(p) => p,
        Err(e) => {
            log(&e.to_string());
            return Exit::CheckFailed.code();
        }
    };
    let guard = match proxy.add_run_tcp(a.run_id.clone(), token, egress, a.listen) {
        Ok(g) => g,
        Err(e) => {
            log(&e.to_string());
            return Exit::Usage.code();
        }
    };
    let addr = guard.tcp_addr().expect("a TCP run has an address");
    println!(
        "Egress proxy for run {}: listening on {addr} (the token is in {}); Ctrl-C stops it",
        a.run_id,
        a.token_file.display()
    );
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(&format!("cannot start the event loop: {e}"));
            return Exit::CheckFailed.code();
        }
    };
    let _ = rt.block_on(tokio::signal::ctrl_c());
    drop(guard);
    proxy.shutdown();
    log("stopping");
    Exit::Ok.code()
}
