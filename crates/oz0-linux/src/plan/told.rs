//! What a run is told of its wall: `OZ0_SANDBOX` in its environment and
//! the policy file the stage writes (see [`oz0_policy::describe`]), and the
//! node user's secrets under its home made to answer as refused.

use oz0_policy::describe::{Description, HOME_SECRETS, SANDBOX_VAR};
use oz0_policy::env::DEFAULT_PATH;
use oz0_policy::{AbsPath, RunSpec};

use super::{Extras, Fault, Mount, PlanError, TMP_INSIDE, VM_SECRET_PREFIX};
use crate::host::HostFacts;

/// Where the stage writes the run's policy file (see
/// [`oz0_policy::describe`]).
pub const POLICY_INSIDE: &str = "/tmp/.oz0-sandbox.json";

/// The paths of [`HOME_SECRETS`] under the node user's home that the run's
/// root may hold as refused folders: none in an image's root (the host's
/// home means nothing there), and none that a mount covers, holds or lies
/// under (a folder made there would be made in what is bound).
pub(super) fn refused_home(host: &HostFacts, extras: &Extras, mounts: &[Mount]) -> Vec<AbsPath> {
    let Some(home) = host.home.as_ref().filter(|h| h.depth() > 0) else {
        return Vec::new();
    };
    if extras.image.is_some() {
        return Vec::new();
    }
    HOME_SECRETS
        .iter()
        .filter_map(|name| home.join(name).ok())
        .filter(|p| {
            !mounts.iter().any(|m| {
                let d = m.dest();
                p.starts_with(d) || d.starts_with(p)
            })
        })
        .collect()
}

/// The run's description: tier 1, bubblewrap (in an image's root or the
/// host's system), what it may read, write and reach, and what answers
/// refused.
pub(super) fn describe(
    spec: &RunSpec,
    extras: &Extras,
    work_inside: &AbsPath,
    refused: &[AbsPath],
) -> Description {
    let image = extras.image.is_some();
    let mut d = Description::walled(
        1,
        if image {
            "bubblewrap-image"
        } else {
            "bubblewrap"
        },
        spec,
        work_inside.as_str(),
        TMP_INSIDE,
    );
    if image {
        d.system = "the image's, read-only";
    }
    d.refused = refused.iter().map(ToString::to_string).collect();
    d
}

/// Exactly the command's environment: the caller's with `PATH`, `HOME`,
/// `TMPDIR` and [`SANDBOX_VAR`] (what it runs behind), then a fault's
/// leak, then a VM monitor's secrets (each checked).
pub(super) fn environment(
    spec: &RunSpec,
    extras: &Extras,
    described: &Description,
) -> Result<Vec<(String, String)>, PlanError> {
    let mut env = spec.env_with_path(DEFAULT_PATH);
    env.push(("HOME".into(), TMP_INSIDE.into()));
    env.push(("TMPDIR".into(), TMP_INSIDE.into()));
    env.push((SANDBOX_VAR.into(), described.var(Some(POLICY_INSIDE))));
    if let Some(Fault::LeakEnv(n, v)) = &extras.fault {
        env.push((n.clone(), v.clone()));
    }
    for (n, v) in &extras.vm_secrets {
        let rest = n.strip_prefix(VM_SECRET_PREFIX).unwrap_or("");
        let ok = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok || env.iter().any(|(e, _)| e == n) {
            return Err(PlanError::BadVmSecret(n.clone()));
        }
        env.push((n.clone(), v.clone()));
    }
    Ok(env)
}
