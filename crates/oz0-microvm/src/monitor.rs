//! A running VM monitor's wall, read from `/proc/<pid>`: what the kernel
//! holds for the process, not what the node asked for. The tests read it
//! while a VM runs (`tool_jobs.rs` on the QEMU test backend, the smolvm
//! stand-in), and `scripts/e2e-oci-tools` on a machine where KVM guests
//! boot.
//!
//! Whatever cannot be read or parsed is an error, never a pass.

use std::os::unix::fs::FileTypeExt;

/// What `/proc/<pid>` shows of a monitor's wall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `CapInh`, `CapPrm`, `CapEff`, `CapAmb`, as the kernel prints them.
    pub caps: Vec<(&'static str, String)>,
    /// `NoNewPrivs: 1`.
    pub no_new_privs: bool,
    /// `Seccomp:` (2 is filter mode).
    pub seccomp: u32,
    /// `Seccomp_filters:`: how many filters are stacked.
    pub seccomp_filters: u32,
    /// The device nodes in its `/dev` (character or block), sorted.
    pub devices: Vec<String>,
}

impl Observed {
    /// Whether every capability set is empty.
    pub fn no_capabilities(&self) -> bool {
        self.caps.iter().all(|(_, v)| v.bytes().all(|b| b == b'0'))
    }
}

/// Why a process's wall could not be read: a finding, never a pass.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObserveError {
    /// A file or folder of `/proc/<pid>` could not be read.
    #[error("{path}: {source}")]
    Read {
        /// Which.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A field of its status is missing or not a number.
    #[error("{path} has no readable {field}")]
    Field {
        /// The status file.
        path: String,
        /// The field.
        field: &'static str,
    },
}

/// Reads process `pid`'s wall. Its `/dev` is read through
/// `/proc/<pid>/root` (the caller needs ptrace read access: the same user,
/// or root).
pub fn observe(pid: u32) -> Result<Observed, ObserveError> {
    let read = |path: &str| {
        let path = path.to_string();
        move |source| ObserveError::Read { path, source }
    };
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(read(&path))?;
    let missing = |field| ObserveError::Field {
        path: path.clone(),
        field,
    };
    let field = |name: &'static str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| missing(name))
    };
    let number = |name: &'static str| field(name)?.parse::<u32>().map_err(|_| missing(name));
    let caps = ["CapInh", "CapPrm", "CapEff", "CapAmb"]
        .into_iter()
        .map(|c| Ok((c, field(c)?)))
        .collect::<Result<Vec<_>, ObserveError>>()?;
    let dev = format!("/proc/{pid}/root/dev");
    let mut devices = Vec::new();
    for e in std::fs::read_dir(&dev).map_err(read(&dev))? {
        let e = e.map_err(read(&dev))?;
        // lstat, not the entry's type: a device bound over a placeholder
        // is listed as the placeholder.
        let t = std::fs::symlink_metadata(e.path())
            .map_err(read(&e.path().display().to_string()))?
            .file_type();
        if t.is_char_device() || t.is_block_device() {
            devices.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    devices.sort();
    Ok(Observed {
        caps,
        no_new_privs: field("NoNewPrivs")? == "1",
        seccomp: number("Seccomp")?,
        seccomp_filters: number("Seccomp_filters")?,
        devices,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_as_it_is() {
        let o = observe(std::process::id()).unwrap();
        assert!(o.devices.iter().any(|d| d == "null"), "{o:?}");
        assert_eq!(o.caps.len(), 4);
        assert!(observe(u32::MAX).is_err());
    }
}
