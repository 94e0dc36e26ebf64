//! `oz0-node run --edge URL --tenant T`: register with the edge, report the
//! facts, and take work. This is the one daemon of every platform: Linux
//! gives it its tier-1 sandbox (or `Plain` with `--sandbox none`), Windows
//! and macOS their tier-0 one (`crate::platform`), and each job goes
//! through that `Sandbox` the same way. Tool jobs run on Linux, and a
//! Mac's microVM tools in Apple's container; Windows refuses them by name.
//!
//! The node waits for work with one long poll after another (held by the
//! edge up to 15 s, answered the moment a job for it is queued or one it
//! runs is cancelled): the queues from the tier it is routed at (the lower
//! of the edge's decision and its own facts) down to 0, never one above,
//! a job only while a slot is free, and the ids of the jobs it runs, so a
//! cancel stops one within milliseconds. An edge that answers a poll at
//! once with nothing is asked again after `--poll-ms`. It runs up to
//! `--jobs N` jobs at
//! once (`edge/run.rs`), each in a fresh work directory under
//! `--work-root`, through the same launcher as `oz0-node sandbox run`,
//! under a lease of its own that is renewed while it runs. When a lease is
//! lost (or the job cancelled at the edge) its run is killed and its
//! result not reported; on SIGTERM or SIGINT every running job is killed
//! and given back to the edge at once, so another node takes it. A job's
//! output is kept in `<data-dir>/jobs/<job>/` (stdout, stderr,
//! status.json), within the limits of `edge/retention.rs`; the edge gets
//! its output as it comes (`edge/stream.rs`), then its exit status, its
//! reason and the last 64 KiB of each stream.
//!
//! A shell job's payload is `oz0_edge::wire::ShellJob` (the edge checks it
//! at submit with the same type):
//!
//! ```json
//! {"command": ["sh", "-c", "echo hi"], "env": {"NAME": "VALUE"},
//!  "allow": ["example.com:443"], "forward": [8080], "timeout": 60,
//!  "memory": 512, "processes": 64, "cpu_seconds": 30}
//! ```
//!
//! Only `command` is required; anything else is refused, and so is a NUL
//! byte in any argument or variable (the edge refuses them at submit too).
//!
//! A node waiting for an operator's approval takes no work: the edge
//! refuses its polls, and it says so once and asks again quietly.
//!
//! A job of kind `tool` carries a plugin's tool call instead
//! (`oz0_plugin::job::ToolJob`): the node starts the tool's MCP server — in
//! a microVM for `isolation: microvm` (only when this node offers
//! microVMs, which is also when it polls the tier-2 queue: a Linux node's
//! inside its proven tier 1, a Mac's in Apple's container at any tier), or
//! in its tier-1 sandbox for a command tool — makes the call and completes
//! the job with the result (`crate::tool`). Only a tool job runs at tier 2.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oz0_edge::client::{ClientError, NodeClient, NodeKey, Polled};
use oz0_edge::wire::{NodeView, PollRequest};
use oz0_policy::facts::NodeFacts;

mod files;
mod job;
pub(crate) mod retention;
mod run;
mod settings;
mod stream;
mod walls;

use oz0_core::exit::Exit;
use run::{Runner, Taking};

/// The highest tier this node runs jobs at: tier 2 is microVM tools, taken
/// only when the node proved microVMs.
const MAX_TAKEN_TIER: u8 = 2;
/// How long the edge may hold a poll: it answers sooner, the moment a job
/// for this node is queued or one it runs is cancelled.
const LONG_POLL: Duration = Duration::from_secs(15);
/// The longest wait between retries when the edge cannot be reached.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub use crate::log::log;

/// (Only a Mac's node fetches a guest binary.)
#[cfg(target_os = "macos")]
pub use settings::GuestFetch;
#[cfg(not(target_os = "linux"))]
pub use settings::PlatformLink;
pub use settings::Settings;
#[cfg(windows)]
pub use settings::SettingsError;
pub use walls::Walls;

