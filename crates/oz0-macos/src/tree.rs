//! Ending every process of a run on macOS, whatever it did to leave.
//!
//! macOS has no cgroup, no job object and no child subreaper: a process
//! that starts a session or a process group of its own, and whose parent
//! exits, is adopted by launchd, and neither its group nor its ancestry
//! leads back to the run. What it cannot leave is its Seatbelt sandbox,
//! which every descendant inherits and none can drop. So each run's
//! profile carries a mark of its own ([`Membership`]): it denies reading
//! one path in the run's TEMP and allows another there. A process is the
//! run's when the kernel's sandbox answers, for that process, that the
//! first is denied and the second allowed, and it runs as the node's user:
//! no process outside the run answers both (an unsandboxed one is allowed
//! both; another run's profile denies both, since it never names this
//! run's TEMP).
//!
//! [`end_run`] kills every such process, again and again until a look at
//! the whole process table finds none: a process forking while it is
//! killed leaves children the next round finds. The table itself is a
//! trait ([`ProcessTable`]), so that the rounds are tested here with a
//! fake; the system's table is `crate::native`'s (macOS only).

use std::time::Duration;

/// The two paths that tell a run's processes (see the module's text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Denied to the run's processes, by a rule of its profile.
    pub denied: String,
    /// Allowed to them (inside the run's TEMP).
    pub allowed: String,
}

/// File names in the run's TEMP (never created: the sandbox answers for
/// the path alone).
pub const MARK_DENIED: &str = ".oz0-run-mark";
/// See [`MARK_DENIED`].
pub const MARK_ALLOWED: &str = ".oz0-run-member";

impl Membership {
    /// The two paths for a run whose TEMP is `run_temp`.
    pub fn for_temp(run_temp: &str) -> Membership {
        let base = run_temp.trim_end_matches('/');
        Membership {
            denied: format!("{base}/{MARK_DENIED}"),
            allowed: format!("{base}/{MARK_ALLOWED}"),
        }
    }
}

/// The machine's processes, as far as ending a run needs them.
pub trait ProcessTable {
    /// Every process id on the machine now.
    fn pids(&mut self) -> std::io::Result<Vec<i32>>;
    /// Whether `pid` is a live (not zombie) process of this run: in its
    /// sandbox and of the node's user.
    fn is_member(&mut self, pid: i32) -> bool;
    /// Sends SIGKILL: `Ok(false)` when the process was already gone.
    fn kill(&mut self, pid: i32) -> std::io::Result<bool>;
}

/// What [`end_run`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// Processes killed.
    pub killed: usize,
    /// Looks at the whole table, the last one finding none.
    pub rounds: u32,
}

/// Why the run could not be shown to be over.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndError {
    /// The process table could not be read.
    #[error("cannot list this machine's processes: {0}")]
    List(std::io::Error),
    /// A process of the run could not be killed.
    #[error("cannot kill process {pid} of the run: {error}")]
    Kill {
        /// The process.
        pid: i32,
        /// What `kill` answered.
        error: std::io::Error,
    },
    /// Processes of the run were still there after every round.
    #[error("{} process(es) of the run were still there after {rounds} rounds of killing (pids {left:?})", left.len())]
    Stuck {
        /// Those found in the last round.
        left: Vec<i32>,
        /// Rounds made.
        rounds: u32,
    },
}

/// Most rounds before [`end_run`] gives up (a fork bomb is ended in a few:
/// a killed process starts nothing more).
pub const MAX_ROUNDS: u32 = 200;

