//! What the Windows and macOS nodes' daemons share (`run`, `facts`): the
//! loop that registers with the edge, reports the facts and takes tier-0
//! shell jobs one at a time, each job's folders and output records and its
//! report to the edge, and the facts file.
//!
//! A tier-0 job runs with the node's own permissions: no wall. So, as on
//! Linux with `--sandbox none`, a job that asks for what only a wall
//! enforces (egress, memory, processes, CPU time) is refused, and a tool
//! job (whose server runs only behind a wall) too. What it gets:
//!
//! - a fresh work folder `<work-root>/job-<id>-<attempt>`, its current
//!   folder, removed after the job;
//! - exactly the job's variables, plus what the platform's programs need
//!   (a system `PATH` when the job names none); never the node's own;
//! - its output in `<data-dir>/jobs/<id>/stdout` and `stderr`, whose last
//!   64 KiB reach the edge;
//! - every process it starts ends when its first one ends, its timeout
//!   passes, its lease is lost or the node stops: the platform's tier-0
//!   sandbox holds them together (a job object on Windows, the run's mark
//!   on macOS), and the job runs through it as every run does, through
//!   the node core's door ([`run_job`]: `oz0_core::Sandbox::run`, its
//!   output files as the command's stdio, a cancel that fires when the
//!   job is dropped).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::exit::Exit;
use oz0_core::{Cancel, RunIo, RunOptions, Sandbox};
use oz0_edge::client::{ClientError, Completion, Lease, NodeClient, NodeKey, Trust};
use oz0_edge::wire::{JobPayload, ShellJob};
use oz0_policy::facts::NodeFacts;
use oz0_policy::{EnvVar, RunRequest, RunSpec};

use crate::flags::DataDirArg;
use crate::outcome::JobEnd;
use crate::record::safe_id;

pub use crate::log::log;

/// Logs `msg` and gives `code`'s status.
pub fn fail(msg: impl std::fmt::Display, code: Exit) -> i32 {
    log(&msg.to_string());
    code.code()
}

/// Runs one job to its end (blocking) through the node's tier-0 sandbox,
/// its output into its files, until it ends or `cancel` fires.
pub fn run_job(
    sandbox: &dyn Sandbox,
    spec: &RunSpec,
    out: fs::File,
    err: fs::File,
    cancel: Cancel,
) -> JobEnd {
    match sandbox.run(spec, RunOptions::new(RunIo::files(out, err), Some(cancel))) {
        Ok(o) => JobEnd::from_outcome(&o),
        Err(e) => JobEnd::refused(e.to_string()),
    }
}

/// How a platform writes a host path into a run's spec (on Windows
/// `C:\a` travels as `/C:/a`): `what` names it in an error.
pub type Carry = fn(what: &str, p: &Path) -> Result<String, String>;

/// A shell job's run spec, in its work folder.
fn spec_for(p: ShellJob, work: &Path, data_dir: &Path, carry: Carry) -> Result<RunSpec, String> {
    let env = p
        .env
        .iter()
        .map(|(k, v)| EnvVar::new(k, v).map_err(|e| format!("the job's variable {k}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    RunSpec::new(RunRequest {
        work: carry("the work folder", work)?,
        data_dir: carry("the data directory", data_dir)?,
        env,
        allow: p.allow,
        forward: p.forward,
        limits: oz0_policy::Limits {
            memory_mib: p.memory,
            processes: p.processes,
            cpu_seconds: p.cpu_seconds,
            timeout_seconds: p.timeout,
            tmp_mib: p.tmp_size,
        },
        command: p.command,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

/// A run's cancel, and what fires it when dropped (the job's lease was
/// lost, the node is stopping): on Unix the other end of a socket pair,
/// on Windows an event.
fn cancel_pair() -> Result<(Cancel, Box<dyn Send>), String> {
    #[cfg(unix)]
    {
        use std::io::Write;
        /// Cancels the run when dropped.
        struct CancelOnDrop(std::os::unix::net::UnixStream);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                let _ = self.0.write_all(b"x");
            }
        }
        let (r, w) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| format!("cannot make a cancel channel: {e}"))?;
        Ok((
            Cancel(std::os::fd::OwnedFd::from(r)),
            Box::new(CancelOnDrop(w)),
        ))
    }
    #[cfg(windows)]
    {
        use oz0_windows::native::CancelEvent;
        /// Cancels the run when dropped.
        struct SetOnDrop(CancelEvent);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.set();
            }
        }
        let e = CancelEvent::new().map_err(|e| format!("cannot make a cancel event: {e}"))?;
        let c = e
            .cancel()
            .map_err(|e| format!("cannot make a cancel event: {e}"))?;
        Ok((c, Box::new(SetOnDrop(e))))
    }
}

