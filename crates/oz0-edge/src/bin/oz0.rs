//! `oz0`: the operator's CLI for the edge.
//!
//! ```text
//! oz0 node list [--tenant T] [--all] [-o json|wide]
//! oz0 node show|approve|undrain|remove <node> [--json]
//! oz0 node drain <node> [--deadline 10m] [--json]
//! oz0 job submit|tool … [--wait S] [--json]
//! oz0 job list [--state S] [-o json|wide]
//! oz0 job show|cancel|rerun <job> [--json]
//! oz0 job logs [-f] <job>
//! oz0 completion bash|zsh|fish|elvish|powershell
//! oz0 man [--dir DIR]
//! ```
//!
//! The edge is `--edge URL` or `OZ0_EDGE` (`https://`, verified against the
//! system's CAs or `--edge-ca FILE`/`OZ0_EDGE_CA`; `http://` on loopback
//! only); the operator token is read from
//! `--token-file FILE` or `OZ0_OPERATOR_TOKEN_FILE`, or taken from
//! `OZ0_OPERATOR_TOKEN` (never from the command line). The tenant is
//! `--tenant`, `OZ0_TENANT`, the settings file's `tenant`, or the edge's
//! only tenant. Settings the flags and variables leave unset come from
//! `OZ0_CONFIG` or `~/.config/oz0/config.toml` (`edge`, `edge-ca`,
//! `token-file`, `tenant`).
//!
//! Text a job, a node or the edge controls (a job's output and result,
//! names, lines, labels, reasons, the edge's refusals) is escaped for a
//! terminal ([`oz0_edge::term::escape`]): control characters but newline
//! and tab appear as `\x1b`, `\u{9b}`, …, never acting on the terminal.
//! `--raw` prints a job's output as it wrote it; `--json` is JSON with
//! every control character escaped.
//!
//! Exit status ([`Status`]): 0 done (with `--wait` or `logs -f`: the job
//! succeeded); the job's own exit status (1-255) when it failed with one;
//! 1 the edge refused or could not be reached, or the job failed without
//! an exit status or was cancelled; 2 bad usage; 124 the job did not end
//! within `--wait`. A reader that goes away (`| head`) ends the output,
//! not the command: the status is the command's own.

use std::borrow::Cow;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use oz0_edge::client::OperatorClient;
use oz0_edge::routing::{JobPayload, JobRequest, Origin};
use oz0_edge::term;
use oz0_edge::wire::{Accepted, JobView, ShellJob};
use oz0_plugin::job::{CallArgs, ToolJob};

#[path = "oz0/follow.rs"]
mod follow;
#[path = "oz0/release.rs"]
mod release;
#[path = "oz0/settings.rs"]
mod settings;
#[path = "oz0/show.rs"]
mod show;

use follow::Status;

