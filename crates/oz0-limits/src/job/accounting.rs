//! What a job used and what ended it: the job's CPU time, its counters
//! (memory peak, out-of-memory kills, refused forks) from the v2 or v1 control
//! files, and the [`JobOutcome`] naming the limit most likely hit.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{kv, Job, JobOutcome, JobStats, LimitHit, Version};

impl Job {
    /// CPU time of the whole job so far, microseconds (v2 `cpu.stat
    /// usage_usec`, v1 `cpuacct.usage` / 1000).
    pub fn cpu_usage(&self) -> io::Result<Duration> {
        self.cpu_usage_usec().map(Duration::from_micros)
    }

    /// CPU time of the whole job so far, microseconds, or why it cannot be read.
    pub(crate) fn cpu_usage_usec(&self) -> io::Result<u64> {
        let (file, d) = self.cpu_file();
        if !self.has(if self.version == Version::V2 {
            "unified"
        } else {
            "cpuacct"
        }) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no cpuacct hierarchy in this job",
            ));
        }
        let text = self.fs.read(&d.join(file))?;
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected {file}: {text:?}"),
            )
        };
        match self.version {
            Version::V2 => kv(&text, "usage_usec").ok_or_else(bad),
            Version::V1 => text
                .trim()
                .parse::<u64>()
                .map(|ns| ns / 1000)
                .map_err(|_| bad()),
        }
    }

    /// Records that the supervisor ended the run for its CPU time, so that
    /// [`Job::outcome`] names [`LimitHit::CpuTime`].
    pub(crate) fn mark_cpu_limit_hit(&self) {
        self.cpu_limit_hit.store(true, Ordering::SeqCst);
    }

    /// Reads the job's counters.
    pub fn stats(&self) -> JobStats {
        let fs = self.fs.as_ref();
        let read = |p: PathBuf| fs.read(&p).ok();
        let num = |p: PathBuf| read(p).and_then(|s| s.trim().parse::<u64>().ok());
        let mut s = JobStats {
            cpu_usec: self.cpu_usage_usec().ok(),
            ..Default::default()
        };
        let pd = self.dir_for("pids");
        s.pids_limit_hits = read(pd.join("pids.events"))
            .and_then(|t| kv(&t, "max"))
            .unwrap_or(0);
        s.pids_peak = num(pd.join("pids.peak"));
        let md = self.dir_for("memory");
        match self.version {
            Version::V2 => {
                s.memory_peak_bytes = num(md.join("memory.peak"));
                if let Some(ev) = read(md.join("memory.events")) {
                    s.oom_kills = kv(&ev, "oom_kill").unwrap_or(0);
                    let group = kv(&ev, "oom_group_kill").unwrap_or(0);
                    s.oom_killed = s.oom_kills > 0 || group > 0;
                }
            }
            Version::V1 => {
                s.memory_peak_bytes = num(md.join("memory.max_usage_in_bytes"));
                if let Some(oc) = read(md.join("memory.oom_control")) {
                    match kv(&oc, "oom_kill") {
                        Some(n) => {
                            s.oom_kills = n;
                            s.oom_killed = n > 0;
                        }
                        // Kernels before 4.13 have no oom_kill counter.
                        None => {
                            let fail = num(md.join("memory.failcnt")).unwrap_or(0);
                            s.oom_killed = kv(&oc, "under_oom") == Some(1) || fail > 0;
                        }
                    }
                }
            }
        }
        s
    }

    /// Counters, enforced limits, and which limit most likely ended the run.
    pub fn outcome(&self) -> JobOutcome {
        let stats = self.stats();
        let limit_hit = if self.cpu_limit_hit.load(Ordering::SeqCst) {
            Some(LimitHit::CpuTime)
        } else if stats.oom_killed {
            Some(LimitHit::Memory)
        } else if stats.pids_limit_hits > 0 {
            Some(LimitHit::Processes)
        } else {
            None
        };
        JobOutcome {
            stats,
            enforced: self.enforced.clone(),
            limit_hit,
        }
    }
}
