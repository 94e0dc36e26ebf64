//! What Linux adds to the one self-test (`oz0_core::selftest`): the proof
//! of each layer of its wall alone, after the shared check of the property
//! it serves held.
//!
//! - `launch`: the seccomp filter alone refuses system calls this kernel
//!   allows without it.
//! - `files`: a write to the system (`/etc`) is refused; the run's Landlock
//!   is what this kernel offers; with Landlock off the mounts alone still
//!   hide the data directories; with the stand-in mounted writable where no
//!   Landlock rule reaches, Landlock alone refuses listing, reading and
//!   writing it.
//! - `job_limits`: which cgroup mode held the limits.
//!
//! A layer can be taken away from every run of the self-test
//! ([`Layer`]: its tests show the self-test names the layer that fails).

use std::path::Path;

use oz0_core::selftest::{read_report, Extra, Failed, Session};
use oz0_core::Fault;
use oz0_policy::facts::Property;

/// A layer of the wall that the self-test's tests can take away from every
/// run of the self-test, to show that the self-test sees that layer go even
/// while the others hold (and names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The mounts: the stand-in data directory is mounted into the runs.
    Mounts,
    /// Landlock is not applied.
    Landlock,
    /// No seccomp filter.
    Seccomp,
}

impl Layer {
    /// Every layer.
    pub const ALL: [Layer; 3] = [Layer::Mounts, Layer::Landlock, Layer::Seccomp];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Mounts => "mounts",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
        }
    }

    /// The layer named `s`.
    pub fn parse(s: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The fault that takes this layer away, `standin` being the
    /// self-test's stand-in data directory.
    pub fn fault(self, standin: &Path) -> Fault {
        match self {
            Layer::Mounts => Fault::Expose(standin.display().to_string()),
            Layer::Landlock => Fault::NoLandlock,
            Layer::Seccomp => Fault::NoSeccomp,
        }
    }
}

/// Linux's proofs: see the module's documentation.
pub struct LinuxProofs {
    /// The job mode the limits went through (`cgroup_v2`, `cgroup_v1`).
    pub job_mode: Option<&'static str>,
}

impl Extra for LinuxProofs {
    fn prove(&self, p: Property, s: &mut Session<'_>) -> Result<Option<String>, Failed> {
        Ok(match p {
            Property::Launch => Some(seccomp_alone(s)?),
            Property::Files => Some(files_layers(s)?),
            Property::JobLimits => self.job_mode.map(|m| format!("enforced by {m}")),
            _ => None,
        })
    }
}

/// The node binary inside every run.
const PROBE: &str = "/oz0/oz0-node";

fn probe_cmd(out: &Path, args: &[&str]) -> Vec<String> {
    oz0_core::selftest::parts::probe_cmd(PROBE, out, args)
}

/// The seccomp layer on its own: the probe tries the system calls the
/// filter refuses, once in a run with the filter and once in the same run
/// without it. A call refused with the filter that this kernel allows
/// without it is refused by the filter alone; at least two such calls
/// prove the layer, whatever the namespaces and capabilities refuse too.
fn seccomp_alone(s: &mut Session<'_>) -> Result<String, Failed> {
    let work = s.dir("seccomp")?;
    let (with, without) = (work.join("with.json"), work.join("without.json"));
    let probe = |out: &Path| -> Vec<String> {
        let mut v = probe_cmd(out, &[]);
        v.retain(|a| a != "--no-syscalls");
        v
    };
    s.launch(s.request(&work, probe(&with)), None)?;
    s.launch_with(
        s.request(&work, probe(&without)),
        None,
        Some(Fault::NoSeccomp),
    )?;
    let (a, b) = (read_report(&with)?, read_report(&without)?);
    if a["seccomp"] != "2" {
        return Err(format!(
            "seccomp layer: no filter is in place in the run (Seccomp: {} in /proc/self/status)",
            a["seccomp"]
        )
        .into());
    }
    let calls = a["syscalls"]
        .as_object()
        .ok_or("the probe reported no system calls")?;
    let mut proven: Vec<&str> = calls
        .iter()
        .filter(|(k, v)| {
            v.as_str().is_some_and(|e| e.starts_with('E')) && b["syscalls"][k.as_str()] == "ok"
        })
        .map(|(k, _)| k.as_str())
        .collect();
    proven.sort_unstable();
    if proven.len() < 2 {
        return Err(format!(
            "seccomp layer: the filter refused {} call(s) this kernel allows here without it ({}); it refuses at least two on a machine it works on",
            proven.len(),
            proven.join(", ")
        ).into());
    }
    Ok(format!(
        "seccomp alone refuses {}, which this kernel allows without the filter",
        proven.join(", ")
    ))
}