/// The edges this node may talk to (replicas on one store), and the one
/// it talks to now: every request goes to it, until it cannot be reached.
pub(crate) struct Edges {
    clients: Vec<(String, Arc<NodeClient>)>,
    now: std::sync::atomic::AtomicUsize,
}

impl Edges {
    fn new(s: &Settings, key: &NodeKey) -> Result<Edges, ClientError> {
        let clients = s
            .urls
            .iter()
            .map(|u| {
                NodeClient::with_trust(u, &s.tenant, key.clone(), &s.trust)
                    .map(|c| (u.clone(), Arc::new(c)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Edges {
            clients,
            now: Default::default(),
        })
    }

    fn at(&self) -> &(String, Arc<NodeClient>) {
        let i = self.now.load(std::sync::atomic::Ordering::Relaxed);
        &self.clients[i % self.clients.len()]
    }

    /// The client of the edge talked to now.
    pub(crate) fn client(&self) -> Arc<NodeClient> {
        self.at().1.clone()
    }

    /// The URL of the edge talked to now.
    fn url(&self) -> &str {
        &self.at().0
    }

    /// Moves on to the next edge; its URL.
    fn fail_over(&self) -> &str {
        self.now.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.url()
    }
}

/// Whether `e` says the edge could not be reached (rather than refused).
fn unreachable_edge(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Connect { .. }
            | ClientError::Timeout { .. }
            | ClientError::Http(_)
            | ClientError::Tls(_)
    )
}

/// What the loop does next.
enum Next {
    Continue,
    Stop,
}

struct Daemon {
    s: Arc<Settings>,
    edges: Arc<Edges>,
    facts: NodeFacts,
    view: Option<NodeView>,
    /// Turns true when the node is told to stop (a signal, Ctrl-C).
    stop: tokio::sync::watch::Receiver<bool>,
    registered: bool,
    backoff: Duration,
    /// An operator removed this node: it stops, and does not start again
    /// with this key.
    removed: bool,
    /// The edge said this node waits for an operator's approval (said in
    /// the log once, not at every poll).
    pending: bool,
    /// The edge answered once: from then on every failure is retried.
    contacted: bool,
    /// Edges failed over from since one last answered.
    failed_over: usize,
    /// The guest binary was asked for (once per start).
    guest_fetched: bool,
    /// The guest binary, fetched and checked (a Mac's microVMs' bridge).
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    guest_bin: Option<std::path::PathBuf>,
}

/// Waits for `fut`, or returns None when the node is told to stop.
async fn or_stop<F: std::future::Future>(
    stop: &tokio::sync::watch::Receiver<bool>,
    fut: F,
) -> Option<F::Output> {
    let mut stop = stop.clone();
    tokio::select! {
        biased;
        _ = stop.wait_for(|s| *s) => None,
        out = fut => Some(out),
    }
}

impl Daemon {
    /// Sleeps `d`, false when told to stop meanwhile.
    async fn sleep(&self, d: Duration) -> bool {
        or_stop(&self.stop, tokio::time::sleep(d)).await.is_some()
    }

    /// Logs a failed request and says how long to wait before the next:
    /// none when another edge is there to try (it is tried at once), else
    /// the back-off.
    fn unreachable(&mut self, what: &str, e: &ClientError) -> Duration {
        let n = self.edges.clients.len();
        if n > 1 && unreachable_edge(e) {
            let next = self.edges.fail_over().to_string();
            self.failed_over += 1;
            if self.failed_over < n {
                log(&format!("{what}: {e}; failing over to the edge at {next}"));
                return Duration::ZERO;
            }
            self.failed_over = 0;
            let wait = self.backoff;
            log(&format!(
                "{what}: {e}; no edge answers: trying the edge at {next} in {}s",
                wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
            ));
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            return wait;
        }
        let wait = self.backoff;
        log(&format!(
            "{what}: {e}; retrying in {}s",
            // Whole seconds, rounded up.
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        ));
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        wait
    }

    /// What a job is taken with now.
    fn taking(&self) -> Taking {
        Taking {
            tier: self.tier(),
            #[cfg(any(target_os = "linux", target_os = "macos"))]
            microvms: if self.facts.microvm.ready && self.tier() >= 2 {
                Ok(())
            } else {
                Err(match self.facts.microvm.reason {
                    Some(r) => r.words().to_string(),
                    None => "it proved none at its start".to_string(),
                })
            },
            #[cfg(target_os = "macos")]
            guest_bin: self.guest_bin.clone(),
            #[cfg(target_os = "linux")]
            images: if self.facts.oci.ready && self.tier() >= 1 {
                Ok(())
            } else {
                Err(match self.facts.oci.reason {
                    Some(r) => r.words().to_string(),
                    None => "it offers none".to_string(),
                })
            },
        }
    }

    /// Once registered, and once per start: the guest binary its microVMs
    /// need (a Mac's), fetched from the edge and checked against the
    /// release key; without it the facts say no microVMs, and why. None:
    /// told to stop meanwhile.
    async fn fetch_guest(&mut self) -> Option<()> {
        let Some(g) = self.s.guest.clone() else {
            return Some(());
        };
        if !self.facts.microvm.ready || self.guest_fetched {
            return Some(());
        }
        self.guest_fetched = true;
        let client = self.edges.client();
        let got = or_stop(
            &self.stop,
            oz0_edge::release::fetch_file(
                &client,
                &g.key,
                env!("CARGO_PKG_VERSION"),
                g.target,
                &g.dir,
            ),
        )
        .await?;
        match got {
            Ok(p) => {
                log(&format!(
                    "microVMs: the guest's bridge runs {} (release {}, signed by this build's key)",
                    p.display(),
                    env!("CARGO_PKG_VERSION")
                ));
                self.guest_bin = Some(p);
            }
            Err(e) => {
                log(&format!("microVMs: none: {e}"));
                self.facts.microvm.ready = false;
                self.facts.microvm.reason = Some(oz0_policy::facts::MicrovmReason::NoGuestBinary);
                if let Err(e) = crate::facts_file::write(&self.s.data_dir, &self.facts) {
                    log(&format!("cannot write the facts again: {e}"));
                }
            }
        }
        Some(())
    }

    /// Registers and reports the facts, retrying while the edge cannot be
    /// reached. Err: the edge refused (a wrong token, tenant or facts).
    async fn connect(&mut self) -> Result<Next, String> {
        while !self.registered || self.view.is_none() {
            let name = self.s.name.clone();
            let step = if !self.registered {
                let r = or_stop(
                    &self.stop,
                    self.edges.client().register(&self.s.token, name.as_deref()),
                )
                .await;
                match r {
                    None => return Ok(Next::Stop),
                    Some(Ok(r)) => {
                        log(&format!(
                            "registered with the edge at {} as node {} of tenant {}",
                            self.edges.url(),
                            r.node_id,
                            r.tenant
                        ));
                        self.registered = true;
                        if self.fetch_guest().await.is_none() {
                            return Ok(Next::Stop);
                        }
                        Ok(())
                    }
                    Some(Err(e)) => Err(("cannot register with the edge", e)),
                }
            } else {
                let client = self.edges.client();
                match or_stop(&self.stop, client.report_facts(&self.facts)).await {
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
                Ok(()) => {
                    self.backoff = Duration::from_secs(1);
                    self.contacted = true;
                    self.failed_over = 0;
                }
                // Before the first contact, an edge whose certificate does
                // not verify is a setting to fix, not an outage to wait
                // out; later it may be one the edge is renewing.
                Err((what, e)) if e.is_permanent() && !self.contacted => {
                    return Err(format!(
                        "{what}: {e}; not retrying: name the CA that signed the edge's certificate with --edge-ca, or renew the certificate"
                    ));
                }
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

    /// The highest queue this node polls: the lower of the edge's routing
    /// and its own facts, never above [`MAX_TAKEN_TIER`]. The tier-2 queue
    /// is microVM tools': a node polls it where both it and the edge hold
    /// that it offers microVMs — a Linux node's run inside its proven tier
    /// 1; a Mac's (Apple's container) are not inside tier 1 on any Mac, and
    /// are offered whatever tier it proved, so the edge hands a Mac nothing
    /// of tier 1 from the queues below.
    fn tier(&self) -> u8 {
        let view = self.view.as_ref();
        let edge_vms = view
            .and_then(|v| v.facts.as_ref())
            .is_some_and(|f| f.microvm_ready);
        let edge = view.map_or(0, |v| if edge_vms { 2 } else { v.tier_routed });
        let m = &self.facts.microvm;
        let outside_tier1 = m.backend.is_some_and(|b| !b.inside_tier1());
        let own = if m.ready && (self.facts.tier_routed >= 1 || outside_tier1) {
            2
        } else {
            self.facts.tier_routed
        };
        edge.min(own).min(MAX_TAKEN_TIER)
    }

    /// The next long poll: the queues from the node's tier down, a job
    /// only when a slot is free (`take`), and the jobs it runs, so a
    /// cancel of one answers at once.
    fn poll_request(&self, take: bool, holding: Vec<String>) -> PollRequest {
        PollRequest {
            tier: self.tier(),
            wait_ms: u64::try_from(LONG_POLL.as_millis()).unwrap_or(u64::MAX),
            below: true,
            take,
            holding,
        }
    }

    /// Handles a poll's answer: the answer, none (a refusal already
    /// handled: ask again after `--poll-ms`), or stop (None).
    async fn answered(&mut self, r: Result<Polled, ClientError>) -> Option<Option<Polled>> {
        match r {
            Ok(p) => {
                if self.pending {
                    log("approved by an operator: taking work now");
                    self.pending = false;
                }
                if let (Some(r), Some(v)) = (p.tier_routed, self.view.as_mut()) {
                    if r != v.tier_routed {
                        log(&format!(
                            "the edge routes this node at tier {r} now (was {})",
                            v.tier_routed
                        ));
                        v.tier_routed = r;
                    }
                }
                self.backoff = Duration::from_secs(1);
                self.failed_over = 0;
                Some(Some(p))
            }
            Err(e) => {
                match e.refusal_code() {
                    Some("node_removed") => {
                        log(&format!("{e}"));
                        self.removed = true;
                        return None;
                    }
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
                    Some("pending_approval") => {
                        if !self.pending {
                            log(&format!("{e} (asking again every {:?})", self.s.poll));
                            self.pending = true;
                        }
                    }
                    _ => {
                        let wait = self.unreachable("cannot poll the edge for work", &e);
                        if !self.sleep(wait).await {
                            return None;
                        }
                    }
                }
                Some(None)
            }
        }
    }
}

impl Daemon {
    /// Polls for work and starts each job leased (on `running`) until the
    /// node stops or fails: its exit status. The facts are probed again
    /// every `recheck_every` (`recheck`); `once` stops after the first
    /// contact.
    async fn take_work(
        &mut self,
        runner: &Arc<Runner>,
        running: &mut tokio::task::JoinSet<()>,
        recheck: &mut impl FnMut() -> Option<NodeFacts>,
        once: bool,
        recheck_every: Duration,
    ) -> i32 {
        let poll_every = self.s.poll;
        let max_jobs = self.s.jobs;
        let mut next_check = Instant::now() + recheck_every;
        let mut held: Option<HeldPoll> = None;
        loop {
            while running.try_join_next().is_some() {}
            match self.connect().await {
                Ok(Next::Continue) => {}
                Ok(Next::Stop) => break Exit::Ok.code(),
                Err(e) => {
                    log(&e);
                    break Exit::CheckFailed.code();
                }
            }
            if once {
                break Exit::Ok.code();
            }
            if Instant::now() >= next_check {
                next_check = Instant::now() + recheck_every;
                if let Some(f) = recheck() {
                    self.facts = f;
                    self.view = None;
                    continue;
                }
            }
            let free = runner.busy() < max_jobs;
            let client = self.edges.client();
            let mut stop = self.stop.clone();
            // While every slot is busy, a poll that only learns what to stop
            // is held, and kept when a slot frees: dropped, its HTTP/1
            // connection would go with it, and the next poll pay for a new
            // one. A slot free: ask for work (on another connection) while
            // it goes on.
            if !free && held.is_none() {
                let req = self.poll_request(false, runner.holding());
                let c = client.clone();
                held = Some(Box::pin(async move {
                    let sent = Instant::now();
                    (sent, c.poll_with(&req).await)
                }));
            }
            let take = free.then(|| self.poll_request(true, runner.holding()));
            let sent = Instant::now();
            let got = tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s) => Got::Stop,
                // Every slot was busy and one freed (its work ended; its end
                // may still be being reported): poll again, taking.
                _ = runner.freed.notified(), if !free => Got::Freed,
                a = answer_of(&mut held) => Got::Held(a),
                r = poll_if(&client, take.as_ref()) => Got::Fresh(r),
            };
            let (sent, r) = match got {
                Got::Stop => break Exit::Ok.code(),
                Got::Freed => continue,
                Got::Held(a) => {
                    held = None;
                    a
                }
                Got::Fresh(r) => (sent, r),
            };
            let p = match self.answered(r).await {
                None => break Exit::Ok.code(),
                Some(None) => {
                    if !self.sleep(poll_every).await {
                        break Exit::Ok.code();
                    }
                    continue;
                }
                Some(Some(p)) => p,
            };
            for s in &p.stop {
                runner.tell(s);
            }
            match p.lease {
                Some(lease) => match runner.hold(&lease.job.job_id) {
                    Some(told) => {
                        let slot = runner.slot();
                        running.spawn(runner.clone().take(lease, self.taking(), told, slot));
                    }
                    None => log(&format!(
                        "job {}: an earlier attempt of it still runs here; not taken, its lease lapses",
                        lease.job.job_id
                    )),
                },
                // An edge that answered with nothing sooner than
                // --poll-ms (one that does not hold polls) is asked
                // again after it.
                None if p.stop.is_empty() => {
                    let rest = poll_every.saturating_sub(sent.elapsed());
                    if !rest.is_zero() && !self.sleep(rest).await {
                        break Exit::Ok.code();
                    }
                }
                None => {}
            }
        }
    }
}

/// A poll held while every slot is busy: when it was sent, and its answer.
type HeldPoll = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Instant, Result<Polled, ClientError>)> + Send>,
>;

/// What ended the daemon's wait.
enum Got {
    Stop,
    Freed,
    Held((Instant, Result<Polled, ClientError>)),
    Fresh(Result<Polled, ClientError>),
}

/// The held poll's answer, or never when none is held.
async fn answer_of(held: &mut Option<HeldPoll>) -> (Instant, Result<Polled, ClientError>) {
    match held {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// The answer to `req` when there is one to send, or never.
async fn poll_if(client: &NodeClient, req: Option<&PollRequest>) -> Result<Polled, ClientError> {
    match req {
        Some(r) => client.poll_with(r).await,
        None => std::future::pending().await,
    }
}

/// What tells the daemon to stop: a future that resolves once, with Err
/// when the node cannot watch for what would stop it (it stops then, and
/// exits with a failure).
pub type Stop = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// Resolves when `s` (Linux's signal pipe) becomes readable.
#[cfg(target_os = "linux")]
pub fn readable(s: std::os::unix::net::UnixStream) -> Stop {
    Box::pin(async move {
        let watched = s
            .set_nonblocking(true)
            .and_then(|_| tokio::net::UnixStream::from_std(s));
        match watched {
            Ok(s) => {
                let _ = s.readable().await;
                Ok(())
            }
            // Stopping is safe; running on unable to stop is not.
            Err(e) => Err(format!("cannot watch for signals: {e}")),
        }
    })
}

/// Connects to the edge and takes work until `stop` resolves (a signal,
/// Ctrl-C): the one daemon of every platform. `recheck` probes the machine
/// again and returns the facts when they changed. On Linux the walls are
/// chosen from the settings; elsewhere `walls` gives them.
pub fn serve(
    s: Settings,
    #[cfg(not(target_os = "linux"))] walls: Walls,
    key: NodeKey,
    facts: NodeFacts,
    mut recheck: impl FnMut() -> Option<NodeFacts>,
    stop: Stop,
    once: bool,
) -> i32 {
    #[cfg(target_os = "linux")]
    let walls = match Walls::linux(&s) {
        Ok(w) => w,
        Err(e) => {
            log(&format!("cannot make the node's host context: {e}"));
            return Exit::CheckFailed.code();
        }
    };
    let edges = match Edges::new(&s, &key) {
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
    let held = walls.sandbox.clone();
    let code = rt.block_on(async move {
        let (signal_tx, signal) = tokio::sync::watch::channel(false);
        // Set before the signal goes out, so that the loop it stops sees it.
        let unwatched = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = unwatched.clone();
        tokio::spawn(async move {
            if let Err(e) = stop.await {
                log(&format!("{e}; stopping"));
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            let _ = signal_tx.send(true);
        });
        let recheck_every = s.recheck;
        let max_jobs = s.jobs;
        let s = Arc::new(s);
        let edges = Arc::new(edges);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let runner = Arc::new(Runner {
            s: s.clone(),
            sandbox: walls.sandbox.clone(),
            #[cfg(target_os = "linux")]
            host: walls.host.clone(),
            #[cfg(target_os = "macos")]
            egress: walls.egress.clone(),
            edges: edges.clone(),
            stop: stop_rx,
            running: Default::default(),
            records: retention::Records::new(s.data_dir.join("jobs")),
            told: Default::default(),
            busy: Default::default(),
            freed: Default::default(),
        });
        runner.clone().sweep(None).await;
        let mut d = Daemon {
            s,
            edges,
            facts,
            view: None,
            stop: signal,
            registered: false,
            guest_fetched: false,
            guest_bin: None,
            backoff: Duration::from_secs(1),
            removed: false,
            pending: false,
            contacted: false,
            failed_over: 0,
        };
        log(&format!(
            "node {}: connecting to the edge at {} as tenant {}, up to {max_jobs} job(s) at once",
            d.edges.client().node_id(),
            d.s.urls.join(", then "),
            d.s.tenant
        ));
        let mut running = tokio::task::JoinSet::new();
        let code = d
            .take_work(&runner, &mut running, &mut recheck, once, recheck_every)
            .await;
        // Every running job stops and is given back before the node exits.
        let _ = stop_tx.send(true);
        while running.join_next().await.is_some() {}
        if d.removed {
            return Exit::CheckFailed.code();
        }
        if unwatched.load(std::sync::atomic::Ordering::SeqCst) {
            return Exit::CheckFailed.code();
        }
        if code != Exit::Ok.code() {
            return code;
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
    use super::job::safe_id;
    use oz0_edge::wire::ShellJob;

    #[test]
    fn payloads_are_strict() {
        let p = ShellJob::from_value(&serde_json::json!({
            "command": ["true"], "env": {"A": "1"}, "timeout": 5
        }))
        .unwrap();
        assert_eq!(p.command, ["true"]);
        for bad in [
            serde_json::json!({"command": ["true"], "argv": ["x"]}),
            serde_json::json!({"command": []}),
            serde_json::json!({"command": ["true"], "env": {"OZ0_X": "1"}}),
            serde_json::json!({"command": ["true"], "allow": ["bad host!"]}),
            serde_json::json!({"command": ["true"], "memory": 0}),
            serde_json::json!({"command": ["echo", "a\u{0}b"]}),
        ] {
            assert!(ShellJob::from_value(&bad).is_err(), "{bad}");
        }
        assert!(safe_id("j0123abc-x_") && !safe_id("../x") && !safe_id(""));
    }
}
