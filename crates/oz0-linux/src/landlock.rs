//! Landlock, the second and independent layer under bubblewrap's mounts.
//!
//! Applied by the stage inside the sandbox, with paths as the run sees them:
//! read-and-execute on the system, the node binary and `--read` paths; full
//! access on the work directory, `--write` paths, TEMP, `/dev` and `/proc`.
//! On kernels with ABI 6 it also scopes abstract unix sockets and signals to
//! the run. It is best effort by design (a kernel without it still has the
//! mount layer, which the self-test proves on its own): the stage reports
//! exactly what the kernel enforced, and the run's status carries it.

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use serde::{Deserialize, Serialize};

use crate::plan::LandlockRules;

/// The newest ABI this build knows how to use.
const TARGET_ABI: ABI = ABI::V6;

/// What Landlock enforced for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockReport {
    /// The kernel's Landlock ABI (0: none).
    pub kernel_abi: u32,
    /// `full`, `partial` or `none`.
    pub enforced: String,
}

/// Why Landlock could not be applied at all (distinct from "not supported",
/// which is reported, not an error).
#[derive(Debug, thiserror::Error)]
#[error("Landlock: {0}")]
pub struct LandlockError(String);

/// Restricts the calling process (and what it executes) to `rules`.
pub fn restrict(rules: &LandlockRules) -> Result<LandlockReport, LandlockError> {
    let kernel_abi = oz0_sys::kernel::landlock_abi();
    let e = |x: &dyn std::fmt::Display| LandlockError(x.to_string());
    let read = AccessFs::from_read(TARGET_ABI);
    let all = AccessFs::from_all(TARGET_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|x| e(&x))?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(|x| e(&x))?
        .create()
        .map_err(|x| e(&x))?;
    for (paths, access) in [(&rules.read, read), (&rules.write, all)] {
        for p in paths {
            // A path missing inside (e.g. /lib32 on a host without it) grants nothing.
            let Ok(fd) = PathFd::new(p) else { continue };
            // Files take only the access rights that apply to files; asking
            // for more would be reported as partial enforcement.
            let is_dir = std::fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false);
            let access = if is_dir {
                access
            } else {
                access & AccessFs::from_file(TARGET_ABI)
            };
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|x| e(&x))?;
        }
    }
    let status: RestrictionStatus = ruleset.restrict_self().map_err(|x| e(&x))?;
    let enforced = match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "none",
    };
    Ok(LandlockReport {
        kernel_abi,
        enforced: enforced.to_string(),
    })
}
