//! One leased job on this node, from its lease to its completion: its
//! record folder and fresh work folder, the check of its payload, its run
//! under the lease (renewed a third of the way through, the run killed
//! when the lease is lost or the job cancelled), and its end reported with
//! the bounded tails of its output (sent to the edge as it comes, too:
//! `edge/stream.rs`). Several run at once, each on its own
//! task, lease, work folder and limits (`oz0-node run --jobs N`).
//!
//! A job is stopped, and its end not reported, when the edge says so: in
//! the answer to the node's long poll (which names every job it runs), or
//! in the answer to the job's held renewal, whichever comes first. A job
//! cancelled by an operator is logged as a cancel; one whose lease is not
//! this node's any more (it lapsed, or a drain moved the job) as such.
//!
//! A node told to stop kills its runs and gives their jobs back to the
//! edge at once (`release`), so another node takes them without waiting
//! for the leases to lapse.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oz0_core::{Cancel, Sandbox};
use oz0_edge::client::{ClientError, Lease};
use oz0_edge::wire::{JobPayload, StopJob, MAX_HOLDING};
use oz0_policy::RunSpec;
use tokio::sync::watch;

use super::files::{create_private, private_dir};
use super::job::{cancel_pair, run_job, safe_id, spec_for, write_status, JobEnd};
use super::{log, Settings, MAX_BACKOFF};

/// A job's work, run on a blocking thread with its cancel.
type Task = Box<dyn FnOnce(Cancel) -> Result<JobEnd, String> + Send>;

/// What every job of this node runs with.
pub(super) struct Runner {
    pub(super) s: Arc<Settings>,
    /// The wall every job runs behind: the node's host context (tier 1,
    /// one egress proxy for all jobs), or none (`--sandbox none`).
    pub(super) sandbox: Arc<dyn Sandbox>,
    /// The same host context, for tool servers (none at tier 0).
    #[cfg(target_os = "linux")]
    pub(super) host: Option<Arc<oz0_linux::Tier1>>,
    /// The node's egress proxy, for a Mac's microVM tools with egress.
    #[cfg(target_os = "macos")]
    pub(super) egress: Arc<dyn oz0_egress::EgressService>,
    /// The edges; a job's renewals go to the one talked to when it
    /// started, its end to the one talked to when it ended.
    pub(super) edges: Arc<super::Edges>,
    /// Turns true when the node is told to stop.
    pub(super) stop: watch::Receiver<bool>,
    /// The jobs running now, whose records retention never removes.
    pub(super) running: Mutex<BTreeSet<String>>,
    /// The job records kept, indexed as jobs end.
    pub(super) records: super::retention::Records,
    /// The jobs whose work runs now (the node's polls name them), each
    /// with what tells it to stop: `Some(true)` cancelled by an operator,
    /// `Some(false)` its lease is not this node's any more.
    pub(super) told: Mutex<BTreeMap<String, watch::Sender<Option<bool>>>>,
    /// Jobs whose work runs now (their slots of `--jobs`): a job's slot is
    /// free once its work ended, while its end is still being written and
    /// reported, so that the next job is asked for meanwhile.
    pub(super) busy: std::sync::atomic::AtomicUsize,
    /// Told each time a slot frees.
    pub(super) freed: tokio::sync::Notify,
}

/// One slot of `--jobs`, held while a job's work runs.
pub(super) struct Slot(Arc<Runner>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0
            .busy
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        // Stored when no one waits yet: the daemon's next wait sees it.
        self.0.freed.notify_one();
    }
}

/// What tells a job's run to stop.
pub(super) type Told = watch::Receiver<Option<bool>>;

/// Takes a job off [`Runner::running`] when its task ends, however it ends.
struct Running<'a>(&'a Runner, String);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.forget(&self.1);
        self.0
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

/// What the node knows of itself when it takes a job.
#[derive(Debug, Clone)]
pub(super) struct Taking {
    /// The tier it takes work at.
    pub(super) tier: u8,
    /// Whether it offers microVMs: why not, when not.
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    pub(super) microvms: Result<(), String>,
    /// The guest binary its microVMs' bridge runs (a Mac's), when fetched.
    #[cfg(target_os = "macos")]
    pub(super) guest_bin: Option<std::path::PathBuf>,
    /// Whether it runs container tools: why not, when not.
    #[cfg(target_os = "linux")]
    pub(super) images: Result<(), String>,
}

