//! `oz0-edge`: the edge server.
//!
//! ```text
//! oz0-edge --listen 0.0.0.0:8440 --tls-cert /etc/oz0-edge/edge.crt --tls-key /etc/oz0-edge/edge.key \
//!          --store sqlite:/var/lib/oz0-edge/edge.db \
//!          --tenant-tokens /etc/oz0-edge/tenants --operator-tokens /etc/oz0-edge/operators
//! ```
//!
//! Every flag may live in `/etc/oz0/edge.toml` instead (another file with
//! `--config` or `OZ0_EDGE_CONFIG`), under its long name
//! (`listen = "0.0.0.0:8440"`); a flag given overrides the file, and
//! `--show-config` prints the effective settings and where each came from.
//!
//! Secrets never go on the command line (other users can read it): the
//! tenant file holds `TENANT=ENROLMENT_TOKEN` lines, the operator file one
//! token a line; both must be mode 0600. `#` starts a comment. Off
//! loopback the edge serves only HTTPS (SIGHUP loads the certificate and
//! key again); everything it writes is its user's alone (umask 077).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Parser;
use oz0_edge::auth::{TokenDigest, MIN_TOKEN_CHARS};
use oz0_edge::routing::is_tenant;
use oz0_edge::serve::{Limits, ServerCert};
use oz0_edge::{Edge, EdgeConfig, Store};

#[derive(Parser, Debug)]
#[command(
    name = "oz0-edge",
    version,
    about = "The OZ0 edge: node registry, routing by proven tier, the Nodes page",
    after_help = "Signals:\n  \
SIGHUP           loads --tls-cert and --tls-key again without dropping a connection\n  \
SIGTERM, SIGINT  stop the edge: it takes no new connection, answers the requests it\n                   \
holds (long polls, held renewals, followed logs), lets open connections\n                   \
finish what they were asked (at most 10 s), closes its store, exits 0"
)]
struct Args {
    /// The config file [default: /etc/oz0/edge.toml when it exists; also
    /// OZ0_EDGE_CONFIG]: keys named like these flags.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Read no config file.
    #[arg(long = "no-config", conflicts_with = "config")]
    no_config: bool,
    /// Print the effective settings (each with the file and line, the
    /// flag, the environment or the default it came from; a store's
    /// password hidden) and exit.
    #[arg(long = "show-config")]
    show_config: bool,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8440")]
    listen: String,
    /// Store: sqlite:PATH, sqlite::memory: or postgres://USER@HOST/DB (also OZ0_EDGE_STORE).
    #[arg(
        long,
        env = "OZ0_EDGE_STORE",
        default_value = "sqlite:oz0-edge.db",
        hide_env_values = true
    )]
    store: String,
    /// File of TENANT=ENROLMENT_TOKEN lines (mode 0600).
    #[arg(long)]
    tenant_tokens: PathBuf,
    /// File of operator tokens, one a line (mode 0600).
    #[arg(long)]
    operator_tokens: PathBuf,
    /// How long a lease lasts unless renewed, in seconds.
    #[arg(long, default_value_t = 30)]
    lease_secs: u32,
    /// A node is up (and can be given work) while it was heard from within
    /// this many seconds: it polls every 2 s, and renews each job's lease
    /// every third of the lease.
    #[arg(long, default_value_t = 30)]
    node_live_secs: u32,
    /// The certificate chain to serve HTTPS with (PEM; loaded again on SIGHUP).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM, mode 0600; loaded again on SIGHUP).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// New nodes of TENANT wait for an operator's approval (oz0 node approve)
    /// and take no work at all until then (repeatable).
    #[arg(long = "require-approval", value_name = "TENANT")]
    require_approval: Vec<String>,
    /// TENANT's --oci gvisor: its container tools (an image without
    /// isolation: microvm) run only on nodes whose runtime.oci offers
    /// gVisor, and are refused at submit, with the reason, where none is
    /// live. Its microVM tools still run in their VMs (repeatable).
    #[arg(long = "oci-gvisor", value_name = "TENANT")]
    oci_gvisor: Vec<String>,
    /// The signed releases nodes fetch: DIR/<version>/release.json and
    /// its files, as `oz0 release sign --dir DIR` writes them (a Mac's
    /// nodes fetch the Linux node binary their microVMs' bridge runs, and
    /// check it against the release key they were built with).
    #[arg(long = "release-dir", value_name = "DIR")]
    release_dir: Option<PathBuf>,
    /// Connections open at once; more are closed as they arrive. The last
    /// eighth is kept for addresses nodes and operators used in the last
    /// 10 minutes. Each is an open file: the edge raises its soft limit to
    /// the hard one, and serves fewer (and says so) when even that is too
    /// low.
    #[arg(long, value_name = "N", default_value_t = 16384)]
    max_connections: usize,
    /// Connections open at once from one client address (an IPv6 /64
    /// counts as one); more are closed as they arrive. Raise it for many
    /// nodes behind one NAT address, or a proxy in front of the edge.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_connections_per_client: usize,
    /// Log lines as text or one JSON object a line.
    #[arg(long, value_name = "text|json", default_value = "text")]
    log_format: String,
}