/// What tier 0 cannot give, named: Err with the refusal.
pub fn tier0(p: &ShellJob, platform: &str) -> Result<(), String> {
    let mut asks = Vec::new();
    if !p.allow.is_empty() || !p.forward.is_empty() {
        asks.push("egress");
    }
    for (set, name) in [
        (p.memory.is_some(), "memory"),
        (p.processes.is_some(), "processes"),
        (p.cpu_seconds.is_some(), "cpu_seconds"),
        (p.tmp_size.is_some(), "tmp_size"),
    ] {
        if set {
            asks.push(name);
        }
    }
    if asks.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "tier 0 has no wall: it enforces neither job limits nor an egress allowlist, so a job that asks for them ({}) is refused on this {platform} node",
            asks.join(", ")
        ))
    }
}

/// Where jobs go on this node, and how they run.
pub struct Jobs {
    /// `<data-dir>/jobs`.
    pub records: PathBuf,
    /// Where each job's work folder is made.
    pub work_root: PathBuf,
    /// The node's data directory (named in each run's spec, never seen).
    pub data_dir: PathBuf,
    /// The platform's tier-0 sandbox.
    pub sandbox: Arc<dyn Sandbox>,
    /// The node's platform, for refusals (`Windows`, `macOS`).
    pub platform: &'static str,
    /// How a host path is written into a run's spec.
    pub carry: Carry,
}

impl Jobs {
    /// Runs one leased job and reports its end.
    pub async fn take(&self, client: &NodeClient, mut lease: Lease) {
        let job = lease.job.clone();
        let id = job.job_id.clone();
        let platform = self.platform;
        if !safe_id(&id) {
            log("the edge handed out a job whose id is not plain letters and digits: not run");
            return;
        }
        if job.tier > 0 {
            log(&format!(
                "refused job {id}: it needs tier {} and this {platform} node is routed at tier 0; not run, its lease lapses",
                job.tier
            ));
            return;
        }
        log(&format!(
            "took job {id} (tier 0, {} from {}, attempt {})",
            job.job.kind().as_str(),
            job.origin,
            job.attempt
        ));
        let record = self.records.join(&id);
        let work = self.work_root.join(format!("job-{id}-{}", job.attempt));
        let prepared = (|| -> Result<(RunSpec, fs::File, fs::File), String> {
            let JobPayload::Shell(p) = &job.job else {
                return Err(format!(
                    "a {} job: its server runs only behind a wall, and this {platform} node runs at tier 0; not run",
                    job.job.kind().as_str()
                ));
            };
            p.check().map_err(|e| e.to_string())?;
            let p = p.clone();
            tier0(&p, platform)?;
            fs::create_dir_all(&record)
                .map_err(|e| format!("cannot create {}: {e}", record.display()))?;
            let _ = fs::remove_dir_all(&work);
            fs::create_dir_all(&work)
                .map_err(|e| format!("cannot create the work folder {}: {e}", work.display()))?;
            let open = |n: &str| {
                fs::File::create(record.join(n))
                    .map_err(|e| format!("cannot create {}: {e}", record.join(n).display()))
            };
            let spec = spec_for(p, &work, &self.data_dir, self.carry)?;
            Ok((spec, open("stdout")?, open("stderr")?))
        })();
        let started = Instant::now();
        let prepared = prepared.and_then(|(spec, out, err)| {
            cancel_pair().map(|(cancel, guard)| (spec, out, err, cancel, guard))
        });
        let end = match prepared {
            Err(e) => {
                log(&format!("job {id} refused: {e}"));
                JobEnd::refused(e)
            }
            Ok((spec, out, err, cancel, guard)) => {
                let sandbox = self.sandbox.clone();
                let handle = tokio::task::spawn_blocking(move || {
                    run_job(&*sandbox, &spec, out, err, cancel)
                });
                let r = client.run_leased(&mut lease, handle).await;
                match r {
                    Ok(Ok(end)) => end,
                    Ok(Err(e)) => JobEnd::refused(format!("the job's thread failed: {e}")),
                    Err(e) => {
                        // Its processes end when the guard fires its
                        // cancel; the lease is gone, so the result is no
                        // one's.
                        drop(guard);
                        log(&match e {
                            ClientError::LeaseLost { cancelled: true, .. } => format!(
                                "job {id} cancelled by an operator: stopped; its end is not reported"
                            ),
                            ClientError::LeaseLost { .. } => format!(
                                "job {id} stopped: its lease is not this node's any more (it lapsed, or a drain moved the job); its end is not reported"
                            ),
                            e => format!("job {id} stopped: {e}; its end is not reported"),
                        });
                        let _ = fs::remove_dir_all(&work);
                        return;
                    }
                }
            }
        };
        let _ = fs::remove_dir_all(&work);
        log(&format!(
            "job {id} ended: status {} after {}ms",
            end.exit_code,
            started.elapsed().as_millis()
        ));
        let done = end.completion(&record);
        report(client, &lease, &id, &done).await;
    }
}