/// How a job's work ended, under its lease.
enum Ran {
    /// It ran to its end (or its thread failed).
    Ended(Result<Result<JobEnd, String>, tokio::task::JoinError>),
    /// The node was told to stop.
    NodeStopped,
    /// The edge said to stop it: cancelled by an operator (`Some(true)`).
    Told(Option<bool>),
    /// Its output passed the records' bound (`--keep-jobs-mib`).
    Over,
}

/// Returns once `streams` (a running job's stdout and stderr, kept in its
/// record on the node's disk) together hold more than `max` bytes, or can
/// no longer be measured, looking every [`super::stream::TICK`]. All the
/// records together stay under `--keep-jobs-mib`, but a running job's is
/// never removed: without this, one job from outside (`yes`) filled the
/// node's data directory, and every other job's record with it.
async fn over_bound(streams: &[File], max: u64) {
    let mut tick = tokio::time::interval(super::stream::TICK);
    loop {
        tick.tick().await;
        let mut held: u64 = 0;
        for f in streams {
            match f.metadata() {
                Ok(m) => held = held.saturating_add(m.len()),
                Err(_) => return,
            }
        }
        if held > max {
            return;
        }
    }
}

/// Waits until `stop` turns true.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Runner {
    /// Counts a job just leased as running, before its task starts (so
    /// the next poll names it): what tells it to stop. `None` while an
    /// earlier attempt of the same job still runs here (its lease lost,
    /// its run being killed): both are known by the job's id alone, so the
    /// old one's end would take the new one off the polls' list and out of
    /// retention's keeping. The new lease then lapses, and the edge hands
    /// the job out again.
    pub(super) fn hold(&self, id: &str) -> Option<Told> {
        let (tx, rx) = watch::channel(None);
        if safe_id(id) {
            let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
            if !running.insert(id.to_string()) {
                return None;
            }
            self.told
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.to_string(), tx);
        }
        Some(rx)
    }

    /// The jobs whose work runs now, as a poll names them.
    pub(super) fn holding(&self) -> Vec<String> {
        self.told
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .take(MAX_HOLDING)
            .cloned()
            .collect()
    }

    /// Tells a job the edge named in a poll's answer to stop.
    pub(super) fn tell(&self, stop: &StopJob) {
        if let Some(tx) = self
            .told
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stop.job_id)
        {
            tx.send_replace(Some(stop.reason == "cancelled"));
        }
    }

    /// A job's work ended: polls no longer name it.
    fn forget(&self, id: &str) {
        self.told
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
    }

    /// Applies the job records' retention (`--keep-jobs-days`,
    /// `--keep-jobs-mib`) and logs what it removed: at the start
    /// (`ended` None), and after the job `ended`.
    pub(super) async fn sweep(self: Arc<Self>, ended: Option<String>) {
        let me = self.clone();
        let keep = self.s.keep;
        let swept = tokio::task::spawn_blocking(move || {
            me.records.sweep(ended.as_deref(), keep, &me.running)
        })
        .await;
        if let Some(line) = swept
            .ok()
            .and_then(|s| super::retention::describe(&s, keep))
        {
            log(&line);
        }
    }

    /// Runs one leased job, reports its end, and applies the records'
    /// retention.
    /// `told` is [`Runner::hold`]'s for this job.
    pub(super) async fn take(self: Arc<Self>, lease: Lease, at: Taking, told: Told, slot: Slot) {
        let id = lease.job.job_id.clone();
        {
            let _running = safe_id(&id).then(|| Running(&self, id.clone()));
            self.run_one(lease, at, told, slot).await;
        }
        self.sweep(Some(id)).await;
    }

    /// Takes a slot of `--jobs` for a job about to be taken.
    pub(super) fn slot(self: &Arc<Self>) -> Slot {
        self.busy.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Slot(self.clone())
    }

    /// Jobs whose work runs now.
    pub(super) fn busy(&self) -> usize {
        self.busy.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn run_one(&self, mut lease: Lease, at: Taking, told: Told, slot: Slot) {
        let job = lease.job.clone();
        if !safe_id(&job.job_id) {
            log("the edge handed out a job whose id is not plain letters and digits: not run");
            return;
        }
        let id = job.job_id.clone();
        // What the edge must route, held here too: work started by an
        // outside event (a webhook, a chat message) runs only behind a
        // wall this node proved, whatever tier the lease names.
        let outside = job.origin != oz0_edge::routing::Origin::Internal.as_str();
        if outside && (job.tier < 1 || at.tier < 1) {
            log(&format!(
                "refused job {id}: it comes from outside ({}) and this node {}; outside work runs only behind a proven wall (tier 1 or above); not run, its lease lapses",
                job.origin,
                if at.tier < 1 {
                    "proved no wall (tier 0)".to_string()
                } else {
                    format!("was handed it at tier {}", job.tier)
                }
            ));
            return;
        }
        if job.tier > at.tier {
            // The edge should never do this; the node refuses too. The lease
            // lapses and the edge can hand the job to an eligible node.
            log(&format!(
                "refused job {id}: it needs tier {} and this node is routed at tier {}; not run, its lease lapses",
                job.tier, at.tier
            ));
            return;
        }
        log(&format!(
            "took job {id} (tier {}, {} from {}, attempt {})",
            job.tier,
            job.job.kind().as_str(),
            job.origin,
            job.attempt
        ));
        let record = self.s.data_dir.join("jobs").join(&id);
        let prepared = private_dir(&record, "the job record folder").and_then(|_| {
            let open = |n: &str| {
                create_private(&record.join(n))
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
                return;
            }
        };
        let output = super::stream::Output::open(&id, &record, &out, &err);
        let bound = match (out.try_clone(), err.try_clone()) {
            (Ok(o), Ok(e)) => vec![o, e],
            (Err(e), _) | (_, Err(e)) => {
                log(&format!(
                    "cannot watch job {id}'s output: {e}; not run, its lease lapses"
                ));
                return;
            }
        };
        let work = self.s.work_root.join(format!("job-{id}-{}", job.attempt));
        let fresh = private_dir(&self.s.work_root, "--work-root").and_then(|_| {
            super::files::remove_work(&work)?;
            private_dir(&work, "the job's work directory")
        });
        let task = fresh.and_then(|_| self.task(&job, &work, out, err, &at));
        let end = match task {
            Err(e) => {
                log(&format!("job {id} refused: {e}"));
                JobEnd::refused(e)
            }
            Ok(task) => match self
                .run_under_lease(&mut lease, task, told, output, &bound)
                .await
            {
                Some(end) => end,
                None => {
                    if let Err(e) = super::files::remove_work(&work) {
                        log(&format!("job {id}: {e}"));
                    }
                    return;
                }
            },
        };
        // The work is over: the next job is asked for while this one's end
        // is written and reported.
        drop(slot);
        self.forget(&id);
        if let Err(e) = super::files::remove_work(&work) {
            log(&format!("job {id}: {e}"));
        }
        write_status(&record, &job, &end);
        log(&format!(
            "job {id} ended: {} with status {} after {}ms",
            end.outcome, end.exit_code, end.duration_ms
        ));
        self.complete(&lease, &end, &record).await;
    }

    /// What a job runs, checked: a shell command's spec, or a tool call.
    fn task(
        &self,
        job: &oz0_edge::wire::LeasedJobView,
        work: &Path,
        out: File,
        err: File,
        at: &Taking,
    ) -> Result<Task, String> {
        #[cfg(target_os = "linux")]
        if let JobPayload::Tool(t) = &job.job {
            return self.tool_task(t, work, err, at, job.oci_runtime.as_deref());
        }
        #[cfg(target_os = "macos")]
        if let JobPayload::Tool(t) = &job.job {
            return self.mac_tool_task(t, work, err, at);
        }
        #[cfg(windows)]
        if let JobPayload::Tool(_) = &job.job {
            let _ = (err, at);
            return Err(format!(
                "a tool job: its server runs only behind a wall, and this {} node runs at tier 0; not run",
                self.s.platform
            ));
        }
        if job.tier >= 2 {
            return Err(format!(
                "a {} job at tier 2: only a tool job runs there (a microVM per tool server); not run",
                job.job.kind().as_str()
            ));
        }
        let JobPayload::Shell(p) = &job.job else {
            return Err("a harness session: no node runs harness sessions yet; not run".into());
        };
        // A command runs behind the node's own wall: never one of a tier
        // above it (a Mac polls the tier-2 queue for its microVM tools, and
        // is handed nothing of tier 1; should it be, it refuses).
        if job.tier > self.sandbox.tier() {
            return Err(format!(
                "a {} job at tier {}, and this node's wall for commands is tier {}; not run",
                job.job.kind().as_str(),
                job.tier,
                self.sandbox.tier()
            ));
        }
        p.check().map_err(|e| e.to_string())?;
        let p = p.clone();
        let spec: RunSpec = spec_for(p, work, &self.s.data_dir).map_err(|e| e.to_string())?;
        // Refused by name before it runs (the sandbox would refuse it too).
        // By the tier this node proved: a node whose self-test failed still
        // builds its sandbox, but nothing it claims of it was shown.
        if at.tier == 0 || self.sandbox.tier() == 0 {
            if let Some(why) = oz0_core::tier0::refusal(&spec, &oz0_core::Role::Command) {
                return Err(format!("{why} on this {} node", self.s.platform));
            }
        }
        let sandbox = self.sandbox.clone();
        Ok(Box::new(move |cancel| {
            run_job(&*sandbox, &spec, out, err, cancel).map_err(|e| e.to_string())
        }))
    }

    /// A tool call's work: its server behind this node's wall.
    #[cfg(target_os = "linux")]
    fn tool_task(
        &self,
        t: &oz0_plugin::job::ToolJob,
        work: &Path,
        err: File,
        at: &Taking,
        oci_runtime: Option<&str>,
    ) -> Result<Task, String> {
        let checked = t.check().map_err(|e| e.to_string())?;
        let host = self
            .host
            .clone()
            .ok_or("a tool's server runs only behind a wall, and this node runs with --sandbox none (tier 0)")?;
        if at.tier < 1 {
            return Err("a tool's server runs only behind a wall this node proved, and its self-test did not pass (tier 0)".into());
        }
        let microvms = at.microvms.clone();
        let images = at.images.clone();
        let gvisor = oci_runtime == Some("gvisor");
        let oci = self.s.oci.clone();
        let (work, data_dir) = (work.to_path_buf(), self.s.data_dir.clone());
        let tool_env = self.s.tool_env.clone();
        Ok(Box::new(move |cancel| {
            let ctx = crate::tool::Ctx {
                host: &host,
                work: &work,
                data_dir: &data_dir,
                microvms,
                images: images.map(|()| &oci),
                gvisor,
                env_allowed: Some(&tool_env),
                errors: err,
                cancel: cancel.0,
            };
            crate::tool::run(ctx, &checked)
                .map(JobEnd::from_tool)
                .map_err(String::from)
        }))
    }

    /// A tool call's work on a Mac: a microVM tool's server in Apple's
    /// container (`crate::tool::mac`).
    #[cfg(target_os = "macos")]
    fn mac_tool_task(
        &self,
        t: &oz0_plugin::job::ToolJob,
        work: &Path,
        err: File,
        at: &Taking,
    ) -> Result<Task, String> {
        let checked = t.check().map_err(|e| e.to_string())?;
        let microvms = at.microvms.clone();
        let (work, data_dir) = (work.to_path_buf(), self.s.data_dir.clone());
        let tool_env = self.s.tool_env.clone();
        let egress = self.egress.clone();
        let guest_bin = at.guest_bin.clone();
        Ok(Box::new(move |cancel| {
            let ctx = crate::tool::mac::Ctx {
                work: &work,
                data_dir: &data_dir,
                microvms,
                egress: &egress,
                guest_bin: guest_bin.as_deref(),
                env_allowed: Some(&tool_env),
                errors: err,
                cancel: cancel.0,
            };
            crate::tool::mac::run(ctx, &checked)
                .map(JobEnd::from_tool)
                .map_err(String::from)
        }))
    }

    /// Runs the job while the lease holds. None: the job was stopped (the
    /// edge said so, or the node was told to stop, which gives the job
    /// back) and is not reported.
    async fn run_under_lease(
        &self,
        lease: &mut Lease,
        task: Task,
        mut told: Told,
        output: super::stream::Output,
        bound: &[File],
    ) -> Option<JobEnd> {
        let id = lease.job.job_id.clone();
        let (cancel, cancel_w) = match cancel_pair() {
            Ok(p) => p,
            Err(e) => {
                log(&format!(
                    "cannot make job {id}'s cancel pipe: {e}; not run, its lease lapses"
                ));
                return None;
            }
        };
        let mut handle = tokio::task::spawn_blocking(move || task(cancel));
        let mut stop = self.stop.clone();
        let client = self.edges.client();
        // The output goes to the edge while the work runs, and stops with it.
        let sending = output.send(client.clone(), lease.clone());
        let work = async {
            tokio::select! {
                biased;
                r = &mut handle => Ran::Ended(r),
                _ = stopped(&mut stop) => Ran::NodeStopped,
                t = told.wait_for(Option::is_some) => Ran::Told(t.ok().and_then(|t| *t)),
                () = over_bound(bound, self.s.keep.max_bytes) => Ran::Over,
                never = sending => match never {},
            }
        };
        let r = client.run_leased(lease, work).await;
        // Dropping the cancel's other end cancels the run (its whole tree).
        drop(cancel_w);
        let cancelled = match r {
            Ok(Ran::Ended(joined)) => {
                return Some(match joined {
                    Ok(Ok(end)) => end,
                    Ok(Err(e)) => {
                        log(&format!("job {id}: the sandbox refused or failed: {e}"));
                        JobEnd::refused(e)
                    }
                    Err(e) => {
                        log(&format!("job {id}: the run's thread failed: {e}"));
                        JobEnd::refused(format!("the run's thread failed: {e}"))
                    }
                })
            }
            Ok(Ran::NodeStopped) => {
                let _ = handle.await;
                let given =
                    tokio::time::timeout(Duration::from_secs(5), client.release_job(lease)).await;
                log(&match given {
                    Ok(Ok(())) => format!("job {id} stopped with the node; given back to the edge, which hands it to another node"),
                    Ok(Err(e)) => format!("job {id} stopped with the node; it could not be given back ({e}): the edge hands it out again when its lease lapses"),
                    Err(_) => format!("job {id} stopped with the node; the edge did not answer in time to take it back: it hands it out again when its lease lapses"),
                });
                return None;
            }
            Ok(Ran::Over) => {
                let joined = handle.await;
                let why = format!(
                    "its output passed {} MiB, what this node keeps of all job records (--keep-jobs-mib): every process of the run was killed",
                    self.s.keep.max_bytes >> 20
                );
                log(&format!("job {id}: {why}"));
                let mut end = match joined {
                    Ok(Ok(end)) => end,
                    _ => JobEnd::refused(why.clone()),
                };
                end.outcome = "output_limit";
                end.reason = Some(why);
                return Some(end);
            }
            Ok(Ran::Told(cancelled)) => cancelled.unwrap_or(false),
            Err(ClientError::LeaseLost { cancelled, .. }) => cancelled,
            Err(e) => {
                let _ = handle.await;
                log(&format!("job {id} stopped: {e}; its end is not reported"));
                return None;
            }
        };
        let _ = handle.await;
        log(&if cancelled {
            format!("job {id} cancelled by an operator: stopped; its end is not reported")
        } else {
            format!("job {id} stopped: its lease is not this node's any more (it lapsed, or a drain moved the job); its end is not reported")
        });
        None
    }

    /// Reports the job's end, retrying while the edge cannot be reached
    /// and the lease holds.
    async fn complete(&self, lease: &Lease, end: &JobEnd, record: &Path) {
        let id = &lease.job.job_id;
        let completion = end.completion(record);
        let mut backoff = Duration::from_secs(1);
        let mut stop = self.stop.clone();
        loop {
            let client = self.edges.client();
            let r = tokio::select! {
                biased;
                _ = stopped(&mut stop) => None,
                r = client.finish_job(lease, &completion) => Some(r),
            };
            match r {
                None => {
                    log(&format!("stopping before job {id}'s end reached the edge; the edge hands it out again when its lease lapses"));
                    return;
                }
                Some(Ok(())) => return,
                Some(Err(e @ ClientError::LeaseLost { .. }))
                | Some(Err(e @ ClientError::Refused { .. })) => {
                    log(&format!("the edge did not take job {id}'s end: {e}"));
                    return;
                }
                Some(Err(e)) => {
                    if lease.expired() {
                        log(&format!("job {id}'s end could not reach the edge before its lease lapsed ({e}); the edge hands it out again"));
                        return;
                    }
                    log(&format!(
                        "cannot report job {id}'s end: {e}; retrying in {}s",
                        backoff.as_secs()
                    ));
                    tokio::select! {
                        _ = stopped(&mut stop) => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }
}
