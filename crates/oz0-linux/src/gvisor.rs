//! gVisor: a run in an image's root behind a kernel of its own. `runsc`
//! (Debian's package) runs the image's rootfs as an OCI bundle, rootless
//! (`--rootless`), with no network at all (`--network=none`), its own
//! user-space kernel between the command and the host's: the runtime a
//! tenant asks for with `--oci gvisor`. Only runs in an image's root
//! ([`oz0_core::Role::Image`]) are taken.
//!
//! What each run gets: the rootfs read-only, the work folder at `/work`
//! writable, a private `/tmp` and `/dev`, the spec's variables with `HOME`
//! and `TMPDIR` at `/tmp`, no capability and no new privileges (inside
//! gVisor's own kernel), and the job's memory and process limits by the
//! node's cgroup job, which `runsc` and its sandbox join before they start
//! (`--ignore-cgroups`: runsc makes none of its own). The work folder is
//! locked for the run, and every folder above it locked shared, so that
//! the path runsc binds names the folder held (a folder reached through a
//! link is refused, and so is a run whose work folder another run holds
//! writable, or one above it), and looked at after it for what host git
//! would run or follow, as after every tier-1 run (`gitlook`). An egress allowlist
//! (gVisor has no network here) and CPU-time limits are refused, never
//! dropped. Its timeout and a cancel end the sandbox (`runsc kill`, then
//! the job's processes) and remove its state.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oz0_core::{Outcome, Role, RunError, RunOptions, IMAGE_WORK};
use oz0_policy::env::DEFAULT_PATH;
use oz0_policy::RunSpec;
use serde_json::json;

use crate::plan::TMP_INSIDE;

/// How often the run is looked at while it runs.
const TICK: Duration = Duration::from_millis(50);

/// Why gVisor cannot be used here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GvisorError {
    /// No `runsc`.
    #[error("runsc (gVisor) is not installed: apt-get install runsc")]
    Missing,
    /// `runsc --version` did not answer.
    #[error("{runsc} --version failed: {why}")]
    Version {
        /// The binary.
        runsc: PathBuf,
        /// Why.
        why: String,
    },
    /// Its state or bundle folder could not be made.
    #[error("gVisor's state folder {path}: {source}")]
    State {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// gVisor, as the node has it.
pub struct Gvisor {
    runsc: PathBuf,
    version: String,
    /// runsc's state (`--root`): the node's own, 0700.
    state: PathBuf,
    /// The runs' bundles (their OCI configuration names their variables):
    /// the node's own, 0700, each removed with its run.
    bundles: PathBuf,
    /// Where a run's job goes, when it has limits.
    jobs: Option<oz0_limits::JobMode>,
    /// What is done with what a run left that host git would run.
    git: crate::gitlook::Policy,
}

/// `runsc --version`'s version, asked once per binary: a node asks again
/// only when the file at `runsc` changed (its identity, size or time),
/// which spares every container tool call in gVisor a process start.
fn version_of(runsc: &Path) -> Result<String, GvisorError> {
    use std::os::unix::fs::MetadataExt;
    type Seen = (PathBuf, (u64, u64, u64, i64, i64), String);
    static SEEN: std::sync::Mutex<Option<Seen>> = std::sync::Mutex::new(None);
    let stamp = fs::metadata(runsc)
        .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
        .map_err(|e| GvisorError::Version {
            runsc: runsc.to_path_buf(),
            why: e.to_string(),
        })?;
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((p, s, v)) = seen.as_ref() {
        if p == runsc && *s == stamp {
            return Ok(v.clone());
        }
    }
    let runsc = runsc.to_path_buf();
    let out = Command::new(&runsc)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| GvisorError::Version {
            runsc: runsc.clone(),
            why: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version: String = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("runsc version "))
        .filter(|_| out.status.success())
        .map(|v| {
            v.chars()
                .filter(|c| c.is_ascii_graphic())
                .take(64)
                .collect()
        })
        .ok_or_else(|| GvisorError::Version {
            runsc: runsc.clone(),
            why: format!("it said {:?}", text.chars().take(120).collect::<String>()),
        })?;
    *seen = Some((runsc, stamp, version.clone()));
    Ok(version)
}

impl Gvisor {
    /// `runsc` from PATH (or `/usr/bin`), checked by its version, with its
    /// state under `data_dir`; `jobs` where limited runs' jobs go.
    pub fn find(data_dir: &Path, jobs: Option<oz0_limits::JobMode>) -> Result<Gvisor, GvisorError> {
        let runsc = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
            .map(|d| d.join("runsc"))
            .filter(|p| p.is_file())
            // Run outside any sandbox: the system's only (see
            // `systool`); PATH may name folders a run can write.
            .find(|p| crate::systool::system_owned(p).is_ok())
            .ok_or(GvisorError::Missing)?;
        let version = version_of(&runsc)?;
        let state = data_dir.join("gvisor").join("state");
        let bundles = data_dir.join("gvisor").join("runs");
        for d in [&state, &bundles] {
            fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(d)
                .map_err(|source| GvisorError::State {
                    path: d.clone(),
                    source,
                })?;
        }
        Ok(Gvisor {
            runsc,
            version,
            state,
            bundles,
            jobs,
            git: crate::gitlook::Policy::default(),
        })
    }

    /// With `policy` for what runs leave that host git would run.
    pub fn with_git(mut self, policy: crate::gitlook::Policy) -> Gvisor {
        self.git = policy;
        self
    }

    /// `runsc version …`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `runsc --root <state> <args>`, quiet, waited for.
    fn runsc(&self, args: &[&str]) {
        let _ = Command::new(&self.runsc)
            .arg("--root")
            .arg(&self.state)
            .args(args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The OCI runtime configuration of one run, told `told` with its policy
/// file at `policy` (bound read-only into its /tmp).
fn config(
    spec: &RunSpec,
    rootfs: &str,
    cwd: &str,
    (told, policy): (&oz0_policy::describe::Description, &str),
) -> serde_json::Value {
    let mut env: Vec<String> = spec
        .env_with_path(DEFAULT_PATH)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.push(format!("HOME={TMP_INSIDE}"));
    env.push(format!("TMPDIR={TMP_INSIDE}"));
    // The run is told its wall (gVisor's kernel, in the image's root), and
    // finds its policy file bound read-only in its /tmp.
    env.push(format!(
        "{}={}",
        oz0_policy::describe::SANDBOX_VAR,
        told.var(Some(crate::plan::POLICY_INSIDE))
    ));
    let none: [&str; 0] = [];
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": spec.command,
            "env": env,
            "cwd": cwd,
            "capabilities": {
                "bounding": none, "effective": none, "inheritable": none,
                "permitted": none, "ambient": none,
            },
            "noNewPrivileges": true,
        },
        "root": {"path": rootfs, "readonly": true},
        "hostname": "oz0",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "noexec", "mode=755"]},
            {"destination": TMP_INSIDE, "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", format!("size={}m", spec.limits.tmp_size_mib())]},
            {"destination": IMAGE_WORK, "type": "bind", "source": spec.work.as_str(),
             "options": ["rbind", "rw", "nosuid", "nodev"]},
            {"destination": crate::plan::POLICY_INSIDE, "type": "bind", "source": policy,
             "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]},
        ],
        "linux": {
            "namespaces": [
                {"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                {"type": "uts"}, {"type": "mount"},
            ],
        },
    })
}

