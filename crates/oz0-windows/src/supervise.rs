//! How a Windows run is watched to its end, the same for the tier-0 job
//! object and for PSEC: one wait on the run's first process and the
//! caller's cancel together, bounded by what is left of the timeout
//! (`WaitForMultipleObjects`; no polling while the run runs). Then, however
//! it ended, every process of its job is ended, and the run returns once
//! they are gone.
//!
//! The decision is portable and tested here over [`Watch`] with a fake
//! clock; the native watches (a process and an event, a job) are
//! `crate::native`'s.

use std::time::{Duration, Instant};

use oz0_core::exit::Exit;
use oz0_core::Ended;

use crate::launch::SysError;

/// What one wait saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// The first process exited with this status.
    Exited(u32),
    /// The caller's cancel fired.
    Cancelled,
    /// The wait's time passed.
    TimedOut,
}

/// A started run, as its supervisor sees it.
pub trait Watch {
    /// Waits until the first process exits or the cancel fires, at most
    /// `ms` milliseconds (`None`: without end).
    fn wait(&mut self, ms: Option<u32>) -> Result<Woke, SysError>;
    /// Ends every process of the run (its job).
    fn end_all(&mut self);
    /// How many processes of the run are left (`None`: cannot tell).
    fn active(&mut self) -> Option<u32>;
    /// Sleeps a moment while the last processes go.
    fn pause(&mut self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// The status of a run stopped by its cancel (as a shell reports Ctrl-C).
pub const CANCELLED_CODE: i32 = 130;

/// How long the processes of an ended job have to go.
pub const DRAIN: Duration = Duration::from_secs(5);

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// How.
    pub ended: Ended,
    /// Its status: the first process's (Windows' 32 bits, read as signed),
    /// 124 on timeout, [`CANCELLED_CODE`] on cancel.
    pub exit_code: i32,
    /// Processes of the run still there after [`DRAIN`] (0: none).
    pub left: u32,
}

/// Watches `w` to its end: its first process's exit, `timeout` (from
/// `started`, on the clock `now`) or the cancel; then ends every process
/// of the run and waits for them to go. `Err` when a wait failed: every
/// process of the run has been ended then too.
pub fn supervise(
    w: &mut dyn Watch,
    timeout: Option<Duration>,
    started: Instant,
    now: &dyn Fn() -> Instant,
) -> Result<End, SysError> {
    let deadline = timeout.map(|t| started + t);
    let (ended, exit_code) = loop {
        let ms = deadline.map(|d| {
            let left = d.saturating_duration_since(now());
            // Rounded up: a wait never ends before the deadline.
            u32::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u32::MAX)
        });
        if ms == Some(0) {
            break (Ended::Timeout, Exit::Timeout.code());
        }
        match w.wait(ms) {
            Ok(Woke::Exited(c)) => break (Ended::Exited, i32::from_ne_bytes(c.to_ne_bytes())),
            Ok(Woke::Cancelled) => break (Ended::Cancelled, CANCELLED_CODE),
            // Looked at again: the deadline decides, not the wait.
            Ok(Woke::TimedOut) => {}
            Err(e) => {
                w.end_all();
                drain(w);
                return Err(e);
            }
        }
    };
    // The first process ended (or the run was stopped): so does every
    // process it started, and the run returns once they have gone.
    w.end_all();
    let left = drain(w);
    Ok(End {
        ended,
        exit_code,
        left,
    })
}

