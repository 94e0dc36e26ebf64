//! Making a cgroup v2 parent usable for jobs: the controllers of the requested
//! limits enabled in its `cgroup.subtree_control`, moving the node's own
//! processes into the `oz0-node` leaf first when the parent is the node's
//! own cgroup (no internal processes).

use std::io;
use std::path::Path;

use super::{fix_for, io_err, Version, NODE_LEAF};
use crate::detect::{controllers_of, procs_of, Layout};
use crate::error::JobError;
use crate::fs::CgroupFs;

/// How many times the node's processes are moved into its leaf before
/// the parent is given up on.
const MOVE_ATTEMPTS: u32 = 20;

/// Held while a parent is prepared.
static PREPARING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes a v2 job parent usable: its children need the controllers of the
/// requested limits (`memory`, `pids`) enabled in its
/// `cgroup.subtree_control`, and a cgroup with controllers enabled for its
/// children may hold no process. When the parent is the node's own cgroup,
/// the node's processes move into the leaf `oz0-node` first. CPU usage
/// (`cpu.stat`) and `cgroup.kill` need no controller. Idempotent.
///
/// Found on a real kernel (`tests/machines.rs`), not in the fake: enabling
/// `pids` alone beside the node's process succeeded and made the node's
/// cgroup a thread root, and every job under it then failed with
/// EOPNOTSUPP.
pub(super) fn prepare_v2_root(
    fs: &dyn CgroupFs,
    root: &Path,
    wanted: &[(&'static str, &'static str)],
) -> Result<(), JobError> {
    let offered = controllers_of(fs, root);
    if let Some((ctl, limit)) = wanted.iter().find(|(c, _)| !offered.iter().any(|o| o == c)) {
        return Err(JobError::Unenforceable {
            limit,
            reason: format!(
                "{} offers no {ctl} controller (cgroup.controllers: [{}])",
                root.display(),
                offered.join(" ")
            ),
            fix: format!(
                "delegate a cgroup with {ctl} (systemd `Delegate=yes`), or use cgroup v1 \
                 (`oz0-node setup cgroups --user {}`)",
                crate::setup::user_name(fs, fs.euid())
            ),
        });
    }
    // One preparation at a time in this process: runs whose jobs are made
    // at once (the daemon's --jobs, the self-test's limits) would each see
    // the other's half-moved node.
    let _one = PREPARING.lock().unwrap_or_else(|p| p.into_inner());
    let sc = root.join("cgroup.subtree_control");
    let enabled: Vec<String> = fs
        .read(&sc)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .map_err(|e| {
            let fix = fix_for(fs, &Version::V2, &e, "cgroup.subtree_control");
            io_err("read", &sc, e, fix)
        })?;
    let missing: Vec<&str> = wanted
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !enabled.iter().any(|e| e == c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let value = missing
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(" ");
    // A cgroup with processes may not enable controllers for children (no
    // internal processes): the node's own processes move into a leaf first.
    // Not by trying and waiting for EBUSY: the kernel lets the threaded
    // controllers (pids, cpu) be enabled beside processes, and the cgroup
    // then becomes a thread root, under which no job (a domain) can be made
    // or hold a process (EOPNOTSUPP).
    //
    // Only our own cgroup may be emptied by us: the node's, or the one
    // above the leaf it already moved into. Processes found there then are
    // the node's own children forked before it moved (another thread's
    // run starting meanwhile): they go into the leaf too, and a write that
    // still meets one (EBUSY) moves them and tries again.
    let own = Layout::read(fs)
        .ok()
        .and_then(|l| l.v2)
        .map(|h| h.own)
        .unwrap_or_default();
    let leaf = root.join(NODE_LEAF);
    let ours = own == root || own == leaf;
    for attempt in 1..=MOVE_ATTEMPTS {
        let procs = procs_of(fs, root);
        if procs.is_empty() {
            match fs.write(&sc, &value) {
                Ok(()) => return Ok(()),
                Err(e)
                    if ours
                        && attempt < MOVE_ATTEMPTS
                        && e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) =>
                {
                    continue
                }
                Err(e) => {
                    let fix = fix_for(fs, &Version::V2, &e, "cgroup.subtree_control");
                    return Err(io_err("write", &sc, e, fix));
                }
            }
        }
        if !ours {
            return Err(JobError::Unavailable {
                reason: format!(
                    "{} holds processes, so controllers cannot be enabled for jobs under it (no internal processes)",
                    root.display()
                ),
                fix: "name an empty delegated cgroup with --cgroup-root, or start the node in that cgroup".into(),
            });
        }
        if let Err(e) = fs.mkdir(&leaf) {
            if e.kind() != io::ErrorKind::AlreadyExists {
                let fix = fix_for(fs, &Version::V2, &e, "the node's leaf cgroup");
                return Err(io_err("create", &leaf, e, fix));
            }
        }
        let lp = leaf.join("cgroup.procs");
        for pid in procs {
            if let Err(e) = fs.write(&lp, &pid.to_string()) {
                // A process that exited meanwhile is fine.
                if e.raw_os_error() != Some(rustix::io::Errno::SRCH.raw_os_error()) {
                    let fix = fix_for(fs, &Version::V2, &e, "cgroup.procs");
                    return Err(io_err("move a process into", &lp, e, fix));
                }
            }
        }
    }
    Err(JobError::Unavailable {
        reason: format!(
            "{} kept gaining processes while the node moved them into {} ({MOVE_ATTEMPTS} tries), so controllers cannot be enabled for jobs under it",
            root.display(),
            leaf.display()
        ),
        fix: "start nothing else in the node's cgroup; name an empty delegated cgroup with --cgroup-root".into(),
    })
}