/// What a gVisor run is told of its wall.
fn describe(spec: &RunSpec) -> oz0_policy::describe::Description {
    let mut d =
        oz0_policy::describe::Description::walled(1, "gvisor", spec, IMAGE_WORK, TMP_INSIDE);
    d.system = "the image's, read-only, behind gVisor's kernel";
    d
}

/// The run's bundle folder, removed when dropped.
struct Bundle(PathBuf);

impl Drop for Bundle {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

impl Gvisor {
    /// What it refuses before anything is made: why, or None.
    fn refusal(spec: &RunSpec, opts: &RunOptions) -> Option<String> {
        if !matches!(opts.role, Role::Image(_)) {
            return Some(format!(
                "gVisor runs only an image's root, not {}",
                opts.role.what()
            ));
        }
        if opts.fault.is_some() {
            return Some("gVisor takes no self-test fault".into());
        }
        if spec.egress.is_enabled() {
            return Some("a gVisor run has no network at all (runsc --network=none): an egress allowlist is refused, never dropped; run the tool in tier 1 (without --oci gvisor) for egress".into());
        }
        if !spec.read.is_empty() || !spec.write.is_empty() {
            return Some(
                "a run in an image's root has its work folder at /work and no other host folder"
                    .into(),
            );
        }
        if spec.limits.cpu_seconds.is_some() {
            return Some(
                "a gVisor run takes no CPU-time limit in this build: refused, never dropped".into(),
            );
        }
        None
    }
}

impl oz0_core::Sandbox for Gvisor {
    fn tier(&self) -> u8 {
        1
    }

    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        if let Some(why) = Gvisor::refusal(spec, &opts) {
            return Err(why.into());
        }
        // runsc binds the work folder by its path, where tier 1 binds it
        // by a descriptor: it and every folder above it are held until the
        // run ends, so no run can rename any of them meanwhile, and a link
        // on the way is refused. The look after the run walks what is held.
        let held = crate::folder_lock::lock_with_ancestors(spec.work.as_path())
            .map_err(|e| format!("--work {e}"))?;
        let RunOptions {
            io, cancel, role, ..
        } = opts;
        let Role::Image(image) = role else {
            unreachable!("refused above")
        };
        let started = Instant::now();
        let run_id = crate::record::new_run_id();
        let job = match (spec.limits.needs_job(), &self.jobs) {
            (false, _) => None,
            (true, None) => return Err("the run has job limits and this node has no cgroup jobs for gVisor runs (oz0-node setup cgroups)".into()),
            (true, Some(mode)) => {
                let id = oz0_limits::RunId::new(&run_id)?;
                Some(oz0_limits::Job::create(mode, &id, &spec.limits)?)
            }
        };
        let dir = self.bundles.join(format!("oz0-{run_id}"));
        fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let bundle = Bundle(dir);
        let made = crate::gitlook::ctime(&rustix::fs::stat(&bundle.0)?);
        let since = crate::record::later_stamp(&bundle.0, made);
        let cwd = image.cwd.as_deref().unwrap_or(IMAGE_WORK);
        // The policy file, bound read-only into the run (the bundle is
        // the node's own, 0700, and goes with the run).
        let told = describe(spec);
        let policy = bundle.0.join("policy.json");
        fs::write(&policy, told.policy())?;
        fs::set_permissions(&policy, std::os::unix::fs::PermissionsExt::from_mode(0o444))?;
        let policy = policy.to_str().ok_or("the bundle's path is not UTF-8")?;
        let cfg = config(spec, &image.rootfs, cwd, (&told, policy));
        fs::write(bundle.0.join("config.json"), serde_json::to_vec(&cfg)?)?;
        let id = format!("oz0-{run_id}");
        let mut cmd = Command::new(&self.runsc);
        cmd.args(["--rootless", "--network=none", "--ignore-cgroups", "--root"])
            .arg(&self.state)
            .args(["run", "--bundle"])
            .arg(&bundle.0)
            .arg(&id)
            .env_clear()
            .stdin(crate::plain::stdio(io.stdin))
            .stdout(crate::plain::stdio(io.stdout))
            .stderr(crate::plain::stdio(io.stderr));
        let mut setup = oz0_sys::spawn::ChildSetup::new();
        if let Some(j) = &job {
            for f in j.procs_files()? {
                setup.join_cgroup(f);
            }
        }
        setup.install(&mut cmd);
        let mut child = cmd.spawn()?;
        let deadline = spec
            .limits
            .timeout_seconds
            .map(|t| started + Duration::from_secs(t));
        let end = |this: &Gvisor| {
            this.runsc(&["kill", "--all", &id, "KILL"]);
            this.runsc(&["delete", "--force", &id]);
            if let Some(j) = &job {
                let _ = j.kill();
            }
        };
        let (ended, code) =
            crate::plain::supervise(&mut child, deadline, cancel.as_ref(), TICK, || end(self))?;
        // Whatever is left of the sandbox goes with the run.
        self.runsc(&["delete", "--force", &id]);
        if let Some(j) = &job {
            let _ = j.kill();
        }
        let folders = held.folders();
        let roots: Vec<crate::gitlook::Root<'_>> = folders
            .iter()
            .map(|(path, fd)| crate::gitlook::Root { path, fd })
            .collect();
        let git = crate::gitlook::look(&roots, since, self.git, &run_id, &Default::default());
        drop(held);
        let enforced = json!({
            "mechanism": "gvisor",
            "runsc": self.version,
            "network": "none",
            "job": job.as_ref().map(|j| j.version_name()),
        });
        if let Some(j) = job {
            let _ = j.kill();
            let _ = j.remove();
        }
        let mut report = serde_json::Map::new();
        let exit_code = crate::outcome::git_report(Some(&git), code, &mut report);
        report.insert("enforced".into(), enforced);
        Ok(Outcome {
            run_id,
            ended,
            exit_code,
            duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
            limit_hit: None,
            warnings: git.warnings(),
            report,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in runsc that counts its starts in `count`.
    fn fake(dir: &Path, version: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("runsc");
        fs::write(
            &p,
            format!(
                "#!/bin/sh\necho x >> {}/count\necho 'runsc version {version}'\n",
                dir.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn the_version_is_asked_once_per_binary() {
        let dir = std::env::temp_dir().join(format!("oz0-gvisor-version-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let starts = || {
            fs::read_to_string(dir.join("count"))
                .unwrap_or_default()
                .lines()
                .count()
        };
        let runsc = fake(&dir, "release-1");
        assert_eq!(version_of(&runsc).unwrap(), "release-1");
        assert_eq!(version_of(&runsc).unwrap(), "release-1");
        assert_eq!(starts(), 1, "asked again for the same binary");
        // A new binary in its place is asked.
        fs::remove_file(&runsc).unwrap();
        let runsc = fake(&dir, "release-22");
        assert_eq!(version_of(&runsc).unwrap(), "release-22");
        assert_eq!(starts(), 2);
        fs::remove_dir_all(&dir).unwrap();
    }
}