/// Waits up to [`DRAIN`] for the run's processes to go: how many are left.
fn drain(w: &mut dyn Watch) -> u32 {
    let step = Duration::from_millis(20);
    let mut waited = Duration::ZERO;
    loop {
        match w.active() {
            Some(0) | None => return 0,
            Some(n) if waited >= DRAIN => return n,
            Some(_) => {
                w.pause(step);
                waited += step;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A run whose waits answer from a script, on a clock of its own.
    struct Fake<'a> {
        clock: &'a Cell<Instant>,
        /// What each wait answers, and how long it takes.
        script: Vec<(Result<Woke, SysError>, Duration)>,
        waits: Vec<Option<u32>>,
        ended: u32,
        /// Processes left after the job is ended, one fewer per pause.
        active: u32,
    }

    impl Watch for Fake<'_> {
        fn wait(&mut self, ms: Option<u32>) -> Result<Woke, SysError> {
            self.waits.push(ms);
            let (r, took) = self.script.remove(0);
            self.clock.set(self.clock.get() + took);
            r
        }
        fn end_all(&mut self) {
            self.ended += 1;
        }
        fn active(&mut self) -> Option<u32> {
            Some(self.active)
        }
        fn pause(&mut self, d: Duration) {
            self.clock.set(self.clock.get() + d);
            self.active = self.active.saturating_sub(1);
        }
    }

    fn run(
        script: Vec<(Result<Woke, SysError>, Duration)>,
        timeout: Option<u64>,
        active: u32,
    ) -> (Result<End, SysError>, Vec<Option<u32>>, u32) {
        let t0 = Instant::now();
        let clock = Cell::new(t0);
        let mut f = Fake {
            clock: &clock,
            script,
            waits: vec![],
            ended: 0,
            active,
        };
        let r = supervise(&mut f, timeout.map(Duration::from_secs), t0, &|| {
            clock.get()
        });
        (r, f.waits, f.ended)
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn an_exit_is_the_runs_status_and_its_job_is_ended_after() {
        let (r, waits, ended) = run(vec![(Ok(Woke::Exited(3)), S)], None, 2);
        let r = r.unwrap();
        assert_eq!((r.ended, r.exit_code, r.left), (Ended::Exited, 3, 0));
        assert_eq!(waits, vec![None], "one wait without end, no polling");
        assert_eq!(ended, 1, "what the first process left is ended");
        // Windows' 32-bit statuses (an NTSTATUS) read as signed.
        let (r, _, _) = run(vec![(Ok(Woke::Exited(0xC000_0005)), S)], None, 0);
        assert_eq!(r.unwrap().exit_code, -1_073_741_819);
    }

    #[test]
    fn the_timeout_bounds_the_wait_and_ends_the_run_with_124() {
        let (r, waits, ended) = run(vec![(Ok(Woke::TimedOut), 3 * S)], Some(3), 0);
        let r = r.unwrap();
        assert_eq!((r.ended, r.exit_code), (Ended::Timeout, 124));
        assert_eq!(waits, vec![Some(3000)]);
        assert_eq!(ended, 1);
        // A wait that ends early is waited again for what is left.
        let (r, waits, _) = run(
            vec![
                (Ok(Woke::TimedOut), Duration::from_millis(2500)),
                (Ok(Woke::TimedOut), Duration::from_millis(500)),
            ],
            Some(3),
            0,
        );
        assert_eq!(r.unwrap().ended, Ended::Timeout);
        assert_eq!(waits, vec![Some(3000), Some(500)]);
        // An exit before the deadline is an exit.
        let (r, _, _) = run(vec![(Ok(Woke::Exited(0)), S)], Some(3), 0);
        assert_eq!(r.unwrap().ended, Ended::Exited);
    }

    #[test]
    fn a_cancel_ends_the_run_at_once() {
        let (r, waits, ended) = run(vec![(Ok(Woke::Cancelled), S)], Some(60), 1);
        let r = r.unwrap();
        assert_eq!(
            (r.ended, r.exit_code, r.left),
            (Ended::Cancelled, CANCELLED_CODE, 0)
        );
        assert_eq!(waits, vec![Some(60_000)]);
        assert_eq!(ended, 1);
    }

    #[test]
    fn a_failed_wait_still_ends_every_process() {
        let e = SysError {
            code: 6,
            message: "WaitForMultipleObjects failed".into(),
        };
        let (r, _, ended) = run(vec![(Err(e.clone()), S)], None, 1);
        assert_eq!(r.unwrap_err(), e);
        assert_eq!(ended, 1);
    }

    #[test]
    fn processes_that_will_not_go_are_counted_after_the_drain() {
        let many = u32::try_from(DRAIN.as_millis() / 20).unwrap() + 10;
        let (r, _, _) = run(vec![(Ok(Woke::Exited(0)), S)], None, many);
        assert_eq!(r.unwrap().left, 10);
    }
}
