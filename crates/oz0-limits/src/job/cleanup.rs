//! Removing the jobs of nodes that are gone: every job folder whose node
//! (pid and start time in its name) is no longer running is emptied and
//! removed; jobs of live nodes are left alone.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde::Serialize;

use super::identity::{parse_job_name, start_time_of};
use super::{Dir, Job, Version, JOB_PREFIX};
use crate::detect::JobMode;
use crate::fs::{CgroupFs, RealFs};

/// What [`cleanup_stale`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CleanupReport {
    /// Job folders removed (their node is gone).
    pub removed: Vec<PathBuf>,
    /// Jobs left alone because their node is alive.
    pub live: usize,
    /// Jobs that could not be removed, with why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Removes the job cgroups of runs whose node process is dead (on the real system).
pub fn cleanup_stale(mode: &JobMode) -> CleanupReport {
    cleanup_stale_with(Arc::new(RealFs), mode)
}

/// Removes the job cgroups under `mode` whose node (pid + start time in the
/// name) is no longer running: kills what is left in them, then removes them.
pub fn cleanup_stale_with(fs: Arc<dyn CgroupFs>, mode: &JobMode) -> CleanupReport {
    let (version, parents): (Version, Vec<(&'static str, PathBuf)>) = match mode {
        JobMode::Unavailable { .. } => return CleanupReport::default(),
        JobMode::V2 { root } => (Version::V2, vec![("unified", root.clone())]),
        JobMode::V1 {
            memory,
            pids,
            cpuacct,
            freezer,
        } => {
            let mut p = vec![("pids", pids.clone()), ("memory", memory.clone())];
            if let Some(c) = cpuacct {
                p.push(("cpuacct", c.clone()));
            }
            if let Some(f) = freezer {
                p.push(("freezer", f.clone()));
            }
            (Version::V1, p)
        }
    };
    let mut names = std::collections::BTreeSet::new();
    for (_, p) in &parents {
        for n in fs.list_dirs(p).unwrap_or_default() {
            if n.starts_with(JOB_PREFIX) {
                names.insert(n);
            }
        }
    }
    let mut report = CleanupReport::default();
    for n in names {
        let Some((pid, start)) = parse_job_name(&n) else {
            continue;
        };
        if start_time_of(fs.as_ref(), pid) == Some(start) {
            report.live += 1;
            continue;
        }
        let dirs: Vec<Dir> = parents
            .iter()
            .map(|(ctl, p)| Dir {
                ctl,
                path: p.join(&n),
            })
            .filter(|d| fs.exists(&d.path))
            .collect();
        let paths: Vec<PathBuf> = dirs.iter().map(|d| d.path.clone()).collect();
        let job = Job {
            fs: Arc::clone(&fs),
            version: version.clone(),
            dirs,
            name: n,
            enforced: Vec::new(),
            cpu_limit_hit: AtomicBool::new(false),
            removed: false,
        };
        match job.remove() {
            Ok(()) => report.removed.extend(paths),
            Err(e) => report.failed.push((paths[0].clone(), e.to_string())),
        }
    }
    report
}
