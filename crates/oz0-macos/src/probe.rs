//! The Mac's probes: each asks the system and records what it answered.
//!
//! Every program is started with a clean environment (a fixed PATH, the
//! user's HOME for `container`), its stdin closed. Plain std code: it
//! builds everywhere, asks real questions only on a Mac (elsewhere
//! `sandbox-exec` is missing and every answer is "none"); what it makes of
//! the answers ([`version3`], `crate::check`) is tested on Linux.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::check::{MacProbe, SeatbeltAnswer};
use crate::container::{Arch, MacFacts};
use crate::seatbelt::SANDBOX_EXEC;

/// Where programs are looked up (Apple's container installs to /usr/local/bin).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";

/// The probe profile: everything allowed but reading the one file named by
/// the `OZ0_PROBE` parameter (a path is never pasted into profile text).
const PROFILE: &str = r#"(version 1)
(allow default)
(deny file-read-data (literal (param "OZ0_PROBE")))"#;

fn run(program: &str, args: &[&str]) -> Option<Output> {
    let mut c = Command::new(program);
    c.args(args)
        .env_clear()
        .env("PATH", PATH)
        .stdin(Stdio::null());
    if let Some(h) = std::env::var_os("HOME") {
        c.env("HOME", h);
    }
    c.output().ok()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).trim().to_string()
}

/// A file only this probe reads, removed on drop.
struct ProbeFile(std::path::PathBuf);

impl Drop for ProbeFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether a profile run through `sandbox-exec` refuses the read it names.
pub fn seatbelt() -> SeatbeltAnswer {
    if !Path::new(SANDBOX_EXEC).exists() {
        return SeatbeltAnswer::Missing;
    }
    let path = std::env::temp_dir().join(format!(
        "oz0-seatbelt-probe-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    // A new file (never one someone else made there), removed after.
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| f.write_all(b"oz0-probe\n"));
    if let Err(e) = made {
        return SeatbeltAnswer::Failed {
            detail: format!("cannot make the probe's file {}: {e}", path.display()),
        };
    }
    let file = ProbeFile(path);
    let Some(p) = file.0.to_str() else {
        return SeatbeltAnswer::Failed {
            detail: "the temporary folder's path is not Unicode".into(),
        };
    };
    // The control: the same read without the profile works.
    match run("/bin/cat", &[p]) {
        Some(o) if o.status.success() && text(&o.stdout) == "oz0-probe" => {}
        other => {
            return SeatbeltAnswer::Failed {
                detail: format!(
                    "the control read of {p} failed: {}",
                    other.map_or_else(|| "cannot run /bin/cat".into(), |o| text(&o.stderr))
                ),
            }
        }
    }
    let param = format!("OZ0_PROBE={p}");
    let Some(o) = run(SANDBOX_EXEC, &["-D", &param, "-p", PROFILE, "/bin/cat", p]) else {
        return SeatbeltAnswer::Failed {
            detail: format!("cannot run {SANDBOX_EXEC}"),
        };
    };
    let err = text(&o.stderr);
    if o.status.success() && text(&o.stdout) == "oz0-probe" {
        SeatbeltAnswer::DidNotDeny
    } else if err.starts_with("cat:") && err.contains("Operation not permitted") {
        // cat ran inside the profile and its read was refused.
        SeatbeltAnswer::Denies
    } else {
        SeatbeltAnswer::Failed {
            detail: format!("{}: {err}", o.status),
        }
    }
}

/// The processor of the machine (not of this binary: an Intel binary
/// under Rosetta runs on Apple silicon).
fn arch() -> Arch {
    match run("/usr/sbin/sysctl", &["-n", "hw.optional.arm64"]) {
        Some(o) if text(&o.stdout) == "1" => Arch::Arm64,
        _ => Arch::X86_64,
    }
}

/// The first `X.Y.Z` in `s`.
pub fn version3(s: &str) -> Option<(u32, u32, u32)> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find_map(|w| {
            let mut it = w.split('.').map(|n| n.parse::<u32>().ok());
            match (it.next(), it.next(), it.next()) {
                (Some(Some(a)), Some(Some(b)), Some(Some(c))) => Some((a, b, c)),
                _ => None,
            }
        })
}

/// Runs every probe.
pub fn probe() -> MacProbe {
    let sw = |flag| {
        run("/usr/bin/sw_vers", &[flag])
            .filter(|o| o.status.success())
            .map(|o| text(&o.stdout))
            .filter(|s| !s.is_empty())
    };
    let macos_version = sw("-productVersion");
    let container_version = run("container", &["--version"])
        .filter(|o| o.status.success())
        .and_then(|o| version3(&text(&o.stdout)));
    let services_answer = container_version.is_some()
        && run("container", &["system", "status"]).is_some_and(|o| o.status.success());
    MacProbe {
        seatbelt: seatbelt(),
        macos_build: sw("-buildVersion"),
        mac: MacFacts {
            arch: arch(),
            macos_major: macos_version
                .as_deref()
                .and_then(|v| v.split('.').next())
                .and_then(|m| m.parse().ok()),
            container_version,
            services_answer,
        },
        macos_version,
    }
}

#[cfg(test)]
mod tests {
    use super::version3;

    #[test]
    fn the_first_three_part_version_is_read() {
        assert_eq!(
            version3("container CLI version 1.5.0 (build: release)"),
            Some((1, 5, 0))
        );
        assert_eq!(version3("0.9 then 10.2.3-beta"), Some((10, 2, 3)));
        assert_eq!(version3("1.5"), None);
        assert_eq!(version3(""), None);
    }
}
