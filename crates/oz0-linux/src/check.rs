//! `sandbox check`: what this machine has, the tier it allows, the fix.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::bwrap::{self, BwrapInfo};
use crate::userns::{self, Block};
use oz0_policy::facts::FixKind;
use serde::Serialize;

/// What user namespaces did when bubblewrap tried one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Userns {
    /// bubblewrap created one (and refused a nested one).
    pub ok: bool,
    /// bubblewrap's message when it failed.
    pub error: Option<String>,
    /// The switches found that block them.
    pub blocks: Vec<Block>,
}

/// What `/dev/kvm` is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kvm {
    /// Missing.
    Missing,
    /// Present; this user can open it.
    Usable,
    /// Present; this user cannot open it.
    NoAccess,
}

/// Everything the probes found.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m`.
    pub arch: String,
    /// bubblewrap, or why not.
    pub bwrap: Result<BwrapInfo, String>,
    /// User namespaces (only tried when bubblewrap is usable).
    pub userns: Option<Userns>,
    /// seccomp filters.
    pub seccomp: bool,
    /// Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// Job limits.
    pub jobs: oz0_limits::ProbeFacts,
    /// The job mode itself (for runs).
    #[serde(skip)]
    pub job_mode: oz0_limits::JobMode,
    /// `/dev/kvm`.
    pub kvm: Kvm,
}

impl Serialize for BwrapSer<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Ok(i) => i.serialize(s),
            Err(e) => s.serialize_str(e),
        }
    }
}
struct BwrapSer<'a>(&'a Result<BwrapInfo, String>);

/// Runs every probe. Changes nothing, needs no privilege.
pub fn probe(bwrap_flag: Option<&Path>, cgroup_root: Option<PathBuf>) -> Probe {
    let uts = rustix::system::uname();
    let kernel = uts.release().to_string_lossy().into_owned();
    let arch = uts.machine().to_string_lossy().into_owned();
    let path_var = std::env::var("PATH").ok();
    let bwrap = bwrap::find(bwrap_flag, path_var.as_deref())
        .and_then(|p| bwrap::inspect(&p))
        .and_then(|i| i.check().map(|_| i))
        .map_err(|e| e.to_string());
    let userns = bwrap.as_ref().ok().map(|b| try_userns(&b.path));
    // Asked of the kernel with the call the filter is installed with, so a
    // kernel without filters and a profile that refuses seccomp(2) to the
    // node both read "no" here, not as a launch failure later.
    let seccomp = oz0_sys::kernel::seccomp_filters().is_ok();
    let landlock_abi = oz0_sys::kernel::landlock_abi();
    let jobs = oz0_limits::probe_mode(&oz0_limits::ProbeOptions {
        cgroup_root,
        version: None,
    });
    let kvm = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => Kvm::Usable,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Kvm::Missing,
        Err(_) => Kvm::NoAccess,
    };
    Probe {
        kernel,
        arch,
        bwrap,
        userns,
        seccomp,
        landlock_abi,
        jobs: jobs.facts,
        job_mode: jobs.mode,
        kvm,
    }
}

/// Asks bubblewrap for a user namespace, the way every run does (nested
/// ones are then forbidden by the run's stage, which the launch check
/// exercises).
fn try_userns(bwrap: &Path) -> Userns {
    let out = Command::new(bwrap)
        .env_clear()
        .args([
            "--unshare-user",
            "--unshare-net",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--",
            "/bin/true",
        ])
        .stdin(Stdio::null())
        .output();
    let read = |p: &str| std::fs::read_to_string(p).ok();
    match out {
        Ok(o) if o.status.success() => Userns {
            ok: true,
            error: None,
            blocks: vec![],
        },
        Ok(o) => Userns {
            ok: false,
            error: Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
            blocks: userns::blocks(&read),
        },
        Err(e) => Userns {
            ok: false,
            error: Some(e.to_string()),
            blocks: userns::blocks(&read),
        },
    }
}

/// What `sandbox check` prints and reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The tier this machine can have (1 only when every required mechanism is there).
    pub tier: u8,
    /// `Sandbox: tier N: …`.
    pub headline: String,
    /// The platform facts line.
    pub facts_line: String,
    /// The kind of fix, when something is missing.
    pub fix_kind: Option<FixKind>,
    /// `Fix: …`, when something is missing.
    pub fix: Option<String>,
}

