//! `oz0-node run --edge URL --tenant T`: register with the edge, report the
//! facts, and take work.
//!
//! The node polls one queue per tier, from the highest it may take down to
//! 0, and never a queue above the tier it is routed at (the lower of the
//! edge's decision and its own facts). Each job runs in a fresh work
//! directory under `--work-root`, through the same launcher as `oz0-node
//! sandbox run`, under a lease that is renewed while it runs. When the lease
//! is lost the run is killed and its result not reported; on SIGTERM or
//! SIGINT the running job is killed and left to its lease, so the edge hands
//! it to another node. A job's output stays on this node, in
//! `<data-dir>/jobs/<job>/` (stdout, stderr, status.json); the edge gets its
//! exit status.
//!
//! The job payload:
//!
//! ```json
//! {"command": ["sh", "-c", "echo hi"], "env": {"NAME": "VALUE"},
//!  "allow": ["example.com:443"], "forward": [8080], "timeout": 60,
//!  "memory": 512, "processes": 64, "cpu_seconds": 30}
//! ```
//!
//! Only `command` is required; anything else is refused.
//!
//! A job of kind `tool` carries a plugin's tool call instead
//! (`oz0_plugin::job::ToolJob`): the node starts the tool's MCP server — in
//! a microVM for `isolation: microvm` (only when this node proved
//! microVMs, which is also when it polls the tier-2 queue), or in its
//! tier-1 sandbox for a command tool — makes the call and completes the job
//! with the result (`crate::tool`). Only a tool job runs at tier 2.

use std::fs::{self, File};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_core::Sandbox;
use oz0_edge::client::{ClientError, Lease, NodeClient, NodeKey};
use oz0_edge::wire::NodeView;
use oz0_policy::facts::NodeFacts;
use oz0_policy::RunSpec;

use crate::node::NodeArgs;

mod job;

use job::{run_job, safe_id, spec_for, write_status, JobEnd, Payload};
use oz0_core::exit::Exit;
use oz0_plugin::job::ToolJob;

/// The highest tier this node runs jobs at: tier 2 is microVM tools, taken
/// only when the node proved microVMs.
const MAX_TAKEN_TIER: u8 = 2;
/// The longest wait between retries when the edge cannot be reached.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Writes one line to the daemon's log (its stderr: a job's output goes to
/// the job's files, never there).
pub fn log(msg: &str) {
    eprintln!("oz0-node: {msg}");
}

/// What `--edge` needs, checked before the node starts.
#[derive(Debug)]
pub struct Settings {
    url: String,
    tenant: String,
    token: String,
    name: Option<String>,
    work_root: PathBuf,
    data_dir: PathBuf,
    poll: Duration,
    recheck: Duration,
    sandbox_none: bool,
    host: crate::cli::HostArgs,
    /// The variables of this node's environment tool jobs may be given.
    tool_env: std::collections::BTreeSet<String>,
    /// What the edge's certificate is verified against.
    trust: oz0_edge::client::Trust,
}

