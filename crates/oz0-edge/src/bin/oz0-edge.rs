//! `oz0-edge`: the edge server.
//!
//! ```text
//! oz0-edge --listen 127.0.0.1:8440 --store sqlite:/var/lib/oz0-edge/edge.db \
//!          --tenant-tokens /etc/oz0-edge/tenants --operator-tokens /etc/oz0-edge/operators
//! ```
//!
//! Secrets never go on the command line (other users can read it): the
//! tenant file holds `TENANT=ENROLMENT_TOKEN` lines, the operator file one
//! token a line; both must be mode 0600. `#` starts a comment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Parser;
use oz0_edge::auth::{TokenDigest, MIN_TOKEN_CHARS};
use oz0_edge::routing::is_tenant;
use oz0_edge::{Edge, EdgeConfig, Store};

#[derive(Parser, Debug)]
#[command(
    name = "oz0-edge",
    version,
    about = "The OZ0 edge: node registry, routing by proven tier, the Nodes page"
)]
struct Args {
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
    /// A node counts as live this long after its last request, in seconds.
    #[arg(long, default_value_t = 600)]
    node_live_secs: u32,
}

fn read_secret_file(path: &Path) -> Result<Vec<String>> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            bail!(
                "{} has mode {:o}, readable by others: chmod 600 {}",
                path.display(),
                mode & 0o777,
                path.display()
            );
        }
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
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
    let args = Args::parse();
    let mut tenants = BTreeMap::new();
    for (i, line) in read_secret_file(&args.tenant_tokens)?.iter().enumerate() {
        let Some((t, secret)) = line.split_once('=') else {
            bail!(
                "{} line {}: write TENANT=TOKEN",
                args.tenant_tokens.display(),
                i + 1
            );
        };
        if !is_tenant(t) {
            bail!(
                "{} line {}: a tenant is lower-case letters, digits, - and _ (at most 63)",
                args.tenant_tokens.display(),
                i + 1
            );
        }
        check_token(secret, &args.tenant_tokens, i + 1)?;
        tenants.insert(t.to_string(), TokenDigest::new(secret));
    }
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
    let n_tenants = cfg.tenant_tokens.len();
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!(
        "oz0-edge: listening on http://{addr} (store {}, {n_tenants} tenant(s))",
        store.kind()
    );
    oz0_edge::serve(listener, Edge::new(store, cfg))
        .await
        .context("serving")?;
    Ok(())
}
