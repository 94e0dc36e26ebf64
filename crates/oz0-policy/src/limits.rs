//! Limits for a run as a whole (all its processes together).

use serde::{Deserialize, Serialize};

/// Largest memory limit we accept, in MiB (1 TiB).
pub const MAX_MEMORY_MIB: u64 = 1024 * 1024;
/// Largest process limit we accept.
pub const MAX_PROCESSES: u32 = 1_000_000;
/// Largest CPU-time or wall-time limit, in seconds (30 days).
pub const MAX_SECONDS: u64 = 30 * 24 * 3600;
/// Size of each of a run's memory file systems (its `/tmp` and its `/dev`,
/// which holds `/dev/shm`) when the caller names none, in MiB. They hold
/// their files in memory, so without a size a run could fill the machine's
/// memory through them, with or without `--memory`.
pub const DEFAULT_TMP_MIB: u64 = 1024;
/// Files each of those file systems may hold per MiB of its size (one per
/// 8 KiB): each costs kernel memory beyond the size.
pub const TMP_INODES_PER_MIB: u64 = 128;

/// The limits a caller asked for. `None` means "not asked for", never
/// "unlimited by promise": the run's status says which were enforced and how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory of all processes together, MiB.
    pub memory_mib: Option<u64>,
    /// Number of processes (tasks) at once.
    pub processes: Option<u32>,
    /// CPU time of all processes together, seconds.
    pub cpu_seconds: Option<u64>,
    /// Wall time, seconds.
    pub timeout_seconds: Option<u64>,
    /// Size of each of the run's memory file systems (`/tmp`, `/dev`), MiB
    /// ([`DEFAULT_TMP_MIB`] when `None`).
    #[serde(default)]
    pub tmp_mib: Option<u64>,
}

/// Why a limit was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// Zero or over the maximum.
    #[error("{what} must be between 1 and {max}, not {value}")]
    OutOfRange {
        /// Which limit.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The largest accepted.
        max: u64,
    },
}

impl Limits {
    /// Checks every limit is in range.
    pub fn validate(&self) -> Result<(), LimitError> {
        let check = |what, v: Option<u64>, max| match v {
            Some(v) if v == 0 || v > max => Err(LimitError::OutOfRange {
                what,
                value: v,
                max,
            }),
            _ => Ok(()),
        };
        check("--memory (MiB)", self.memory_mib, MAX_MEMORY_MIB)?;
        check(
            "--processes",
            self.processes.map(u64::from),
            u64::from(MAX_PROCESSES),
        )?;
        check("--cpu-seconds", self.cpu_seconds, MAX_SECONDS)?;
        check("--timeout (seconds)", self.timeout_seconds, MAX_SECONDS)?;
        check("--tmp-size (MiB)", self.tmp_mib, MAX_MEMORY_MIB)?;
        Ok(())
    }

    /// The size of each of the run's memory file systems, MiB.
    pub fn tmp_size_mib(&self) -> u64 {
        self.tmp_mib.unwrap_or(DEFAULT_TMP_MIB)
    }

    /// How many files each of them may hold.
    pub fn tmp_inodes(&self) -> u64 {
        self.tmp_size_mib() * TMP_INODES_PER_MIB
    }

    /// True when a job (cgroup) is needed to enforce these limits.
    pub fn needs_job(&self) -> bool {
        self.memory_mib.is_some() || self.processes.is_some() || self.cpu_seconds.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert!(Limits::default().validate().is_ok());
        let l = Limits {
            memory_mib: Some(0),
            ..Default::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            timeout_seconds: Some(MAX_SECONDS + 1),
            ..Default::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            processes: Some(8),
            memory_mib: Some(256),
            cpu_seconds: Some(1),
            timeout_seconds: Some(10),
            tmp_mib: Some(64),
        };
        assert_eq!(l.tmp_inodes(), 64 * TMP_INODES_PER_MIB);
        assert_eq!(Limits::default().tmp_size_mib(), DEFAULT_TMP_MIB);
        assert!(l.validate().is_ok());
        assert!(l.needs_job());
    }
}