/// Reports job `id`'s end to the edge, retrying with a growing pause
/// until the edge takes it, refuses it, or the lease lapses.
async fn report(client: &NodeClient, lease: &Lease, id: &str, done: &Completion) {
    let mut backoff = Duration::from_secs(1);
    loop {
        match client.finish_job(lease, done).await {
            Ok(()) => return,
            Err(e @ (ClientError::LeaseLost { .. } | ClientError::Refused { .. })) => {
                log(&format!("the edge did not take job {id}'s end: {e}"));
                return;
            }
            Err(e) if lease.expired() => {
                log(&format!("job {id}'s end could not reach the edge before its lease lapsed ({e}); the edge hands it out again"));
                return;
            }
            Err(e) => {
                log(&format!(
                    "cannot report job {id}'s end: {e}; retrying in {}s",
                    backoff.as_secs()
                ));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// The daemon's flags besides `--sandbox`, the same on Windows and macOS.
#[derive(Debug, clap::Args)]
pub struct DaemonFlags {
    #[command(flatten)]
    pub data: DataDirArg,
    /// Start, publish the facts, and exit instead of staying up (with
    /// --edge: register and report the facts, then exit).
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub link: crate::flags::EdgeFlags,
    /// Where each job's fresh work folder is made (never under the data
    /// directory) [default: <temporary folder>/oz0-node-work].
    #[arg(long = "work-root", value_name = "DIR", requires = "edge")]
    pub work_root: Option<PathBuf>,
    /// The name shown on the edge's Nodes page: lower-case letters, digits,
    /// '.' and '-', e.g. build-01 [default: this machine's name, when it is one].
    #[arg(long, value_name = "NAME", requires = "edge", value_parser = crate::flags::node_name)]
    pub name: Option<String>,
    /// How long to wait between polls of an empty queue, in milliseconds.
    #[arg(
        long = "poll-ms",
        value_name = "MS",
        default_value_t = 2000,
        hide = true
    )]
    pub poll_ms: u64,
}

impl DaemonFlags {
    /// How long to wait between polls of an empty queue.
    pub fn poll_every(&self) -> Duration {
        Duration::from_millis(self.poll_ms.clamp(50, 60_000))
    }
}

/// What each platform gives [`edge_settings`].
pub struct Platform<'a> {
    /// Reads the enrolment token from a file only the node's user can read.
    pub read_token: &'a dyn Fn(&Path) -> Result<String, String>,
    /// This machine's name.
    pub name: Option<String>,
    /// The temporary folder jobs' work folders go under by default.
    pub temp: PathBuf,
    /// Whether two paths overlap as this system compares them.
    pub overlap: &'a dyn Fn(&Path, &Path) -> bool,
    /// The tier-0 sandbox jobs run through.
    pub sandbox: Arc<dyn Sandbox>,
    /// The node's platform, for refusals (`Windows`, `macOS`).
    pub platform: &'static str,
    /// How a host path is written into a run's spec.
    pub carry: Carry,
}

/// What `--edge` needs, checked before anything starts (None without it).
pub fn edge_settings(
    f: &DaemonFlags,
    data_dir: &Path,
    p: Platform,
) -> Result<Option<Edge>, String> {
    let url = match f.link.edge.as_slice() {
        [] => return Ok(None),
        [url] => url,
        _ => {
            return Err(
                "--edge is given once here: only the Linux node fails over between edges".into(),
            )
        }
    };
    // --tenant is required with --edge and checked by its parser.
    let tenant = f.link.tenant.clone().unwrap_or_default();
    let trust = match &f.link.edge_ca {
        Some(c) => Trust::CaFile(
            std::path::absolute(c).map_err(|e| format!("--edge-ca {}: {e}", c.display()))?,
        ),
        None => Trust::System,
    };
    NodeClient::with_trust(url, "probe", NodeKey::generate(), &trust)
        .map_err(|e| format!("--edge: {e}"))?;
    let file = f
        .link
        .enrolment_token_file
        .as_deref()
        .ok_or("--edge needs --enrolment-token-file FILE")?;
    let token = (p.read_token)(file)?;
    let work_root = match &f.work_root {
        Some(w) => {
            std::path::absolute(w).map_err(|e| format!("--work-root {}: {e}", w.display()))?
        }
        None => p.temp.join("oz0-node-work"),
    };
    if (p.overlap)(&work_root, data_dir) {
        return Err(format!(
            "--work-root {} overlaps the data directory {}, which no job may see: name a folder outside it",
            work_root.display(),
            data_dir.display()
        ));
    }
    Ok(Some(Edge {
        url: url.clone(),
        tenant,
        token,
        // A machine name the edge would refuse is not sent: the node
        // registers without one (shown by its id).
        name: f.name.clone().or(p
            .name
            .filter(|n| oz0_edge::sanitize::is_usable_node_name(n))),
        trust,
        jobs: Jobs {
            records: data_dir.join("jobs"),
            work_root,
            data_dir: data_dir.to_path_buf(),
            sandbox: p.sandbox,
            platform: p.platform,
            carry: p.carry,
        },
    }))
}

/// What `--edge` needs, checked before anything starts.
pub struct Edge {
    /// The edge's URL.
    pub url: String,
    /// The tenant.
    pub tenant: String,
    /// The enrolment token.
    pub token: String,
    /// The node's name on the Nodes page.
    pub name: Option<String>,
    /// Whom the edge's certificate must be signed by.
    pub trust: Trust,
    /// Where and how jobs run.
    pub jobs: Jobs,
}

/// Registers, reports the facts, and takes tier-0 jobs until the future is
/// dropped (or, with `once`, until the facts are reported).
pub async fn serve(e: Edge, key: NodeKey, facts: NodeFacts, once: bool, every: Duration) -> i32 {
    let client = match NodeClient::with_trust(&e.url, &e.tenant, key, &e.trust) {
        Ok(c) => c,
        Err(err) => return fail(format!("--edge: {err}"), Exit::Usage),
    };
    log(&format!(
        "node {}: connecting to the edge at {} as tenant {}, tier-0 jobs one at a time",
        client.node_id(),
        e.url,
        e.tenant
    ));
    let mut backoff = Duration::from_secs(1);
    let mut registered = false;
    let mut reported = false;
    // Waiting for an operator's approval: said once, not at every poll.
    let mut pending = false;
    loop {
        let step: Result<(), (&str, ClientError)> = if !registered {
            match client.register(&e.token, e.name.as_deref()).await {
                Ok(r) => {
                    log(&format!(
                        "registered with the edge at {} as node {} of tenant {}",
                        e.url, r.node_id, r.tenant
                    ));
                    registered = true;
                    Ok(())
                }
                Err(err) => Err(("cannot register with the edge", err)),
            }
        } else if !reported {
            match client.report_facts(&facts).await {
                Ok(v) => {
                    log(&format!(
                        "facts reported: the edge routes this node at tier {} ({})",
                        v.tier_routed, v.tier_line
                    ));
                    if v.dropped_last > 0 {
                        log(&format!(
                            "the edge dropped {} field(s) of this report",
                            v.dropped_last
                        ));
                    }
                    reported = true;
                    if once {
                        return Exit::Ok.code();
                    }
                    Ok(())
                }
                Err(err) => Err(("cannot report the facts to the edge", err)),
            }
        } else {
            let polled = client.poll(0).await;
            if pending && polled.is_ok() {
                log("approved by an operator: taking work now");
                pending = false;
            }
            match polled {
                Ok((Some(lease), _)) => {
                    e.jobs.take(&client, lease).await;
                    Ok(())
                }
                Ok((None, _)) => {
                    tokio::time::sleep(every).await;
                    Ok(())
                }
                Err(err) => Err(("cannot poll the edge for work", err)),
            }
        };
        match step {
            Ok(()) => backoff = Duration::from_secs(1),
            Err((what, err @ ClientError::Refused { .. })) => match err.refusal_code() {
                Some("unauthenticated") if registered => {
                    log(&format!(
                        "the edge no longer knows this node ({err}): registering again"
                    ));
                    registered = false;
                    reported = false;
                }
                Some("tier_not_routed") => {
                    log(&format!("{err}: reporting the facts again"));
                    reported = false;
                }
                Some("pending_approval") => {
                    if !pending {
                        log(&format!("{err} (asking again every {every:?})"));
                        pending = true;
                    }
                    tokio::time::sleep(every).await;
                }
                _ => return fail(format!("{what}: {err}"), Exit::CheckFailed),
            },
            Err((what, err)) => {
                log(&format!(
                    "{what}: {err}; retrying in {}s",
                    backoff.as_secs()
                ));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// Writes `<dir>/facts.json` (whole or not at all).
pub fn write_facts(dir: &Path, f: &NodeFacts) -> Result<PathBuf, String> {
    let path = dir.join("facts.json");
    let tmp = dir.join(".facts.json.tmp");
    let text = serde_json::to_string_pretty(f).expect("facts serialise") + "\n";
    fs::write(&tmp, text)
        .and_then(|_| fs::rename(&tmp, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// `facts` flags.
#[derive(Debug, clap::Args)]
pub struct FactsArgs {
    #[command(flatten)]
    pub data: DataDirArg,
}

/// `facts`: prints what `run` wrote in the data directory.
pub fn facts(a: FactsArgs) -> i32 {
    match a.data.resolve() {
        Ok(d) => print_facts(&d),
        Err(e) => fail(e, Exit::Usage),
    }
}

/// Prints the facts `run` wrote in `data_dir`.
fn print_facts(data_dir: &Path) -> i32 {
    let path = data_dir.join("facts.json");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            return fail(
                format!(
                "cannot read {}: {e}: start the node once (`oz0-node run --once`) to write them",
                path.display()
            ),
                Exit::CheckFailed,
            )
        }
    };
    match serde_json::from_str::<NodeFacts>(&text) {
        Ok(f) => {
            println!("{}", serde_json::to_string_pretty(&f).expect("serialises"));
            Exit::Ok.code()
        }
        Err(e) => fail(
            format!(
                "{} is not a facts document of this version: {e}",
                path.display()
            ),
            Exit::CheckFailed,
        ),
    }
}

/// Runs the daemon's event loop until Ctrl-C (or SIGTERM on macOS): with
/// an edge, [`serve`]; without one, stays up (or, with `once`, returns).
pub fn event_loop(
    edge: Option<Edge>,
    key: NodeKey,
    facts: NodeFacts,
    once: bool,
    every: Duration,
) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(
                format!("cannot start the event loop: {e}"),
                Exit::CheckFailed,
            )
        }
    };
    rt.block_on(async move {
        let Some(edge) = edge else {
            if once {
                return Exit::Ok.code();
            }
            log("ready; Ctrl-C stops the node");
            stopped().await;
            log("stopping");
            return Exit::Ok.code();
        };
        tokio::select! {
            biased;
            () = stopped() => {
                log("stopping");
                Exit::Ok.code()
            }
            code = serve(edge, key, facts, once, every) => code,
        }
    })
}

/// Resolves when the node is told to stop: Ctrl-C, and on Unix SIGTERM
/// (a service's stop).
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
