//! The supervisor: enforces `--cpu-seconds` and `--timeout` by polling.
//!
//! cgroups have no total-CPU-time limit, only CPU bandwidth, so the job's CPU
//! usage is polled and the whole job killed once it is over; the wall-time
//! limit is a deadline checked by the same loop. [`Verdict`] says which limit
//! ended the run.

use std::time::{Duration, Instant};

use oz0_policy::Limits;
use serde::Serialize;

use crate::error::JobError;
use crate::job::{io_err, Job};

/// Longest time between two CPU-usage polls.
pub const CPU_POLL_MAX: Duration = Duration::from_millis(100);
/// Shortest time between two CPU-usage polls.
pub(crate) const CPU_POLL_MIN: Duration = Duration::from_millis(5);

/// Why a supervisor ended the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The job used more CPU time than `--cpu-seconds`.
    CpuTime {
        /// CPU time used when detected, microseconds.
        used_usec: u64,
        /// The limit, microseconds.
        limit_usec: u64,
    },
    /// `--timeout` passed.
    Timeout {
        /// The limit, seconds.
        after_seconds: u64,
    },
}

/// Enforces `--cpu-seconds` and `--timeout` by polling.
///
/// cgroups limit CPU *bandwidth* (`cpu.max`), not total CPU time, so CPU
/// seconds are enforced here: the caller's wait loop blocks at most
/// [`Supervisor::next_poll`] between calls to [`Supervisor::check`], which
/// reads the job's CPU usage and kills the whole job once it is over. The
/// interval shrinks as the budget runs out (remaining budget / CPUs, between
/// 5 and 100 ms), so a job overshoots by at most one interval per CPU.
#[derive(Debug)]
pub struct Supervisor {
    cpu_limit_usec: Option<u64>,
    timeout: Option<(Instant, u64)>,
    cpus: u64,
    last_usec: u64,
    verdict: Option<Verdict>,
}

/// The CPUs this process may run on: at most how many CPU-seconds a job
/// spends per second. Its affinity, not `available_parallelism`, which
/// also reads the cgroup's CPU quota (`/proc/self/cgroup`, the cgroup
/// file system: about 0.3 ms of every run here); a quota makes the real
/// bound lower, so the poll interval (budget left / CPUs) only shortens.
fn cpus() -> u64 {
    rustix::thread::sched_getaffinity(None).map_or(1, |s| u64::from(s.count().max(1)))
}

impl Supervisor {
    /// A supervisor for `limits`, the run having started at `started`.
    pub fn new(limits: &Limits, started: Instant) -> Self {
        Supervisor {
            cpu_limit_usec: limits.cpu_seconds.map(|s| s.saturating_mul(1_000_000)),
            timeout: limits
                .timeout_seconds
                .map(|s| (started + Duration::from_secs(s), s)),
            cpus: if limits.cpu_seconds.is_some() {
                cpus()
            } else {
                1
            },
            last_usec: 0,
            verdict: None,
        }
    }

    /// True when there is something to supervise.
    pub fn is_active(&self) -> bool {
        self.cpu_limit_usec.is_some() || self.timeout.is_some()
    }

    /// How long the caller may block before the next [`Supervisor::check`];
    /// None when nothing is supervised (block until the command ends).
    pub fn next_poll(&self, now: Instant) -> Option<Duration> {
        let cpu = self.cpu_limit_usec.map(|lim| {
            let left = lim.saturating_sub(self.last_usec) / self.cpus.max(1);
            Duration::from_micros(left).clamp(CPU_POLL_MIN, CPU_POLL_MAX)
        });
        let wall = self.timeout.map(|(d, _)| d.saturating_duration_since(now));
        match (cpu, wall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Checks the limits; on a verdict, kills the job (when there is one) and
    /// returns it. The same verdict is returned by later calls.
    pub fn check(&mut self, job: Option<&Job>, now: Instant) -> Result<Option<Verdict>, JobError> {
        if self.verdict.is_some() {
            return Ok(self.verdict);
        }
        if let (Some(lim), Some(job)) = (self.cpu_limit_usec, job) {
            let used = job.cpu_usage_usec().map_err(|e| {
                let (file, d) = job.cpu_file();
                io_err(
                    "read",
                    &d.join(file),
                    e,
                    "the job's CPU usage must stay readable".into(),
                )
            })?;
            self.last_usec = used;
            if used > lim {
                job.mark_cpu_limit_hit();
                self.verdict = Some(Verdict::CpuTime {
                    used_usec: used,
                    limit_usec: lim,
                });
            }
        }
        if self.verdict.is_none() {
            if let Some((deadline, secs)) = self.timeout {
                if now >= deadline {
                    self.verdict = Some(Verdict::Timeout {
                        after_seconds: secs,
                    });
                }
            }
        }
        if self.verdict.is_some() {
            if let Some(job) = job {
                job.kill()?;
            }
        }
        Ok(self.verdict)
    }

    /// One line for the run status.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(l) = self.cpu_limit_usec {
            parts.push(format!(
                "CPU time {} s: polled every {}-{} ms from the job's cgroup, whole job killed when over",
                l / 1_000_000,
                CPU_POLL_MIN.as_millis(),
                CPU_POLL_MAX.as_millis()
            ));
        }
        if let Some((_, s)) = self.timeout {
            parts.push(format!("wall time {s} s: whole job killed at the deadline"));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supervisor_intervals_and_timeout() {
        let t0 = Instant::now();
        let s = Supervisor::new(&Limits::default(), t0);
        assert!(!s.is_active());
        assert_eq!(s.next_poll(t0), None);
        let mut s = Supervisor::new(
            &Limits {
                timeout_seconds: Some(1),
                ..Default::default()
            },
            t0,
        );
        assert_eq!(s.next_poll(t0), Some(Duration::from_secs(1)));
        assert_eq!(s.check(None, t0).unwrap(), None);
        assert_eq!(
            s.check(None, t0 + Duration::from_secs(2)).unwrap(),
            Some(Verdict::Timeout { after_seconds: 1 })
        );
        let s = Supervisor::new(
            &Limits {
                cpu_seconds: Some(1),
                ..Default::default()
            },
            t0,
        );
        assert_eq!(s.next_poll(t0), Some(CPU_POLL_MAX));
    }
}