impl Settings {
    /// Checks the flags and reads the enrolment token.
    pub fn from_args(url: &str, a: &NodeArgs, data_dir: &Path) -> Result<Settings, String> {
        let trust = match &a.edge_ca {
            Some(f) => oz0_edge::client::Trust::CaFile(absolute(f, "--edge-ca")?),
            None => oz0_edge::client::Trust::System,
        };
        // Parsing the URL (and the CA file) now says a wrong one before the
        // self-test runs.
        NodeClient::with_trust(url, "probe", NodeKey::generate(), &trust)
            .map_err(|e| format!("--edge: {e}"))?;
        let tenant = a.tenant.clone().unwrap_or_default();
        if !oz0_edge::routing::is_tenant(&tenant) {
            return Err(format!("--tenant {tenant:?} is not a tenant name: lower-case letters, digits, - and _ (at most 63)"));
        }
        let token_file = a
            .enrolment_token_file
            .as_deref()
            .ok_or("--edge needs --enrolment-token-file FILE (mode 0600)")?;
        let token = read_token(token_file)?;
        let work_root = match &a.work_root {
            Some(w) => absolute(w, "--work-root")?,
            None => std::env::temp_dir().join(format!(
                "oz0-node-work-{}",
                rustix::process::getuid().as_raw()
            )),
        };
        let data_abs = absolute(data_dir, "--data-dir")?;
        if work_root.starts_with(&data_abs) || data_abs.starts_with(&work_root) {
            return Err(format!(
                "--work-root {} overlaps the data directory {}, which no job may see: name a folder outside it",
                work_root.display(),
                data_abs.display()
            ));
        }
        let name = match &a.name {
            Some(n) => Some(n.clone()),
            None => fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_ascii_lowercase()),
        };
        Ok(Settings {
            url: url.to_string(),
            tenant,
            token,
            name,
            work_root,
            data_dir: data_abs,
            poll: Duration::from_millis(a.poll_ms.clamp(50, 60_000)),
            recheck: Duration::from_secs(a.recheck_secs.max(1)),
            sandbox_none: a.sandbox == crate::node::Sandbox::None,
            host: a.host.clone(),
            tool_env: a
                .tool_env
                .iter()
                .map(|n| {
                    oz0_policy::env::EnvName::new(n)
                        .map(|_| n.clone())
                        .map_err(|e| format!("--tool-env {n:?}: {e}"))
                })
                .collect::<Result<_, _>>()?,
            trust,
        })
    }
}

fn absolute(p: &Path, flag: &str) -> Result<PathBuf, String> {
    std::path::absolute(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
}

/// Reads the enrolment token from a file only its owner can read.
fn read_token(path: &Path) -> Result<String, String> {
    let meta = fs::metadata(path)
        .map_err(|e| format!("--enrolment-token-file {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "--enrolment-token-file {} has mode {mode:o}, readable by others: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    let text = fs::read_to_string(path)
        .map_err(|e| format!("--enrolment-token-file {}: {e}", path.display()))?;
    let token = text.trim().to_string();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "--enrolment-token-file {} must hold one token (no spaces): the tenant's enrolment token the edge was started with",
            path.display()
        ));
    }
    Ok(token)
}

/// Makes `dir` a private folder of this user (0700), refusing a symbolic
/// link or another user's folder.
fn private_dir(dir: &Path, what: &str) -> Result<(), String> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => Err(format!(
            "{what} {} is not a folder (or is a symbolic link): name a folder",
            dir.display()
        )),
        Ok(m) if m.uid() != rustix::process::getuid().as_raw() => Err(format!(
            "{what} {} belongs to another user: name a folder of this user",
            dir.display()
        )),
        Ok(m) => {
            if m.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| format!("{what} {}: {e}", dir.display()))?;
            }
            Ok(())
        }
        Err(_) => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create {what} {}: {e}", dir.display())),
    }
}

/// A job's work, run on a blocking thread with its cancel descriptor.
type Task = Box<dyn FnOnce(OwnedFd) -> Result<JobEnd, String> + Send>;

/// What the loop does next.
enum Next {
    Continue,
    Stop,
}

struct Daemon {
    s: Settings,
    /// The wall every job runs behind: the node's host context (tier 1,
    /// one egress proxy for all jobs), or none (`--sandbox none`).
    sandbox: Arc<dyn Sandbox>,
    /// The same host context, for tool servers (none at tier 0).
    host: Option<Arc<oz0_linux::Host>>,
    client: NodeClient,
    facts: NodeFacts,
    view: Option<NodeView>,
    stop: tokio::net::UnixStream,
    registered: bool,
    backoff: Duration,
}

/// Waits for `fut`, or returns None when the node is told to stop.
async fn or_stop<F: std::future::Future>(
    stop: &tokio::net::UnixStream,
    fut: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = stop.readable() => None,
        out = fut => Some(out),
    }
}

