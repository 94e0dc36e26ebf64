//! `oz0`: the operator's CLI for the edge.
//!
//! ```text
//! oz0 node list [--tenant T] [--json]
//! oz0 node show|approve|drain|undrain|remove <node> [--json]
//! oz0 job tool --tenant T --plugin DIR --tool ID [--name MCP_TOOL] [--arguments JSON]
//!              [--file [NAME=]PATH]... [--timeout S] [--origin O] [--wait S] [--json]
//! oz0 job show --tenant T <job> [--json]
//! oz0 job cancel --tenant T <job> [--json]
//! ```
//!
//! The edge is `--edge URL` or `OZ0_EDGE` (`https://`, verified against the
//! system's CAs or `--edge-ca FILE`/`OZ0_EDGE_CA`; `http://` on loopback
//! only); the operator token is read from
//! `--token-file FILE` or `OZ0_OPERATOR_TOKEN_FILE`, or taken from
//! `OZ0_OPERATOR_TOKEN` (never from the command line).
//!
//! Text a job, a node or the edge controls (a job's output and result,
//! names, lines, labels, reasons, the edge's refusals) is escaped for a
//! terminal ([`oz0_edge::term::escape`]): control characters but newline
//! and tab appear as `\x1b`, `\u{9b}`, …, never acting on the terminal.
//! `--raw` prints a job's output as it wrote it; `--json` is JSON with
//! every control character escaped.
//!
//! Exit status: 0 done (with `--wait`: the job succeeded); 1 the edge
//! refused or could not be reached, or the job failed, was cancelled or did
//! not end in time; 2 bad usage. A reader that goes away (`| head`) ends
//! the output, not the command: the status is the command's own.

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use oz0_edge::client::OperatorClient;
use oz0_edge::routing::{Isolation, JobKind, JobRequest, Origin};
use oz0_edge::term;
use oz0_edge::wire::{JobView, ShellJob};
use oz0_plugin::job::{CallArgs, ToolJob};

#[path = "oz0/show.rs"]
mod show;

#[derive(Parser, Debug)]
#[command(name = "oz0", version, about = "Operate an OZ0 edge")]
struct Args {
    /// The edge (https://HOST:PORT, or http:// on loopback).
    #[arg(long, env = "OZ0_EDGE", default_value = "http://127.0.0.1:8440")]
    edge: String,
    /// The CA certificate(s) the edge's certificate must be signed by (PEM)
    /// [default: the system's CAs].
    #[arg(long, env = "OZ0_EDGE_CA", value_name = "FILE")]
    edge_ca: Option<PathBuf>,
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
    /// Jobs: submit a plugin's tool call, follow a job, cancel it.
    Job {
        #[command(subcommand)]
        cmd: JobCmd,
    },
}