/// The keys of /etc/oz0/edge.toml.
const KEYS: &[&str] = &[
    "listen",
    "store",
    "tenant-tokens",
    "operator-tokens",
    "lease-secs",
    "node-live-secs",
    "tls-cert",
    "tls-key",
    "require-approval",
    "oci-gvisor",
    "max-connections",
    "max-connections-per-client",
    "log-format",
];

const CONFIG: oz0_config::Spec = oz0_config::Spec {
    program: "oz0-edge",
    default_path: "/etc/oz0/edge.toml",
    env: "OZ0_EDGE_CONFIG",
    commands: &[(&[], KEYS)],
};

/// A store URL with its passwords hidden (`postgres://u:***@h/db`,
/// `postgres://u@h/db?password=***`), and whether it held one. The store
/// takes only URLs (`sqlite:`, `postgres://`), never the `key=value` form.
fn hide_password(url: &str) -> (String, bool) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), false);
    };
    let mut held = false;
    // Up to the last `@`: a password may hold an `@` left unescaped.
    let rest = match rest.rsplit_once('@') {
        Some((auth, host)) => match auth.split_once(':') {
            Some((user, _)) => {
                held = true;
                format!("{user}:***@{host}")
            }
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    // PostgreSQL takes the password as a parameter too; its name is
    // percent-decoded before it is looked at, so `pass%77ord` is one, and
    // any case of it is hidden as well.
    let rest = match rest.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if percent_decoded(k).eq_ignore_ascii_case("password") => {
                        held = true;
                        format!("{k}=***")
                    }
                    _ => p.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => rest,
    };
    (format!("{scheme}://{rest}"), held)
}

