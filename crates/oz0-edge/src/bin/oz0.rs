//! `oz0`: the operator's CLI for the edge.
//!
//! ```text
//! oz0 node list [--tenant T] [--json]
//! oz0 node show <node> [--json]
//! ```
//!
//! The edge is `--edge URL` or `OZ0_EDGE`; the operator token is read from
//! `--token-file FILE` or `OZ0_OPERATOR_TOKEN_FILE`, or taken from
//! `OZ0_OPERATOR_TOKEN` (never from the command line).
//!
//! Exit status: 0 done; 1 the edge refused or could not be reached;
//! 2 bad usage.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use oz0_edge::client::OperatorClient;
use oz0_edge::wire::NodeView;

#[derive(Parser, Debug)]
#[command(name = "oz0", version, about = "Operate an OZ0 edge")]
struct Args {
    /// The edge (http://HOST:PORT).
    #[arg(long, env = "OZ0_EDGE", default_value = "http://127.0.0.1:8440")]
    edge: String,
    /// File holding the operator token.
    #[arg(long, env = "OZ0_OPERATOR_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Nodes.
    Node {
        #[command(subcommand)]
        cmd: NodeCmd,
    },
}

#[derive(Subcommand, Debug)]
enum NodeCmd {
    /// One line per node.
    List {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One node: tier, mechanism, fix, MicroVMs, last report.
    Show {
        /// Its id or host name.
        node: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn token(args: &Args) -> Result<String> {
    if let Some(f) = &args.token_file {
        let t = std::fs::read_to_string(f)
            .with_context(|| format!("reading the operator token from {}", f.display()))?;
        return Ok(t.trim().to_string());
    }
    std::env::var("OZ0_OPERATOR_TOKEN").context(
        "no operator token: set OZ0_OPERATOR_TOKEN_FILE (or --token-file) or OZ0_OPERATOR_TOKEN",
    )
}

fn show(n: &NodeView) -> String {
    let mut s = String::new();
    let name = n
        .name
        .as_deref()
        .map(|x| format!(" ({x})"))
        .unwrap_or_default();
    s.push_str(&format!("Node {}{name}, tenant {}\n", n.id, n.tenant));
    s.push_str(&format!("Platform: {}\n", n.platform_line));
    s.push_str(&format!("Tier: {}\n", n.tier_line));
    if let Some(note) = &n.routed_note {
        s.push_str(&format!("Routing: {note}\n"));
    }
    s.push_str(&format!("Mechanism: {}\n", n.mechanism_line));
    s.push_str(&format!("Fix: {}\n", n.fix.as_deref().unwrap_or("none")));
    s.push_str(&format!("MicroVMs: {}\n", n.microvm_line));
    if let Some(f) = &n.facts {
        let labels: Vec<String> = f.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("Labels: {}\n", labels.join(" ")));
    }
    s.push_str(&format!(
        "Last report: {}{}\n",
        n.last_report.as_deref().unwrap_or("never"),
        if n.dropped_last > 0 {
            format!(" ({} field(s) dropped)", n.dropped_last)
        } else {
            String::new()
        }
    ));
    s
}

async fn run(args: Args) -> Result<()> {
    let client = OperatorClient::new(&args.edge, &token(&args)?)?;
    match &args.cmd {
        Cmd::Node {
            cmd: NodeCmd::List { tenant, json },
        } => {
            let nodes = client.nodes(tenant.as_deref()).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&nodes)?);
            } else {
                for n in &nodes {
                    println!(
                        "{}  {:<20} {:<10} {:<32} MicroVMs: {}  last report: {}",
                        n.id,
                        n.name.as_deref().unwrap_or("-"),
                        n.tenant,
                        n.tier_line,
                        n.microvm_line,
                        n.last_report.as_deref().unwrap_or("never")
                    );
                }
            }
        }
        Cmd::Node {
            cmd: NodeCmd::Show { node, json },
        } => {
            let n = client.node(node).await?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&n)?);
            } else {
                print!("{}", show(&n));
            }
        }
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oz0: cannot start: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oz0: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