impl Daemon {
    /// Sleeps `d`, false when told to stop meanwhile.
    async fn sleep(&self, d: Duration) -> bool {
        or_stop(&self.stop, tokio::time::sleep(d)).await.is_some()
    }

    fn unreachable(&mut self, what: &str, e: &ClientError) -> Duration {
        let wait = self.backoff;
        log(&format!(
            "{what}: {e}; retrying in {}s",
            // Whole seconds, rounded up.
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        ));
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        wait
    }

    /// Registers and reports the facts, retrying while the edge cannot be
    /// reached. Err: the edge refused (a wrong token, tenant or facts).
    async fn connect(&mut self) -> Result<Next, String> {
        while !self.registered || self.view.is_none() {
            let name = self.s.name.clone();
            let step = if !self.registered {
                let r = or_stop(
                    &self.stop,
                    self.client.register(&self.s.token, name.as_deref()),
                )
                .await;
                match r {
                    None => return Ok(Next::Stop),
                    Some(Ok(r)) => {
                        log(&format!(
                            "registered with the edge at {} as node {} of tenant {}",
                            self.s.url, r.node_id, r.tenant
                        ));
                        self.registered = true;
                        Ok(())
                    }
                    Some(Err(e)) => Err(("cannot register with the edge", e)),
                }
            } else {
                match or_stop(&self.stop, self.client.report_facts(&self.facts)).await {
                    None => return Ok(Next::Stop),
                    Some(Ok(v)) => {
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
                        self.view = Some(v);
                        Ok(())
                    }
                    Some(Err(e)) => Err(("cannot report the facts to the edge", e)),
                }
            };
            match step {
                Ok(()) => self.backoff = Duration::from_secs(1),
                Err((what, e @ ClientError::Refused { .. })) => {
                    if e.refusal_code() == Some("unauthenticated") && self.registered {
                        // The edge forgot this node (a new store): register again.
                        self.registered = false;
                        continue;
                    }
                    return Err(format!("{what}: {e}"));
                }
                Err((what, e)) => {
                    let wait = self.unreachable(what, &e);
                    if !self.sleep(wait).await {
                        return Ok(Next::Stop);
                    }
                }
            }
        }
        Ok(Next::Continue)
    }

    /// The tier this node takes work at: the lower of the edge's routing and
    /// its own facts (tier 2 when it proved microVMs inside tier 1), never
    /// above [`MAX_TAKEN_TIER`].
    fn tier(&self) -> u8 {
        let edge = self.view.as_ref().map_or(0, |v| v.tier_routed);
        let own = if self.facts.tier_routed >= 1 && self.facts.microvm.ready {
            2
        } else {
            self.facts.tier_routed
        };
        edge.min(own).min(MAX_TAKEN_TIER)
    }

    /// Polls the queues from the node's tier down; a job, none, or an error
    /// already handled (None).
    async fn poll(&mut self) -> Option<Option<Lease>> {
        for tier in (0..=self.tier()).rev() {
            match or_stop(&self.stop, self.client.poll(tier)).await {
                None => return None,
                Some(Ok((lease, routed))) => {
                    if let (Some(r), Some(v)) = (routed, self.view.as_mut()) {
                        if r != v.tier_routed {
                            log(&format!(
                                "the edge routes this node at tier {r} now (was {})",
                                v.tier_routed
                            ));
                            v.tier_routed = r;
                        }
                    }
                    if let Some(l) = lease {
                        self.backoff = Duration::from_secs(1);
                        return Some(Some(l));
                    }
                }
                Some(Err(e)) => {
                    match e.refusal_code() {
                        Some("unauthenticated") => {
                            log(&format!(
                                "the edge no longer knows this node ({e}): registering again"
                            ));
                            self.registered = false;
                            self.view = None;
                        }
                        Some("tier_not_routed") => {
                            log(&format!("{e}: reporting the facts again"));
                            self.view = None;
                        }
                        _ => {
                            let wait = self.unreachable("cannot poll the edge for work", &e);
                            if !self.sleep(wait).await {
                                return None;
                            }
                        }
                    }
                    return Some(None);
                }
            }
        }
        self.backoff = Duration::from_secs(1);
        Some(None)
    }

