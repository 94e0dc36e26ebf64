//! Who made a job: the node's pid and start time (clock ticks after boot),
//! written into every job folder's name when it is made and read back by
//! cleanup to tell a live node from a dead one (pid reuse included).

use std::path::{Path, PathBuf};

use super::JOB_PREFIX;
use crate::fs::CgroupFs;

/// This process's pid and start time (clock ticks after boot), from `/proc/self/stat`.
pub(super) fn node_identity(fs: &dyn CgroupFs) -> Option<(u32, u64)> {
    let s = fs.read(Path::new("/proc/self/stat")).ok()?;
    parse_stat(&s)
}

fn parse_stat(s: &str) -> Option<(u32, u64)> {
    let pid: u32 = s.split_whitespace().next()?.parse().ok()?;
    // The command name may hold spaces and parentheses: fields restart after the last ')'.
    let rest = &s[s.rfind(')')? + 1..];
    // Field 22 (starttime) is the 20th after the name (state is field 3).
    let start: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some((pid, start))
}

pub(super) fn start_time_of(fs: &dyn CgroupFs, pid: u32) -> Option<u64> {
    let s = fs.read(&PathBuf::from(format!("/proc/{pid}/stat"))).ok()?;
    parse_stat(&s).map(|(_, t)| t)
}

/// `(pid, start)` from a job folder name.
pub(super) fn parse_job_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(JOB_PREFIX)?;
    let mut it = rest.splitn(3, '-');
    let pid = it.next()?.parse().ok()?;
    let start = it.next()?.parse().ok()?;
    it.next().filter(|r| !r.is_empty())?;
    Some((pid, start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_names() {
        let stat = "4242 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        assert_eq!(parse_stat(stat), Some((4242, 987654)));
        assert_eq!(parse_job_name("oz0-job-12-345-run-x"), Some((12, 345)));
        assert_eq!(parse_job_name("oz0-job-12-345-"), None);
        assert_eq!(parse_job_name("oz0-node"), None);
    }
}