#[derive(Subcommand, Debug)]
enum JobCmd {
    /// Submit a shell job: one command in a node's tier-1 sandbox.
    ///
    /// The edge checks it (its variables, hosts and limits, as `oz0-node
    /// sandbox run` would) and queues it at the tier its origin needs
    /// (outside events: tier 1), or refuses it with the reason when no live
    /// node can take it. --env NAME takes the value from this environment
    /// (no secret on a command line). With --wait, prints how it ended and
    /// the end of its output.
    ///
    /// Example:
    ///   oz0 job submit --tenant acme --origin webhook --env TOKEN --timeout 60 --wait 120 -- make test
    #[command(verbatim_doc_comment)]
    Submit {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Where the work came from: internal, webhook, event or chat.
        #[arg(long, default_value = "internal")]
        origin: String,
        /// NAME=VALUE, or NAME for the value of NAME here (repeatable).
        #[arg(long, value_name = "NAME[=VALUE]")]
        env: Vec<String>,
        /// HOST[:PORT] it may reach through the node's egress proxy (repeatable).
        #[arg(long, value_name = "HOST[:PORT]")]
        allow: Vec<String>,
        /// Wall time, seconds.
        #[arg(long, value_name = "S")]
        timeout: Option<u64>,
        /// Memory of all its processes, MiB.
        #[arg(long, value_name = "MiB")]
        memory: Option<u64>,
        /// Processes at once.
        #[arg(long, value_name = "N")]
        processes: Option<u32>,
        /// A key of yours for this job: submitting again with it returns the
        /// same job, never a second one.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Wait up to S seconds for the job to end, then print how it ended.
        #[arg(long, value_name = "S")]
        wait: Option<u64>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the job's output as it wrote it, control sequences and
        /// all (for a file: on a terminal they act, moving the cursor or
        /// setting the title or the clipboard) [default: escaped, as
        /// `\x1b[2J`].
        #[arg(long)]
        raw: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// A tenant's jobs, newest first.
    List {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Only jobs in this state: queued, leased, succeeded, failed, cancelled.
        #[arg(long)]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The end of a job's stdout and stderr (the edge keeps the last 64 KiB
    /// of each), control characters escaped unless --raw.
    Logs {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The job's id (one that begins with `-` is taken as an id, not a flag).
        #[arg(allow_hyphen_values = true)]
        job: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the job's output as it wrote it, control sequences and
        /// all (for a file: on a terminal they act, moving the cursor or
        /// setting the title or the clipboard) [default: escaped, as
        /// `\x1b[2J`].
        #[arg(long)]
        raw: bool,
    },
    /// Submit one tools/call of an installed plugin's tool.
    ///
    /// Reads DIR/oz0-plugin.yaml (never through a symbolic link), checks
    /// it, and carries it with the job: the edge routes the job by it (a
    /// microVM tool to a node whose test VM booted inside tier 1, a command
    /// tool to a tier-1 node) and refuses it, with the reason, when no live
    /// node can take it. The node starts the tool's MCP server, makes the
    /// call and completes the job with the result. Files given with --file
    /// are placed under /work/.oz0-files/ and named in the call's
    /// _meta["oz0/files"].
    ///
    /// Example:
    ///   oz0 job tool --tenant acme --plugin /opt/plugins/acme --tool acme_fetch \
    ///       --name fetch --arguments '{"url": "https://example.com"}' --wait 300
    #[command(verbatim_doc_comment)]
    Tool {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The installed plugin's folder (holding oz0-plugin.yaml).
        #[arg(long, value_name = "DIR")]
        plugin: PathBuf,
        /// The manifest's tool id (the server to start).
        #[arg(long, value_name = "ID")]
        tool: String,
        /// The MCP tool to call [default: the tool id].
        #[arg(long, value_name = "MCP_TOOL")]
        name: Option<String>,
        /// The call's arguments, a JSON object.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        arguments: String,
        /// A file for the call, placed at /work/.oz0-files/NAME (NAME: the
        /// file's own name unless given) (repeatable).
        #[arg(long, value_name = "[NAME=]PATH")]
        file: Vec<String>,
        /// Seconds for the server's start, the handshake and the call [default: 300].
        #[arg(long, value_name = "S")]
        timeout: Option<u64>,
        /// Where the work came from: internal, webhook, event or chat
        /// (outside events need tier 1).
        #[arg(long, default_value = "internal")]
        origin: String,
        /// A key of yours for this job: submitting again with it returns the
        /// same job, never a second one.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Wait up to S seconds for the job to end, then print its result.
        #[arg(long, value_name = "S")]
        wait: Option<u64>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the job's output as it wrote it, control sequences and
        /// all (for a file: on a terminal they act, moving the cursor or
        /// setting the title or the clipboard) [default: escaped, as
        /// `\x1b[2J`].
        #[arg(long)]
        raw: bool,
    },
    /// A job's state, its result or why it failed.
    Show {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The job's id (one that begins with `-` is taken as an id, not a flag).
        #[arg(allow_hyphen_values = true)]
        job: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the job's output as it wrote it, control sequences and
        /// all (for a file: on a terminal they act, moving the cursor or
        /// setting the title or the clipboard) [default: escaped, as
        /// `\x1b[2J`].
        #[arg(long)]
        raw: bool,
    },
    /// Cancel a job that has not ended: a queued one is never handed out; a
    /// leased one is stopped by its node at its next lease renewal (within a
    /// third of the lease), its server and VM with it.
    Cancel {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The job's id (one that begins with `-` is taken as an id, not a flag).
        #[arg(allow_hyphen_values = true)]
        job: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
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
    /// Let a node of a tenant that asks for approval take work (none until then).
    Approve {
        /// Its id or host name.
        node: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Give a node no new work (what it runs finishes).
    Drain {
        /// Its id or host name.
        node: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Give a drained node work again.
    Undrain {
        /// Its id or host name.
        node: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove a node: its key is refused for good (the machine comes back
    /// only with a new key, registered again).
    Remove {
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

/// Standard output: text escaped for a terminal unless `raw`, JSON with
/// every control character escaped.
#[derive(Debug, Clone, Copy)]
struct Out {
    raw: bool,
}

impl Out {
    fn text(self, s: &str) -> Result<()> {
        let shown = if self.raw {
            Cow::Borrowed(s)
        } else {
            term::escape(s.as_bytes())
        };
        term::print(&shown).context("writing to standard output")
    }

    fn json<T: serde::Serialize + ?Sized>(self, v: &T) -> Result<()> {
        let mut text = term::json(v)?;
        text.push('\n');
        term::print(&text).context("writing to standard output")
    }
}

fn origin(s: &str) -> Result<Origin> {
    Ok(match s {
        "internal" => Origin::Internal,
        "webhook" => Origin::Webhook,
        "event" => Origin::Event,
        "chat" => Origin::Chat,
        _ => bail!("--origin {s:?}: give internal, webhook, event or chat"),
    })
}

/// Waits until the job ended or `secs` passed.
async fn wait_job(client: &OperatorClient, tenant: &str, id: &str, secs: u64) -> Result<JobView> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let j = client.job(tenant, id).await?;
        if !matches!(j.state.as_str(), "queued" | "leased") || Instant::now() >= until {
            return Ok(j);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn print_job(out: Out, j: &JobView, json: bool) -> Result<()> {
    if json {
        out.json(j)
    } else {
        out.text(&show::job(j))
    }
}

async fn run_job(client: &OperatorClient, cmd: &JobCmd, out: Out) -> Result<()> {
    match cmd {
        JobCmd::Tool {
            tenant,
            plugin,
            tool,
            name,
            arguments,
            file,
            timeout,
            origin: o,
            idempotency_key,
            wait,
            json,
            raw: _,
        } => {
            let args = CallArgs {
                tool: tool.clone(),
                name: name.clone(),
                arguments: arguments.clone(),
                files: file.clone(),
                timeout: *timeout,
            };
            // The edge checks it again; checking here names the fix first.
            let (job, _) = ToolJob::from_plugin(plugin, &args).map_err(anyhow::Error::msg)?;
            let req = request(
                o,
                JobKind::Tool,
                serde_json::to_value(&job)?,
                idempotency_key,
            )?;
            submitted(client, tenant, &req, *wait, *json, out).await?;
        }
        JobCmd::Submit {
            tenant,
            origin: o,
            env,
            allow,
            timeout,
            memory,
            processes,
            idempotency_key,
            wait,
            json,
            raw: _,
            command,
        } => {
            let shell = ShellJob {
                command: command.clone(),
                env: vars(env)?,
                allow: allow.clone(),
                timeout: *timeout,
                memory: *memory,
                processes: *processes,
                ..ShellJob::default()
            };
            shell.check().map_err(anyhow::Error::msg)?;
            let req = request(
                o,
                JobKind::Shell,
                serde_json::to_value(&shell)?,
                idempotency_key,
            )?;
            submitted(client, tenant, &req, *wait, *json, out).await?;
        }
        JobCmd::List {
            tenant,
            state,
            limit,
            json,
        } => {
            let page = client
                .jobs(tenant, state.as_deref(), None, Some((*limit).clamp(1, 500)))
                .await?;
            if *json {
                out.json(&page)?;
            } else {
                out.text(&show::jobs(&page.jobs))?;
            }
        }
        JobCmd::Logs {
            tenant, job, json, ..
        } => {
            let l = client.job_logs(tenant, job).await?;
            if *json {
                out.json(&l)?;
            } else {
                out.text(&show::logs(&l))?;
            }
        }
        JobCmd::Show {
            tenant, job, json, ..
        } => {
            print_job(out, &client.job(tenant, job).await?, *json)?;
        }
        JobCmd::Cancel { tenant, job, json } => {
            print_job(out, &client.cancel_job(tenant, job).await?, *json)?;
        }
    }
    Ok(())
}

/// `--env NAME=VALUE`, or `--env NAME` for this shell's value.
fn vars(env: &[String]) -> Result<std::collections::BTreeMap<String, String>> {
    let mut vars = std::collections::BTreeMap::new();
    for e in env {
        let (k, v) = match e.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (
                e.clone(),
                std::env::var(e).with_context(|| {
                    format!("--env {e}: {e} is not set here: export it, or give --env {e}=VALUE")
                })?,
            ),
        };
        vars.insert(k, v);
    }
    Ok(vars)
}

/// A job request: its tier and isolation are the edge's to decide.
fn request(
    o: &str,
    kind: JobKind,
    payload: serde_json::Value,
    key: &Option<String>,
) -> Result<JobRequest> {
    Ok(JobRequest {
        origin: origin(o)?,
        kind,
        tier: 0,
        isolation: Isolation::None,
        arch: None,
        payload,
        idempotency_key: key.clone(),
    })
}

/// Submits `req`; with `wait`, waits for its end and says how it went.
async fn submitted(
    client: &OperatorClient,
    tenant: &str,
    req: &JobRequest,
    wait: Option<u64>,
    json: bool,
    out: Out,
) -> Result<()> {
    let a = client.submit_job(tenant, req).await?;
    match wait {
        None if json => out.json(&a)?,
        None => out.text(&format!(
            "job {} {} at tier {} ({} eligible node(s)): oz0 job show --tenant {tenant} {}\n",
            a.job_id,
            if a.existing {
                "was queued before (the same idempotency key)"
            } else {
                "queued"
            },
            a.tier,
            a.eligible_nodes,
            a.job_id
        ))?,
        Some(secs) => {
            let j = wait_job(client, tenant, &a.job_id, secs).await?;
            print_job(out, &j, json)?;
            if !json && j.kind == "shell" {
                if let Ok(l) = client.job_logs(tenant, &j.job_id).await {
                    for t in [&l.stdout_tail, &l.stderr_tail].into_iter().flatten() {
                        out.text(t)?;
                    }
                }
            }
            match j.state.as_str() {
                        "succeeded" => {}
                        "queued" | "leased" => bail!("job {} did not end within {secs} s (it goes on: oz0 job show --tenant {tenant} {})", j.job_id, j.job_id),
                        s => bail!("job {} {s}", j.job_id),
                    }
        }
    }
    Ok(())
}

async fn run(args: Args) -> Result<()> {
    let trust = match &args.edge_ca {
        Some(f) => oz0_edge::client::Trust::CaFile(f.clone()),
        None => oz0_edge::client::Trust::System,
    };
    let client = OperatorClient::with_trust(&args.edge, &token(&args)?, &trust)?;
    let out = Out {
        raw: matches!(
            &args.cmd,
            Cmd::Job {
                cmd: JobCmd::Submit { raw: true, .. }
                    | JobCmd::Tool { raw: true, .. }
                    | JobCmd::Logs { raw: true, .. }
                    | JobCmd::Show { raw: true, .. }
            }
        ),
    };
    match &args.cmd {
        Cmd::Job { cmd } => run_job(&client, cmd, out).await?,
        Cmd::Node {
            cmd: NodeCmd::List { tenant, json },
        } => {
            let nodes = client.nodes(tenant.as_deref()).await?;
            if *json {
                out.json(&nodes)?;
            } else {
                out.text(&show::nodes(&nodes))?;
            }
        }
        Cmd::Node {
            cmd:
                NodeCmd::Approve { node, json }
                | NodeCmd::Drain { node, json }
                | NodeCmd::Undrain { node, json }
                | NodeCmd::Remove { node, json },
        } => {
            let action = match &args.cmd {
                Cmd::Node {
                    cmd: NodeCmd::Approve { .. },
                } => "approve",
                Cmd::Node {
                    cmd: NodeCmd::Drain { .. },
                } => "drain",
                Cmd::Node {
                    cmd: NodeCmd::Undrain { .. },
                } => "undrain",
                _ => "remove",
            };
            let n = client.node_action(node, action).await?;
            if *json {
                out.json(&n)?;
            } else {
                out.text(&show::node(&n))?;
            }
        }
        Cmd::Node {
            cmd: NodeCmd::Show { node, json },
        } => {
            let n = client.node(node).await?;
            if *json {
                out.json(&n)?;
            } else {
                out.text(&show::node(&n))?;
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
            // The reason may be the edge's words: escaped like any other.
            let line = format!("oz0: {}\n", term::escape(format!("{e:#}").as_bytes()));
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            std::process::ExitCode::from(1)
        }
    }
}