    /// Runs one leased job and reports its end.
    async fn take(&mut self, mut lease: Lease) -> Next {
        let job = lease.job.clone();
        if !safe_id(&job.job_id) {
            log("the edge handed out a job whose id is not plain letters and digits: not run");
            return Next::Continue;
        }
        let id = job.job_id.clone();
        if job.tier > self.tier() {
            // The edge should never do this; the node refuses too. The lease
            // lapses and the edge can hand the job to an eligible node.
            log(&format!(
                "refused job {id}: it needs tier {} and this node is routed at tier {}; not run, its lease lapses",
                job.tier,
                self.tier()
            ));
            return Next::Continue;
        }
        log(&format!(
            "took job {id} (tier {}, {} from {}, attempt {})",
            job.tier, job.kind, job.origin, job.attempt
        ));
        let record = self.s.data_dir.join("jobs").join(&id);
        let prepared = private_dir(&record, "the job record folder").and_then(|_| {
            let open = |n: &str| {
                fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(record.join(n))
                    .map_err(|e| format!("cannot create {}: {e}", record.join(n).display()))
            };
            Ok((open("stdout")?, open("stderr")?))
        });
        let (out, err) = match prepared {
            Ok(f) => f,
            Err(e) => {
                log(&format!(
                    "cannot keep job {id}'s output: {e}; not run, its lease lapses"
                ));
                return Next::Continue;
            }
        };
        let work = self.s.work_root.join(format!("job-{id}-{}", job.attempt));
        let fresh = private_dir(&self.s.work_root, "--work-root").and_then(|_| {
            let _ = fs::remove_dir_all(&work);
            private_dir(&work, "the job's work directory")
        });
        let task = fresh.and_then(|_| self.task(&job, &work, out, err));
        let end = match task {
            Err(e) => {
                log(&format!("job {id} refused: {e}"));
                Some(JobEnd::refused(e))
            }
            Ok(task) => match self.run_under_lease(&mut lease, task).await {
                Ok(end) => Some(end),
                Err(next) => {
                    let _ = fs::remove_dir_all(&work);
                    return next;
                }
            },
        };
        let _ = fs::remove_dir_all(&work);
        let Some(end) = end else {
            return Next::Continue;
        };
        write_status(&record, &job, &end);
        log(&format!(
            "job {id} ended: {} with status {} after {}ms",
            end.outcome, end.exit_code, end.duration_ms
        ));
        self.complete(&lease, &end).await
    }

