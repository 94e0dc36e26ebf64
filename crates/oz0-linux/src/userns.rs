//! Why unprivileged user namespaces may be blocked, and the fix for each.
//!
//! Read from the system's own switches (sysctls), never from a version.

use serde::Serialize;

/// One line naming every fix, for messages where the cause is not yet known.
pub const FIX_SUMMARY: &str = "unprivileged user namespaces are blocked: on Ubuntu 23.10+ set `sysctl kernel.apparmor_restrict_unprivileged_userns=0` (or give bwrap an AppArmor profile with `userns,`); elsewhere check `sysctl user.max_user_namespaces` (must be > 0) and `kernel.unprivileged_userns_clone=1` (Debian kernels before 5.10)";

/// What blocks user namespaces on this host, as found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "cause")]
pub enum Block {
    /// Ubuntu's AppArmor restriction.
    AppArmor,
    /// `user.max_user_namespaces` is 0.
    MaxZero,
    /// Debian's old switch is off.
    DebianClone,
}

impl Block {
    /// The exact fix.
    pub fn fix(&self) -> &'static str {
        match self {
            Block::AppArmor => "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (persist it in /etc/sysctl.d/), or install an AppArmor profile for /usr/bin/bwrap that allows `userns,`",
            Block::MaxZero => "sudo sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)",
            Block::DebianClone => "sudo sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/)",
        }
    }
}

/// Reads one sysctl through `read` (a path under /proc/sys), `None` if absent.
pub fn blocks(read: &dyn Fn(&str) -> Option<String>) -> Vec<Block> {
    let val = |p: &str| read(p).map(|s| s.trim().to_string());
    let mut out = Vec::new();
    if val("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        out.push(Block::AppArmor);
    }
    if val("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        out.push(Block::MaxZero);
    }
    if val("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        out.push(Block::DebianClone);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        type Files = &'static [(&'static str, &'static str)];
        let cases: &[(Files, &[Block])] = &[
            (&[], &[]),
            (
                &[(
                    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                    "1\n",
                )],
                &[Block::AppArmor],
            ),
            (
                &[(
                    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                    "0",
                )],
                &[],
            ),
            (
                &[("/proc/sys/user/max_user_namespaces", "0")],
                &[Block::MaxZero],
            ),
            (&[("/proc/sys/user/max_user_namespaces", "96365")], &[]),
            (
                &[("/proc/sys/kernel/unprivileged_userns_clone", "0")],
                &[Block::DebianClone],
            ),
        ];
        for (files, want) in cases {
            let read = |p: &str| {
                files
                    .iter()
                    .find(|(f, _)| *f == p)
                    .map(|(_, v)| v.to_string())
            };
            assert_eq!(blocks(&read), *want, "{files:?}");
            for b in *want {
                assert!(b.fix().contains("sysctl"));
            }
        }
    }
}