/// `s` with its `%XX` escapes decoded (a `%` not followed by two hex
/// digits is kept as it is).
fn percent_decoded(s: &str) -> String {
    fn hex(c: Option<&u8>) -> Option<u8> {
        match c? {
            c @ b'0'..=b'9' => Some(c - b'0'),
            c @ b'a'..=b'f' => Some(c - b'a' + 10),
            c @ b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], hex(b.get(i + 1)), hex(b.get(i + 2))) {
            (b'%', Some(h), Some(l)) => {
                out.push(h * 16 + l);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads the command line and the config file; `None` when the program
/// ends here (help, version, --show-config, an error already printed).
fn args() -> Result<Option<Args>> {
    use clap::{CommandFactory, FromArgMatches};
    let applied = match oz0_config::apply(&Args::command(), std::env::args_os().collect(), &CONFIG)
    {
        Ok(a) => a,
        Err(e) => {
            // A usage error, as a wrong flag is.
            eprintln!("oz0-edge: {e}");
            std::process::exit(2);
        }
    };
    if let Some(f) = &applied.file {
        #[cfg(unix)]
        if let Some(e) = f.entries.iter().find(|e| e.key == "store") {
            use std::os::unix::fs::PermissionsExt;
            let url = e.values[0].to_string_lossy();
            let mode = std::fs::metadata(&f.path)?.permissions().mode() & 0o777;
            if hide_password(&url).1 && mode & 0o004 != 0 {
                eprintln!(
                    "oz0-edge: {}:{}: `store` holds a password and the file is readable by everyone (mode {mode:o}) — chmod o-r {} (or keep the URL in OZ0_EDGE_STORE)",
                    f.path.display(),
                    e.line,
                    f.path.display()
                );
                std::process::exit(2);
            }
        }
    }
    let cmd = Args::command();
    let lenient = cmd
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&applied.argv);
    if let Ok(m) = &lenient {
        if m.get_flag("show_config") {
            let s = oz0_config::effective(m, &applied, KEYS, &cmd, &|k, v| {
                if k == "store" {
                    hide_password(v).0
                } else {
                    v.to_string()
                }
            });
            let head = match &applied.file {
                Some(f) => format!("# oz0-edge, with {}\n", f.path.display()),
                None => "# oz0-edge, with no config file\n".to_string(),
            };
            oz0_edge::term::print(&(head + &oz0_config::render(&s)))
                .context("writing to standard output")?;
            return Ok(None);
        }
    }
    match cmd.try_get_matches_from(&applied.argv) {
        Ok(m) => Ok(Some(Args::from_arg_matches(&m)?)),
        Err(e) => e.exit(),
    }
}

fn read_secret_file(path: &Path) -> Result<Vec<String>> {
    let text = oz0_edge::auth::read_private(path)?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

fn check_token(t: &str, path: &Path, line: usize) -> Result<()> {
    if t.chars().count() < MIN_TOKEN_CHARS || t.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        bail!("{} line {line}: a token is at least {MIN_TOKEN_CHARS} characters without spaces: make one with `head -c 32 /dev/urandom | base64`", path.display());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let Some(args) = args()? else {
        return Ok(());
    };
    // The store, its journal and anything else the edge writes are its
    // user's alone: the store holds job payloads and their secrets.
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    match args.log_format.as_str() {
        "text" => {}
        "json" => oz0_edge::log::set_json(true),
        other => bail!("--log-format {other:?}: give text or json"),
    }
    let max_connections = connections_that_fit(args.max_connections.max(1));
    let tenants = tenants(&args.tenant_tokens)?;
    let mut operators = Vec::new();
    for (i, t) in read_secret_file(&args.operator_tokens)?.iter().enumerate() {
        check_token(t, &args.operator_tokens, i + 1)?;
        operators.push(TokenDigest::new(t));
    }
    if tenants.is_empty() || operators.is_empty() {
        bail!(
            "the edge needs at least one tenant token and one operator token: see oz0-edge --help"
        );
    }
    let store = Store::open(&args.store)
        .await
        .context("opening the store")?;
    let mut cfg = EdgeConfig::new(tenants, operators);
    cfg.lease_ms = i64::from(args.lease_secs.max(1)) * 1000;
    cfg.node_live_ms = i64::from(args.node_live_secs.max(1)) * 1000;
    for t in &args.require_approval {
        if !cfg.tenant_tokens.contains_key(t) {
            bail!(
                "--require-approval {t:?}: no such tenant in {}",
                args.tenant_tokens.display()
            );
        }
        cfg.approval_tenants.insert(t.clone());
    }
    for t in &args.oci_gvisor {
        if !cfg.tenant_tokens.contains_key(t) {
            bail!(
                "--oci-gvisor {t:?}: no such tenant in {}",
                args.tenant_tokens.display()
            );
        }
        cfg.gvisor_tenants.insert(t.clone());
    }
    if let Some(d) = &args.release_dir {
        if !d.is_dir() {
            bail!(
                "--release-dir {}: not a folder: make it, then `oz0 release sign --dir` into it",
                d.display()
            );
        }
        cfg.release_dir = Some(d.clone());
    }
    let n_tenants = cfg.tenant_tokens.len();
    let addr: std::net::SocketAddr = match args.listen.parse() {
        Ok(a) => a,
        Err(_) => tokio::net::lookup_host(&args.listen)
            .await
            .with_context(|| format!("--listen {}", args.listen))?
            .next()
            .with_context(|| format!("--listen {}: no address", args.listen))?,
    };
    let tls = server_cert(&args, addr)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let addr = listener.local_addr()?;
    let stop = stop_signals();
    let scheme = if tls.is_some() { "https" } else { "http" };
    oz0_edge::term::print(&format!(
        "oz0-edge: listening on {scheme}://{addr} (store {}, {n_tenants} tenant(s))\n",
        store.kind()
    ))
    .context("writing to standard output")?;
    let config = match &tls {
        Some(cert) => Some(tls_config(cert)?),
        None => None,
    };
    let limits = Limits {
        max_connections,
        max_connections_per_client: args.max_connections_per_client.max(1),
        ..Limits::default()
    };
    let stop = async {
        let why = stop.await;
        oz0_edge::log::info(
            &format!(
                "{why}: stopping: held requests are answered, open connections finish what they were asked (at most {} s), and the store is closed as the edge exits",
                oz0_edge::serve::DRAIN.as_secs()
            ),
            None,
        );
    };
    oz0_edge::serve_until(listener, Edge::new(store, cfg), config, limits, stop)
        .await
        .context("serving")?;
    // Returning drops the runtime, its tasks and with them the store: a
    // SQLite store is closed cleanly (its journal copied back into the
    // file and removed), so that the file alone is the whole store.
    Ok(())
}

/// The signals a service manager or a terminal stops the edge with, their
/// handlers set now (before the edge says it listens): the future ends
/// with the name of the first to come.
fn stop_signals() -> impl std::future::Future<Output = &'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, Signal, SignalKind};
        // A signal whose handler could not be set keeps its default: it
        // stops the edge at once, as it did before there were handlers.
        async fn next(s: Option<Signal>) {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            tokio::select! {
                _ = next(term) => "SIGTERM",
                _ = next(int) => "SIGINT",
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// How many of `wanted` connections the open-file limit fits (each
/// connection is an open file), raising the soft limit first.
fn connections_that_fit(wanted: usize) -> usize {
    #[cfg(unix)]
    {
        use oz0_edge::serve::open_files;
        let (fits, said) = open_files::plan(wanted, &open_files::raise());
        match said {
            Some((oz0_edge::log::Level::Info, text)) => oz0_edge::log::info(&text, None),
            Some((_, text)) => oz0_edge::log::warn(&text, None),
            None => {}
        }
        fits
    }
    #[cfg(not(unix))]
    wanted
}

/// The tenant file's `TENANT=TOKEN` lines.
fn tenants(path: &Path) -> Result<BTreeMap<String, TokenDigest>> {
    let mut tenants = BTreeMap::new();
    for (i, line) in read_secret_file(path)?.iter().enumerate() {
        let Some((t, secret)) = line.split_once('=') else {
            bail!("{} line {}: write TENANT=TOKEN", path.display(), i + 1);
        };
        if !is_tenant(t) {
            bail!(
                "{} line {}: a tenant is lower-case letters, digits, - and _ (at most 63)",
                path.display(),
                i + 1
            );
        }
        check_token(secret, path, i + 1)?;
        tenants.insert(t.to_string(), TokenDigest::new(secret));
    }
    Ok(tenants)
}

/// The certificate and key to serve HTTPS with; plain HTTP only on
/// loopback.
fn server_cert(args: &Args, addr: std::net::SocketAddr) -> Result<Option<Arc<ServerCert>>> {
    match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => {
            if let Ok(m) = std::fs::metadata(k) {
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    let mode = m.permissions().mode() & 0o777;
                    if mode & 0o077 != 0 {
                        bail!("--tls-key {} has mode {mode:o}, readable by others: chmod 600 {}", k.display(), k.display());
                    }
                }
                #[cfg(not(unix))]
                let _ = m;
            }
            Ok(Some(ServerCert::load(c, k).map_err(anyhow::Error::msg)?))
        }
        _ if !addr.ip().is_loopback() => bail!(
            "--listen {addr} is off loopback, and the edge serves plain HTTP only on loopback (tokens, jobs and their secrets would cross the network in clear): give --tls-cert FILE and --tls-key FILE, or listen on 127.0.0.1"
        ),
        _ => Ok(None),
    }
}

/// The TLS configuration that presents `cert`, which SIGHUP loads again.
fn tls_config(cert: &Arc<ServerCert>) -> Result<Arc<rustls::ServerConfig>> {
    #[cfg(unix)]
    {
        let cert = cert.clone();
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("watching for SIGHUP")?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match cert.reload() {
                    Ok(()) => oz0_edge::log::info(
                        "SIGHUP: the TLS certificate and key were loaded again",
                        None,
                    ),
                    Err(e) => oz0_edge::log::error(
                        &format!("SIGHUP: {e}; still serving the previous certificate"),
                        None,
                    ),
                }
            }
        });
    }
    cert.config().map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_passwords_are_hidden_wherever_the_url_holds_them() {
        for (url, shown) in [
            (
                "postgres://edge:hunter22@db/edge",
                "postgres://edge:***@db/edge",
            ),
            (
                "postgres://edge:p@ss@db/edge",
                "postgres://edge:***@db/edge",
            ),
            (
                "postgres://edge@db/edge?password=hunter22",
                "postgres://edge@db/edge?password=***",
            ),
            (
                "postgresql://edge@db/edge?sslmode=require&PassWord=hunter22&application_name=e",
                "postgresql://edge@db/edge?sslmode=require&PassWord=***&application_name=e",
            ),
            (
                "postgres://edge@db/edge?pass%77ord=hunter22",
                "postgres://edge@db/edge?pass%77ord=***",
            ),
            (
                "postgres://edge@db/edge?password=hun@ter:22",
                "postgres://edge@db/edge?password=***",
            ),
            (
                "postgres://edge:hunter22@db/edge?password=hunter23",
                "postgres://edge:***@db/edge?password=***",
            ),
        ] {
            assert_eq!(hide_password(url), (shown.to_string(), true), "{url}");
        }
        for url in [
            "postgres://edge@db/edge",
            "postgres://edge@db/edge?sslmode=require&passwords=x",
            "postgres://db/edge?user=edge",
            "sqlite:/var/lib/oz0-edge/edge.db",
            "sqlite::memory:",
        ] {
            assert_eq!(hide_password(url), (url.to_string(), false), "{url}");
        }
    }
}