/// The fix for what blocks user namespaces.
fn userns_fix(u: &Userns) -> (FixKind, String) {
    match u.blocks.first() {
        Some(Block::AppArmor) => (FixKind::UsernsAppArmor, format!("AppArmor blocks unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): {}", Block::AppArmor.fix())),
        Some(Block::MaxZero) => (FixKind::UsernsMaxZero, format!("user namespaces are disabled (user.max_user_namespaces=0): {}", Block::MaxZero.fix())),
        Some(Block::DebianClone) => (FixKind::UsernsDebianClone, format!("unprivileged user namespaces are off (kernel.unprivileged_userns_clone=0): {}", Block::DebianClone.fix())),
        // The namespace was made; / is the initramfs, which pivot_root
        // cannot leave.
        None if u.error.as_deref().is_some_and(|e| e.contains("pivot_root: Invalid argument")) => (FixKind::UsernsOther, format!(
            "bubblewrap could not start a sandbox ({}): / is the initramfs (rootfs), which a sandbox cannot pivot away from: run the node on a system booted into a mounted root file system (from an initramfs, switch_root into a tmpfs first)",
            u.error.clone().unwrap_or_default()
        )),
        None => (FixKind::UsernsOther, format!(
            "bubblewrap could not create a user namespace ({}); if this node runs in a container, its seccomp profile or missing CAP_SYS_ADMIN on the host may block them: run the node on the host or allow unshare(CLONE_NEWUSER) for it",
            u.error.clone().unwrap_or_default()
        )),
    }
}

/// Decides the tier and words the lines. Pure.
pub fn report(p: &Probe) -> Report {
    let kvm = match p.kvm {
        Kvm::Missing => "absent",
        Kvm::Usable => "usable",
        Kvm::NoAccess => "present, not accessible to this user",
    };
    let bw = match &p.bwrap {
        Ok(b) => format!("{} at {}", b.version, b.path.display()),
        Err(_) => "bubblewrap: missing".to_string(),
    };
    let userns = match &p.userns {
        Some(u) if u.ok => "yes",
        Some(_) => "blocked",
        None => "not tried",
    };
    let jobs = if p.jobs.controllers.is_empty() {
        p.jobs.mode.to_string()
    } else {
        format!("{} ({})", p.jobs.mode, p.jobs.controllers.join(", "))
    };
    let facts_line = format!(
        "Linux {} {}: {bw}, user namespaces: {userns}, seccomp: {}, Landlock: {}, job limits: {jobs}, /dev/kvm: {kvm}",
        p.kernel,
        p.arch,
        if p.seccomp { "yes" } else { "no" },
        if p.landlock_abi > 0 { format!("ABI {}", p.landlock_abi) } else { "none (best effort: not enforced)".into() },
    );
    let missing: Option<(FixKind, String, String)> = match (&p.bwrap, &p.userns) {
        (Err(e), _) => Some((
            FixKind::InstallBubblewrap,
            "bubblewrap is missing or unusable".into(),
            e.clone(),
        )),
        (Ok(_), Some(u)) if !u.ok => {
            let (k, f) = userns_fix(u);
            Some((k, "user namespaces are blocked".into(), f))
        }
        _ if !p.seccomp => Some((
            FixKind::NoSeccomp,
            "the kernel refuses this process a seccomp filter".into(),
            "use a kernel built with CONFIG_SECCOMP_FILTER=y (every major distribution's is); in a container, allow seccomp(2) in its seccomp profile, or run the node on the host"
                .into(),
        )),
        _ => match &p.jobs.fix {
            Some(f) if p.jobs.mode == "unavailable" => Some((
                FixKind::DelegateCgroups,
                "no cgroup this user can drive, so job limits cannot be enforced".into(),
                f.clone(),
            )),
            _ => None,
        },
    };
    match missing {
        Some((kind, why, fix)) => Report {
            tier: 0,
            headline: format!("Sandbox: tier 0: {why}; runs get no sandbox here"),
            facts_line,
            fix_kind: Some(kind),
            fix: Some(format!("Fix: {fix}")),
        },
        None => Report {
            tier: 1,
            headline: format!(
                "Sandbox: tier 1: bubblewrap namespaces + seccomp + {} + {} job limits (probed; `sandbox check --self-test` proves it)",
                if p.landlock_abi > 0 { format!("Landlock ABI {}", p.landlock_abi) } else { "no Landlock".into() },
                p.jobs.mode
            ),
            facts_line,
            fix_kind: None,
            fix: None,
        },
    }
}