    /// What a job runs, checked: a shell command's spec, or a tool call.
    fn task(
        &self,
        job: &oz0_edge::wire::LeasedJobView,
        work: &Path,
        out: File,
        err: File,
    ) -> Result<Task, String> {
        if job.kind == "tool" {
            drop(out);
            let checked = ToolJob::from_value(&job.payload)
                .and_then(|t| t.check())
                .map_err(|e| e.to_string())?;
            let host = self
                .host
                .clone()
                .ok_or("a tool's server runs only behind a wall, and this node runs with --sandbox none (tier 0)")?;
            let microvms = if self.facts.microvm.ready && self.tier() >= 2 {
                Ok(())
            } else {
                Err(match self.facts.microvm.reason {
                    Some(r) => r.words().to_string(),
                    None => "it proved none at its start".to_string(),
                })
            };
            let (work, data_dir) = (work.to_path_buf(), self.s.data_dir.clone());
            let tool_env = self.s.tool_env.clone();
            return Ok(Box::new(move |cancel| {
                let ctx = crate::tool::Ctx {
                    host: &host,
                    work: &work,
                    data_dir: &data_dir,
                    microvms,
                    env_allowed: Some(&tool_env),
                    errors: err,
                    cancel,
                };
                crate::tool::run(ctx, &checked).map(JobEnd::from_tool)
            }));
        }
        if job.tier >= 2 {
            return Err(format!(
                "a {} job at tier 2: only a tool job runs there (a microVM per tool server); not run",
                job.kind
            ));
        }
        let p = serde_json::from_value::<Payload>(job.payload.clone())
            .map_err(|e| format!("the job's payload is not one this node runs: {e} (give {{\"command\": [..], \"env\": {{..}}, \"allow\": [..], \"timeout\": S}})"))?;
        if p.command.is_empty() {
            return Err("the job's command is empty".into());
        }
        let spec: RunSpec = spec_for(p, work, &self.s.data_dir)?;
        let sandbox = self.sandbox.clone();
        Ok(Box::new(move |cancel| {
            run_job(&*sandbox, &spec, out, err, cancel)
        }))
    }

    /// Runs the job while the lease holds. Err: the job was stopped (lease
    /// lost or the node told to stop) and must not be reported.
    async fn run_under_lease(&mut self, lease: &mut Lease, task: Task) -> Result<JobEnd, Next> {
        let id = lease.job.job_id.clone();
        let (cancel_r, cancel_w) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => {
                log(&format!(
                    "cannot make job {id}'s cancel pipe: {e}; not run, its lease lapses"
                ));
                return Err(Next::Continue);
            }
        };
        let mut handle = tokio::task::spawn_blocking(move || task(OwnedFd::from(cancel_r)));
        let stop = &self.stop;
        let work = async {
            tokio::select! {
                biased;
                r = &mut handle => Some(r),
                _ = stop.readable() => None,
            }
        };
        let r = self.client.run_leased(lease, work).await;
        // Closing the pipe's other end cancels the run (its whole tree).
        drop(cancel_w);
        match r {
            Ok(Some(joined)) => match joined {
                Ok(Ok(end)) => Ok(end),
                Ok(Err(e)) => {
                    log(&format!("job {id}: the sandbox refused or failed: {e}"));
                    Ok(JobEnd::refused(e))
                }
                Err(e) => {
                    log(&format!("job {id}: the run's thread failed: {e}"));
                    Ok(JobEnd::refused(format!("the run's thread failed: {e}")))
                }
            },
            Ok(None) => {
                let _ = handle.await;
                log(&format!(
                    "job {id} cancelled by the stop; not reported, so its lease lapses and the edge hands it to another node"
                ));
                Err(Next::Stop)
            }
            Err(e) => {
                let _ = handle.await;
                log(&format!("job {id} killed: {e}"));
                Err(Next::Continue)
            }
        }
    }

    async fn complete(&mut self, lease: &Lease, end: &JobEnd) -> Next {
        let id = &lease.job.job_id;
        loop {
            let r = or_stop(
                &self.stop,
                self.client.finish_job(
                    lease,
                    &oz0_edge::client::Completion {
                        succeeded: end.succeeded(),
                        exit_code: Some(end.exit_code),
                        result: end.result.clone(),
                        error: end.reason.clone(),
                    },
                ),
            )
            .await;
            match r {
                None => {
                    log(&format!("stopping before job {id}'s end reached the edge; the edge hands it out again when its lease lapses"));
                    return Next::Stop;
                }
                Some(Ok(())) => {
                    self.backoff = Duration::from_secs(1);
                    return Next::Continue;
                }
                Some(Err(e @ ClientError::LeaseLost { .. }))
                | Some(Err(e @ ClientError::Refused { .. })) => {
                    log(&format!("the edge did not take job {id}'s end: {e}"));
                    return Next::Continue;
                }
                Some(Err(e)) => {
                    if lease.expired() {
                        log(&format!("job {id}'s end could not reach the edge before its lease lapsed ({e}); the edge hands it out again"));
                        return Next::Continue;
                    }
                    let wait = self.unreachable(&format!("cannot report job {id}'s end"), &e);
                    if !self.sleep(wait).await {
                        return Next::Stop;
                    }
                }
            }
        }
    }
}