#[derive(Parser, Debug)]
#[command(name = "oz0", version, about = "Operate an OZ0 edge")]
struct Args {
    /// The edge (https://HOST:PORT, or http:// on loopback) [default:
    /// the settings file's `edge`; none else: the operator token goes only
    /// to an edge named].
    #[arg(
        long,
        env = "OZ0_EDGE",
        global = true,
        help_heading = "Edge and tenant"
    )]
    edge: Option<String>,
    /// The CA certificate(s) the edge's certificate must be signed by (PEM)
    /// [default: the system's CAs].
    #[arg(
        long,
        env = "OZ0_EDGE_CA",
        value_name = "FILE",
        global = true,
        help_heading = "Edge and tenant"
    )]
    edge_ca: Option<PathBuf>,
    /// File holding the operator token.
    #[arg(
        long,
        env = "OZ0_OPERATOR_TOKEN_FILE",
        global = true,
        help_heading = "Edge and tenant"
    )]
    token_file: Option<PathBuf>,
    /// The tenant [default: OZ0_TENANT, the settings file's `tenant`, or
    /// the edge's only tenant].
    #[arg(
        long,
        env = "OZ0_TENANT",
        global = true,
        help_heading = "Edge and tenant"
    )]
    tenant: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// How a list is printed.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// A table with a header.
    Table,
    /// A table with more columns.
    Wide,
    /// JSON.
    Json,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Nodes.
    Node {
        #[command(subcommand)]
        cmd: NodeCmd,
    },
    /// Jobs: submit a command or a plugin's tool call, follow a job,
    /// cancel it, run it again.
    Job {
        #[command(subcommand)]
        cmd: JobCmd,
    },
    /// Release keys and signed releases (what nodes fetch from an edge).
    Release {
        #[command(subcommand)]
        cmd: release::ReleaseCmd,
    },
    /// Print the shell completion script for SHELL.
    ///
    /// Example (bash): oz0 completion bash > /etc/bash_completion.d/oz0
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write oz0's man pages (oz0.1, oz0-job-logs.1, …) to DIR, or print
    /// oz0.1.
    Man {
        /// The folder to write them to.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
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
        /// Only jobs in this state: queued, leased, succeeded, failed, cancelled.
        #[arg(long)]
        state: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// table, wide or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Format,
        /// JSON instead of text (-o json).
        #[arg(long)]
        json: bool,
    },
    /// The end of a job's stdout and stderr (the edge keeps the last 64 KiB
    /// of each, sent by its node while it runs), control characters
    /// escaped unless --raw.
    ///
    /// With -f, follows the job until it ends: its stdout on stdout, its
    /// stderr on stderr, as the node sends them; the exit status is then
    /// the job's (0 succeeded, its own exit status when it failed with
    /// one, 1 otherwise).
    Logs {
        /// The job's id (one that begins with `-` is taken as an id, not a flag).
        #[arg(allow_hyphen_values = true)]
        job: String,
        /// Follow the output until the job ends.
        #[arg(short, long, conflicts_with = "json")]
        follow: bool,
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
    /// Queue a job again: a new job with the same command or tool call,
    /// origin and needs (its secrets too, kept by the edge).
    Rerun {
        /// The job's id (one that begins with `-` is taken as an id, not a flag).
        #[arg(allow_hyphen_values = true)]
        job: String,
        /// Wait up to S seconds for the new job to end, then print how it ended.
        #[arg(long, value_name = "S")]
        wait: Option<u64>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a job that has not ended: a queued one is never handed out; a
    /// leased one is stopped by its node at once (within milliseconds of
    /// the cancel), its server and VM with it.
    Cancel {
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
    /// A table of nodes, one a line (nodes not heard from for a day are
    /// left out unless --all).
    List {
        /// Also nodes not heard from for a day and more.
        #[arg(long)]
        all: bool,
        /// table, wide or json.
        #[arg(short, long, value_enum, default_value = "table")]
        output: Format,
        /// JSON instead of text (-o json).
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
    /// Give a node no new work: what it runs finishes, or, with
    /// --deadline, goes back to the queue at the deadline (the node stops
    /// it; the attempt does not count).
    Drain {
        /// Its id or host name.
        node: String,
        /// How long its jobs may still run: 90, 90s, 10m or 2h.
        #[arg(long, value_name = "DURATION", value_parser = settings::duration)]
        deadline: Option<u64>,
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

fn token(args: &Args, file: Option<&PathBuf>) -> Result<String> {
    if let Some(f) = args.token_file.as_ref().or(file) {
        let t = std::fs::read_to_string(f)
            .with_context(|| format!("reading the operator token from {}", f.display()))?;
        return Ok(t.trim().to_string());
    }
    std::env::var("OZ0_OPERATOR_TOKEN").context(
        "no operator token: set OZ0_OPERATOR_TOKEN_FILE (or --token-file, or token-file in the settings file) or OZ0_OPERATOR_TOKEN",
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

fn print_job(out: Out, j: &JobView, json: bool) -> Result<()> {
    if json {
        out.json(j)
    } else {
        out.text(&show::job(j))
    }
}

async fn run_job(client: &OperatorClient, tenant: &str, cmd: &JobCmd, out: Out) -> Result<Status> {
    match cmd {
        JobCmd::Tool {
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
            let req = request(o, JobPayload::Tool(job), idempotency_key)?;
            return submitted(client, tenant, &req, *wait, *json, out).await;
        }
        JobCmd::Submit {
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
            let req = request(o, JobPayload::Shell(shell), idempotency_key)?;
            return submitted(client, tenant, &req, *wait, *json, out).await;
        }
        JobCmd::List {
            state,
            limit,
            output,
            json,
        } => {
            let page = client
                .jobs(tenant, state.as_deref(), None, Some((*limit).clamp(1, 500)))
                .await?;
            match if *json { Format::Json } else { *output } {
                Format::Json => out.json(&page)?,
                f => out.text(&show::jobs(&page.jobs, f == Format::Wide))?,
            }
        }
        JobCmd::Logs {
            job, follow: true, ..
        } => return follow::logs(client, tenant, job, out.raw).await,
        JobCmd::Logs { job, json, .. } => {
            let l = client.job_logs(tenant, job).await?;
            if *json {
                out.json(&l)?;
            } else {
                out.text(&show::logs(&l))?;
            }
        }
        JobCmd::Show { job, json, .. } => {
            print_job(out, &client.job(tenant, job).await?, *json)?;
        }
        JobCmd::Cancel { job, json } => {
            print_job(out, &client.cancel_job(tenant, job).await?, *json)?;
        }
        JobCmd::Rerun { job, wait, json } => {
            let a = client.rerun_job(tenant, job).await?;
            return accepted(client, tenant, a, *wait, *json, out).await;
        }
    }
    Ok(Status::Done)
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
fn request(o: &str, job: JobPayload, key: &Option<String>) -> Result<JobRequest> {
    Ok(JobRequest {
        idempotency_key: key.clone(),
        ..JobRequest::new(origin(o)?, job)
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
) -> Result<Status> {
    let a = client.submit_job(tenant, req).await?;
    accepted(client, tenant, a, wait, json, out).await
}

/// A job queued: says so, or with `wait` waits for its end, prints how it
/// went and its output (each stream under a line with its size, and
/// whether its start was cut), and returns the job's status.
async fn accepted(
    client: &OperatorClient,
    tenant: &str,
    a: Accepted,
    wait: Option<u64>,
    json: bool,
    out: Out,
) -> Result<Status> {
    let Some(secs) = wait else {
        if json {
            out.json(&a)?;
        } else {
            out.text(&format!(
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
            ))?;
        }
        return Ok(Status::Done);
    };
    let j = follow::wait_job(client, tenant, &a.job_id, secs).await?;
    print_job(out, &j, json)?;
    if !json && j.kind == "shell" {
        if let Ok(l) = client.job_logs(tenant, &j.job_id).await {
            out.text(&show::logs(&l))?;
        }
    }
    let status = follow::job_status(&j.state, j.exit_code);
    if status == Status::NotEnded {
        follow::say(&format!(
            "job {} did not end within {secs} s (it goes on: oz0 job logs -f --tenant {tenant} {})",
            j.job_id, j.job_id
        ));
    } else if status != Status::Done {
        follow::say(&format!("job {} {}", j.job_id, j.state));
    }
    Ok(status)
}

/// The tenant: the flag or OZ0_TENANT, the settings file's, or the
/// edge's only one.
async fn tenant(client: &OperatorClient, given: Option<&str>) -> Result<String> {
    if let Some(t) = given {
        return Ok(t.to_string());
    }
    let all = client.tenants().await?;
    match all.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(follow::usage(format!(
            "which tenant? the edge serves {}: give --tenant T, or set OZ0_TENANT or `tenant` in {}",
            all.join(", "),
            settings::path_hint()
        ))),
    }
}

async fn run(args: Args) -> Result<Status> {
    match &args.cmd {
        Cmd::Completion { shell } => {
            let mut text = Vec::new();
            clap_complete::generate(*shell, &mut Args::command(), "oz0", &mut text);
            term::print(&String::from_utf8_lossy(&text)).context("writing to standard output")?;
            return Ok(Status::Done);
        }
        Cmd::Man { dir } => {
            settings::man_pages(Args::command(), dir.as_deref())?;
            return Ok(Status::Done);
        }
        Cmd::Release { cmd } => return release::run(cmd),
        _ => {}
    }
    let file = settings::Settings::load()?;
    // The operator token goes to an edge named, and to none other: a
    // default address (a local edge's port) could be any local user's
    // listener while the edge is not up there.
    let Some(edge) = args.edge.clone().or_else(|| file.edge.clone()) else {
        bail!("no edge named: give --edge URL, set OZ0_EDGE, or put `edge = \"URL\"` in the settings file (a local edge listens on http://127.0.0.1:8440 by default); the operator token is sent to no edge not named so");
    };
    let trust = match args.edge_ca.as_ref().or(file.edge_ca.as_ref()) {
        Some(f) => oz0_edge::client::Trust::CaFile(f.clone()),
        None => oz0_edge::client::Trust::System,
    };
    let client =
        OperatorClient::with_trust(&edge, &token(&args, file.token_file.as_ref())?, &trust)?;
    let given = args.tenant.as_deref().or(file.tenant.as_deref());
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
    let print_node = |n: &oz0_edge::wire::NodeView, json: bool| -> Result<()> {
        if json {
            out.json(n)
        } else {
            out.text(&show::node(n))
        }
    };
    match &args.cmd {
        Cmd::Job { cmd } => {
            let tenant = tenant(&client, given).await?;
            return run_job(&client, &tenant, cmd, out).await;
        }
        Cmd::Node {
            cmd: NodeCmd::List { all, output, json },
        } => {
            // The node list spans tenants unless one is named.
            let nodes = client.nodes_with(args.tenant.as_deref(), *all).await?;
            match if *json { Format::Json } else { *output } {
                Format::Json => out.json(&nodes)?,
                f => out.text(&show::nodes(&nodes, f == Format::Wide))?,
            }
        }
        Cmd::Node {
            cmd:
                NodeCmd::Drain {
                    node,
                    deadline,
                    json,
                },
        } => print_node(&client.drain_node(node, *deadline).await?, *json)?,
        Cmd::Node {
            cmd:
                NodeCmd::Approve { node, json }
                | NodeCmd::Undrain { node, json }
                | NodeCmd::Remove { node, json },
        } => {
            let action = match &args.cmd {
                Cmd::Node {
                    cmd: NodeCmd::Approve { .. },
                } => "approve",
                Cmd::Node {
                    cmd: NodeCmd::Undrain { .. },
                } => "undrain",
                _ => "remove",
            };
            print_node(&client.node_action(node, action).await?, *json)?;
        }
        Cmd::Node {
            cmd: NodeCmd::Show { node, json },
        } => print_node(&client.node(node).await?, *json)?,
        Cmd::Completion { .. } | Cmd::Man { .. } | Cmd::Release { .. } => {}
    }
    Ok(Status::Done)
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            follow::say(&format!("cannot start: {e}"));
            return Status::Failed.into();
        }
    };
    match rt.block_on(run(args)) {
        Ok(status) => status.into(),
        Err(e) => {
            // The reason may be the edge's words: escaped like any other.
            follow::say(&format!("{e:#}"));
            match e.downcast_ref::<follow::Usage>() {
                Some(_) => Status::Usage.into(),
                None => Status::Failed.into(),
            }
        }
    }
}