/// The files check's layers: the system not writable and the run's
/// Landlock what this kernel has; then the mounts alone, then Landlock
/// alone.
fn files_layers(s: &mut Session<'_>) -> Result<String, Failed> {
    let work = s.dir("files-layers")?;
    let outside = s.dir("files-outside")?;
    let f = oz0_core::selftest::parts::Files::new(
        &outside.join("written"),
        s.standin(),
        s.config().data_dir.as_deref(),
    );
    let mut args = vec!["--write".to_string(), "/etc/oz0-selftest".to_string()];
    args.extend(f.probe_args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = work.join("r.json");
    let o = s.launch(s.request(&work, probe_cmd(&out, &args)), None)?;
    let r = read_report(&out)?;
    let abi = oz0_sys::kernel::landlock_abi();
    let enforced = o
        .report
        .get("enforced")
        .and_then(|e| e["landlock"]["enforced"].as_str());
    match enforced {
        _ if abi == 0 => {}
        Some("full" | "partial") => {}
        other => {
            return Err(format!(
                "landlock layer: the run's Landlock is {} though this kernel has ABI {abi}",
                other.unwrap_or("missing")
            )
            .into())
        }
    }
    if r["write"]["/etc/oz0-selftest"] == "ok" {
        return Err("a write to /etc succeeded".into());
    }
    f.judge(&r, "mount layer: ")?;
    // The mount layer on its own: the same, in a run without Landlock.
    let out = work.join("mounts-alone.json");
    s.launch_with(
        s.request(&work, probe_cmd(&out, &args)),
        None,
        Some(Fault::NoLandlock),
    )?;
    let r = read_report(&out)?;
    let seen: Vec<&str> = std::iter::once(("write", "/etc/oz0-selftest"))
        .chain(f.targets())
        .filter(|(section, key)| r[*section][*key] == "ok")
        .map(|(_, key)| key)
        .collect();
    if !seen.is_empty() || Path::new(&f.outside_file).exists() {
        return Err(format!(
            "mount layer: without Landlock, the run reached {}: the mounts alone do not hide what they must",
            seen.join(", ")
        ).into());
    }
    let landlock = landlock_alone(s)?;
    Ok(format!(
        "a write to /etc refused; each layer alone: with Landlock off the mounts still hide all of it; {landlock}"
    ))
}

/// The Landlock layer on its own: the stand-in data directory is bound
/// into a run, writable, at a path no Landlock rule covers (the mount
/// layer deliberately opened); Landlock alone must refuse listing it,
/// reading its key and writing in it.
fn landlock_alone(s: &mut Session<'_>) -> Result<String, Failed> {
    let abi = oz0_sys::kernel::landlock_abi();
    if abi == 0 {
        return Ok("Landlock: not on this kernel, so the mount layer alone holds the files (no second layer)".into());
    }
    let work = s.dir("landlock")?;
    let out = work.join("r.json");
    let inside = "/oz0/exposed";
    let key = format!("{inside}/identity/node.key");
    let planted = format!("{inside}/planted");
    let req = s.request(
        &work,
        probe_cmd(
            &out,
            &["--list", inside, "--read", &key, "--write", &planted],
        ),
    );
    let fault = Fault::ExposeAt {
        src: s.standin().display().to_string(),
        dest: inside.to_string(),
    };
    s.launch_with(req, None, Some(fault))?;
    let r = read_report(&out)?;
    let reached: Vec<&str> = [
        ("list", inside),
        ("read", key.as_str()),
        ("write", planted.as_str()),
    ]
    .into_iter()
    .filter(|(section, k)| r[*section][*k] != "EACCES")
    .map(|(_, k)| k)
    .collect();
    if !reached.is_empty() || s.standin().join("planted").exists() {
        return Err(format!(
            "landlock layer: with the stand-in data directory mounted in the run, Landlock did not refuse {} (ABI {abi}): it does not hold on its own",
            reached.join(", ")
        ).into());
    }
    Ok(format!(
        "with it mounted writable, Landlock (ABI {abi}) alone refuses listing, reading and writing it"
    ))
}