/// Connects to the edge and takes work until SIGTERM or SIGINT. `recheck`
/// probes the machine again and returns the facts when they changed.
pub fn serve(
    s: Settings,
    key: NodeKey,
    facts: NodeFacts,
    mut recheck: impl FnMut() -> Option<NodeFacts>,
    stop: UnixStream,
    once: bool,
) -> i32 {
    let (sandbox, host): (Arc<dyn Sandbox>, _) = if s.sandbox_none {
        (Arc::new(oz0_linux::plain::Plain), None)
    } else {
        match crate::run::open_host(&s.host, None) {
            Ok(h) => {
                let h = Arc::new(h);
                (h.clone(), Some(h))
            }
            Err(e) => {
                log(&format!("cannot make the node's host context: {e}"));
                return Exit::CheckFailed.code();
            }
        }
    };
    let client = match NodeClient::with_trust(&s.url, &s.tenant, key, &s.trust) {
        Ok(c) => c,
        Err(e) => {
            log(&format!("--edge: {e}"));
            return Exit::Usage.code();
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log(&format!("cannot start the node's event loop: {e}"));
            return Exit::CheckFailed.code();
        }
    };
    // The daemon's sandbox (and the egress proxy it may hold, a runtime of
    // its own) outlives this event loop: it is dropped after it.
    let held = sandbox.clone();
    let code = rt.block_on(async move {
        let stop = match stop
            .set_nonblocking(true)
            .and_then(|_| tokio::net::UnixStream::from_std(stop))
        {
            Ok(s) => s,
            Err(e) => {
                log(&format!("cannot watch for signals: {e}"));
                return Exit::CheckFailed.code();
            }
        };
        let recheck_every = s.recheck;
        let poll_every = s.poll;
        let mut d = Daemon {
            s,
            sandbox: sandbox.clone(),
            host,
            client,
            facts,
            view: None,
            stop,
            registered: false,
            backoff: Duration::from_secs(1),
        };
        log(&format!(
            "node {}: connecting to the edge at {} as tenant {}",
            d.client.node_id(),
            d.s.url,
            d.s.tenant
        ));
        let mut next_check = Instant::now() + recheck_every;
        loop {
            match d.connect().await {
                Ok(Next::Continue) => {}
                Ok(Next::Stop) => break,
                Err(e) => {
                    log(&e);
                    return Exit::CheckFailed.code();
                }
            }
            if once {
                return Exit::Ok.code();
            }
            if Instant::now() >= next_check {
                next_check = Instant::now() + recheck_every;
                if let Some(f) = recheck() {
                    d.facts = f;
                    d.view = None;
                    continue;
                }
            }
            match d.poll().await {
                None => break,
                Some(None) => {
                    if !d.sleep(poll_every).await {
                        break;
                    }
                }
                Some(Some(lease)) => {
                    if let Next::Stop = d.take(lease).await {
                        break;
                    }
                }
            }
        }
        log("stopping");
        Exit::Ok.code()
    });
    drop(rt);
    drop(held);
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_strict() {
        let p: Payload = serde_json::from_value(serde_json::json!({
            "command": ["true"], "env": {"A": "1"}, "timeout": 5
        }))
        .unwrap();
        assert_eq!(p.command, ["true"]);
        assert!(serde_json::from_value::<Payload>(serde_json::json!({
            "command": ["true"], "argv": ["x"]
        }))
        .is_err());
        assert!(safe_id("j0123abc-x_") && !safe_id("../x") && !safe_id(""));
    }
}
