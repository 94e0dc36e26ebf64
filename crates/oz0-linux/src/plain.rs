//! Tier 0: no wall. The command runs as a process group of its own with
//! the node's own permissions, in its work directory, with only the
//! variables it was given (and a plain `PATH`), killed as a group on cancel
//! or timeout. For nodes started with `--sandbox none`, which say so in
//! their facts.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oz0_core::exit::{exec_failure_code, status_code, Exit};
use oz0_core::{Ended, Outcome, RunError, RunOptions};
use oz0_policy::RunSpec;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// The no-wall sandbox.
#[derive(Debug, Default)]
pub struct Plain;

/// How often the group is looked at while it runs.
const TICK: Duration = Duration::from_millis(100);

/// A command's stream as `std::process` takes it.
pub(crate) fn stdio(s: oz0_core::Stdio) -> Stdio {
    match s {
        oz0_core::Stdio::Inherit => Stdio::inherit(),
        oz0_core::Stdio::Null => Stdio::null(),
        oz0_core::Stdio::File(f) => Stdio::from(f),
    }
}

impl oz0_core::Sandbox for Plain {
    fn tier(&self) -> u8 {
        0
    }

    /// A fault changes nothing here: with no wall, every weakness a fault
    /// would make is there already.
    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        let RunOptions {
            io, cancel, role, ..
        } = opts;
        if let Some(why) = oz0_core::tier0::refusal(spec, &role) {
            return Err(why.into());
        }
        let started = Instant::now();
        let run_id = crate::record::new_run_id();
        let outcome = |ended, exit_code| Outcome {
            run_id: run_id.clone(),
            ended,
            exit_code,
            duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
            limit_hit: None,
            warnings: Vec::new(),
            report: serde_json::Map::from_iter([(
                "enforced".to_string(),
                serde_json::json!({"mechanism": "none"}),
            )]),
        };
        let argv: Vec<&str> = spec.command.iter().map(|a| a.as_str()).collect();
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..])
            .current_dir(spec.work.as_str())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(stdio(io.stdin))
            .stdout(stdio(io.stdout))
            .stderr(stdio(io.stderr));
        for v in &spec.env {
            cmd.env(v.name.as_str(), &v.value);
        }
        // The run is told it has no wall (tier 0).
        cmd.env(
            oz0_policy::describe::SANDBOX_VAR,
            oz0_policy::describe::NO_WALL_VALUE,
        );
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let reason = format!("cannot execute {}: {e}", argv[0]);
                return Ok(outcome(
                    Ended::NotExecuted { reason },
                    exec_failure_code(&e),
                ));
            }
        };
        let group = rustix::process::Pid::from_child(&child);
        let kill = || {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        };
        let deadline = spec
            .limits
            .timeout_seconds
            .map(|t| started + Duration::from_secs(t));
        let (ended, code) = supervise(&mut child, deadline, cancel.as_ref(), TICK, kill)?;
        // Whatever the command left in its group goes with it.
        kill();
        Ok(outcome(ended, code))
    }
}

/// Waits for `child` to end, for `deadline` or for `cancel`, whichever
/// comes first, looking every `tick`; at the deadline or a cancel, `stop`
/// ends the run (and the child is killed) first. How it ended, and its
/// status as a shell says it.
pub(crate) fn supervise(
    child: &mut std::process::Child,
    deadline: Option<Instant>,
    cancel: Option<&oz0_core::Cancel>,
    tick: Duration,
    stop: impl Fn(),
) -> std::io::Result<(Ended, i32)> {
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok((Ended::Exited, status_code(st)));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop();
            let _ = child.kill();
            let _ = child.wait();
            return Ok((Ended::Timeout, Exit::Timeout.code()));
        }
        let t = Timespec {
            tv_sec: 0,
            tv_nsec: tick.as_nanos().try_into().unwrap_or(0),
        };
        let fired = match cancel {
            Some(c) => {
                let mut fds = [PollFd::new(&c.0, PollFlags::IN)];
                poll(&mut fds, Some(&t)).unwrap_or(0) > 0 && !fds[0].revents().is_empty()
            }
            None => {
                std::thread::sleep(tick);
                false
            }
        };
        if fired {
            stop();
            let _ = child.kill();
            let st = child.wait()?;
            return Ok((Ended::Cancelled, status_code(st)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_core::{Cancel, RunIo, Sandbox};
    use oz0_policy::{Limits, RunRequest};

    fn spec(command: &[&str], limits: Limits, allow: Vec<String>) -> RunSpec {
        let work = std::env::temp_dir().join("oz0-plain-unit");
        std::fs::create_dir_all(&work).unwrap();
        RunSpec::new(RunRequest {
            work: work.display().to_string(),
            data_dir: "/nonexistent/oz0-plain-data".into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            limits,
            allow,
            ..Default::default()
        })
        .unwrap()
    }

    /// What no wall can enforce is refused, never run without it.
    #[test]
    fn limits_and_egress_are_refused() {
        let memory = Limits {
            memory_mib: Some(64),
            ..Default::default()
        };
        let err = Plain
            .run(
                &spec(&["/bin/true"], memory, vec![]),
                RunOptions::new(RunIo::quiet(), None),
            )
            .unwrap_err();
        assert!(err.to_string().contains("tier 0 has no wall"), "{err}");
        let egress = spec(
            &["/bin/true"],
            Limits::default(),
            vec!["example.com:443".into()],
        );
        assert!(Plain
            .run(&egress, RunOptions::new(RunIo::quiet(), None))
            .is_err());
    }

    /// The status, a command that is not there, the timeout and a cancel
    /// each end the run as a shell would say.
    #[test]
    fn ends_as_a_shell_says() {
        let run = |cmd: &[&str], limits: Limits, cancel: Option<Cancel>| {
            Plain
                .run(
                    &spec(cmd, limits, vec![]),
                    RunOptions::new(RunIo::quiet(), cancel),
                )
                .unwrap()
        };
        let o = run(&["/bin/sh", "-c", "exit 3"], Limits::default(), None);
        assert_eq!((o.ended, o.exit_code), (Ended::Exited, 3));
        let o = run(&["/nonexistent/oz0"], Limits::default(), None);
        assert_eq!(o.exit_code, 127);
        assert!(matches!(o.ended, Ended::NotExecuted { .. }));
        let timeout = Limits {
            timeout_seconds: Some(1),
            ..Default::default()
        };
        let o = run(&["/bin/sleep", "30"], timeout, None);
        assert_eq!((o.ended, o.exit_code), (Ended::Timeout, 124));
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(w);
        let o = run(
            &["/bin/sleep", "30"],
            Limits::default(),
            Some(Cancel(r.into())),
        );
        assert_eq!((o.ended, o.exit_code), (Ended::Cancelled, 137));
    }
}