/// For `--json`: the probe as serialisable data.
pub fn probe_json(p: &Probe) -> serde_json::Value {
    serde_json::json!({
        "kernel": p.kernel,
        "arch": p.arch,
        "bwrap": serde_json::to_value(BwrapSer(&p.bwrap)).unwrap_or_default(),
        "userns": p.userns,
        "seccomp": p.seccomp,
        "landlock_abi": p.landlock_abi,
        "jobs": p.jobs,
        "kvm": p.kvm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Probe {
        Probe {
            kernel: "6.18.0".into(),
            arch: "x86_64".into(),
            bwrap: Ok(BwrapInfo {
                path: "/usr/bin/bwrap".into(),
                version: "bubblewrap 0.8.0".into(),
                setuid: false,
                features: bwrap::REQUIRED_FEATURES.to_vec(),
            }),
            userns: Some(Userns {
                ok: true,
                error: None,
                blocks: vec![],
            }),
            seccomp: true,
            landlock_abi: 7,
            jobs: oz0_limits::ProbeFacts {
                mode: "cgroup-v1",
                why: String::new(),
                controllers: vec!["memory".into(), "pids".into()],
                roots: vec![],
                v2: String::new(),
                v1: String::new(),
                kill: "",
                cpu_time: "",
                fix: None,
            },
            job_mode: oz0_limits::JobMode::Unavailable {
                reason: String::new(),
                fix: String::new(),
            },
            kvm: Kvm::Usable,
        }
    }

    #[test]
    fn table_of_outcomes() {
        type Edit = fn(&mut Probe);
        let cases: &[(&str, Edit, u8, Option<FixKind>, &str)] = &[
            ("all there", |_| {}, 1, None, "tier 1"),
            (
                "no bwrap",
                |p| {
                    p.bwrap =
                        Err("bubblewrap (bwrap) was not found: apt-get install bubblewrap".into())
                },
                0,
                Some(FixKind::InstallBubblewrap),
                "apt-get install bubblewrap",
            ),
            (
                "apparmor",
                |p| {
                    p.userns = Some(Userns {
                        ok: false,
                        error: Some("bwrap: setting up uid map: Permission denied".into()),
                        blocks: vec![Block::AppArmor],
                    })
                },
                0,
                Some(FixKind::UsernsAppArmor),
                "kernel.apparmor_restrict_unprivileged_userns=0",
            ),
            (
                "max zero",
                |p| {
                    p.userns = Some(Userns {
                        ok: false,
                        error: None,
                        blocks: vec![Block::MaxZero],
                    })
                },
                0,
                Some(FixKind::UsernsMaxZero),
                "user.max_user_namespaces=15000",
            ),
            (
                "debian clone",
                |p| {
                    p.userns = Some(Userns {
                        ok: false,
                        error: None,
                        blocks: vec![Block::DebianClone],
                    })
                },
                0,
                Some(FixKind::UsernsDebianClone),
                "kernel.unprivileged_userns_clone=1",
            ),
            (
                "container",
                |p| {
                    p.userns = Some(Userns {
                        ok: false,
                        error: Some("bwrap: No permissions to create new namespace".into()),
                        blocks: vec![],
                    })
                },
                0,
                Some(FixKind::UsernsOther),
                "container",
            ),
            (
                "no seccomp",
                |p| p.seccomp = false,
                0,
                Some(FixKind::NoSeccomp),
                "CONFIG_SECCOMP_FILTER",
            ),
            (
                "no cgroups",
                |p| {
                    p.jobs.mode = "unavailable";
                    p.jobs.controllers.clear();
                    p.jobs.fix = Some("run `oz0-node setup cgroups --user u` once as root".into());
                },
                0,
                Some(FixKind::DelegateCgroups),
                "setup cgroups",
            ),
            (
                "no landlock is still tier 1",
                |p| p.landlock_abi = 0,
                1,
                None,
                "no Landlock",
            ),
        ];
        for (name, edit, tier, kind, needle) in cases {
            let mut p = good();
            edit(&mut p);
            let r = report(&p);
            assert_eq!(r.tier, *tier, "{name}: {r:?}");
            assert_eq!(r.fix_kind, *kind, "{name}");
            let all = format!(
                "{} {} {}",
                r.headline,
                r.facts_line,
                r.fix.clone().unwrap_or_default()
            );
            assert!(all.contains(needle), "{name}: {all}");
            assert!(
                r.headline.starts_with(&format!("Sandbox: tier {tier}: ")),
                "{name}"
            );
        }
    }
}