/// Kills every process of the run (`me`, the node, never), until a whole
/// look finds none.
pub fn end_run(table: &mut dyn ProcessTable, me: i32) -> Result<Ended, EndError> {
    let mut killed = 0;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let members: Vec<i32> = table
            .pids()
            .map_err(EndError::List)?
            .into_iter()
            .filter(|&p| p > 0 && p != me && table.is_member(p))
            .collect();
        if members.is_empty() {
            return Ok(Ended { killed, rounds });
        }
        if rounds >= MAX_ROUNDS {
            return Err(EndError::Stuck {
                left: members,
                rounds,
            });
        }
        for pid in members {
            match table.kill(pid) {
                Ok(true) => killed += 1,
                Ok(false) => {}
                Err(error) => return Err(EndError::Kill { pid, error }),
            }
        }
        // Let the kernel tear the killed processes down before looking again.
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A process in the fake table.
    #[derive(Debug, Clone)]
    struct P {
        member: bool,
        zombie: bool,
        /// Children it starts when it is killed (a fork racing the kill).
        forks_when_killed: u32,
    }

    #[derive(Default)]
    struct Fake {
        procs: BTreeMap<i32, P>,
        next: i32,
        kills: Vec<i32>,
        list_fails: bool,
        unkillable: Option<i32>,
    }

    impl Fake {
        fn add(&mut self, member: bool, forks: u32) -> i32 {
            self.next += 1;
            self.procs.insert(
                self.next,
                P {
                    member,
                    zombie: false,
                    forks_when_killed: forks,
                },
            );
            self.next
        }
    }

    impl ProcessTable for Fake {
        fn pids(&mut self) -> std::io::Result<Vec<i32>> {
            if self.list_fails {
                return Err(std::io::Error::other("no"));
            }
            Ok(self.procs.keys().copied().collect())
        }
        fn is_member(&mut self, pid: i32) -> bool {
            self.procs.get(&pid).is_some_and(|p| p.member && !p.zombie)
        }
        fn kill(&mut self, pid: i32) -> std::io::Result<bool> {
            self.kills.push(pid);
            if Some(pid) == self.unkillable {
                return Ok(true);
            }
            let Some(p) = self.procs.get_mut(&pid) else {
                return Ok(false);
            };
            if p.zombie {
                return Ok(false);
            }
            p.zombie = true;
            let forks = p.forks_when_killed;
            for _ in 0..forks {
                // Each child forks once less.
                let c = self.add(true, forks - 1);
                let _ = c;
            }
            Ok(true)
        }
    }

    #[test]
    fn kills_members_only_and_never_the_node() {
        let mut t = Fake::default();
        let node = t.add(true, 0);
        let a = t.add(true, 0);
        let other = t.add(false, 0);
        let b = t.add(true, 0);
        let e = end_run(&mut t, node).unwrap();
        assert_eq!(
            e,
            Ended {
                killed: 2,
                rounds: 2
            }
        );
        assert_eq!(t.kills, [a, b]);
        assert!(!t.procs[&other].zombie && !t.procs[&node].zombie);
    }

    #[test]
    fn a_process_forking_while_killed_is_followed_round_after_round() {
        let mut t = Fake::default();
        t.add(true, 3);
        let e = end_run(&mut t, 0).unwrap();
        // 1 + 3 + 3*2 + 3*2*1 processes, over four rounds of kills.
        assert_eq!(e.killed, 16);
        assert_eq!(e.rounds, 5);
        assert!(t.procs.values().all(|p| p.zombie));
    }

    #[test]
    fn nothing_to_do_is_one_look() {
        let mut t = Fake::default();
        t.add(false, 0);
        assert_eq!(
            end_run(&mut t, 0).unwrap(),
            Ended {
                killed: 0,
                rounds: 1
            }
        );
        assert!(t.kills.is_empty());
    }

    #[test]
    fn failures_are_named() {
        let mut t = Fake {
            list_fails: true,
            ..Default::default()
        };
        assert!(end_run(&mut t, 0)
            .unwrap_err()
            .to_string()
            .contains("cannot list"));
        let mut t = Fake::default();
        let p = t.add(true, 0);
        t.unkillable = Some(p);
        match end_run(&mut t, 0).unwrap_err() {
            EndError::Stuck { left, rounds } => {
                assert_eq!(left, [p]);
                assert_eq!(rounds, MAX_ROUNDS);
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn membership_paths_are_in_the_run_temp() {
        let m = Membership::for_temp("/private/tmp/oz0-run-1/");
        assert_eq!(m.denied, "/private/tmp/oz0-run-1/.oz0-run-mark");
        assert_eq!(m.allowed, "/private/tmp/oz0-run-1/.oz0-run-member");
    }
}
