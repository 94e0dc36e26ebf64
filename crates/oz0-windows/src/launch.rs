//! The launch contract, as a sequence the native launcher follows.
//!
//! 1. Create the job object with the plan's limits, kill-on-close and UI
//!    limits. Failure: refuse (nothing has started).
//! 2. Create the PSEC environment from the plan's request. Failure: close
//!    the job, refuse.
//! 3. Create the child **suspended**, inside the environment, with the
//!    plan's explicit environment block, current directory and command line.
//!    Failure: close both, refuse.
//! 4. Assign the child to the job. Failure: terminate the child — it never
//!    ran a single instruction of its own — close both, refuse.
//! 5. Resume it. Failure: terminate it (the job's kill-on-close takes
//!    anything else), refuse.
//!
//! From then on the job holds every process the command starts: when the
//! first one ends, or the run is cancelled, or the node dies, closing the job
//! ends them all. [`start`] drives these steps over [`LaunchOps`], so the
//! order and the fail-closed paths are tested here with a recording fake;
//! the native implementation supplies the system calls.

use crate::plan::{JobLimits, PsecPlan, PsecRequest};

/// One step of the sequence, for records and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Create the job object.
    CreateJob,
    /// Create the PSEC environment.
    CreateEnvironment,
    /// Create the child, suspended, in the environment.
    SpawnSuspended,
    /// Put the child in the job.
    AssignToJob,
    /// Let it run.
    Resume,
}

/// The system calls the sequence needs.
pub trait LaunchOps {
    /// A job handle (closing it kills its processes).
    type Job;
    /// A PSEC environment handle.
    type Env;
    /// A suspended child.
    type Child;
    /// Step 1.
    fn create_job(&mut self, limits: &JobLimits) -> Result<Self::Job, SysError>;
    /// Step 2.
    fn create_environment(&mut self, request: &PsecRequest) -> Result<Self::Env, SysError>;
    /// Step 3.
    fn spawn_suspended(
        &mut self,
        env: &Self::Env,
        plan: &PsecPlan,
    ) -> Result<Self::Child, SysError>;
    /// Step 4.
    fn assign(&mut self, job: &Self::Job, child: &Self::Child) -> Result<(), SysError>;
    /// Step 5.
    fn resume(&mut self, child: &Self::Child) -> Result<(), SysError>;
    /// Ends a child that must not run.
    fn terminate(&mut self, child: Self::Child);
    /// Closes an environment.
    fn close_environment(&mut self, env: Self::Env);
    /// Closes a job (killing what is in it).
    fn close_job(&mut self, job: Self::Job);
}

/// What the system said when a call failed: its error code and its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (error {code})")]
pub struct SysError {
    /// The Win32 error or HRESULT.
    pub code: u32,
    /// The system's message for it.
    pub message: String,
}

/// A step failed; the command never ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the sandbox refused to start the command: {step:?} failed: {detail}; the command did not run"
)]
pub struct LaunchError {
    /// Which step.
    pub step: Step,
    /// What the system said.
    pub detail: SysError,
}

/// A started run: the command is running inside its job and environment.
pub struct Started<O: LaunchOps> {
    /// The job (close it to end every process of the run).
    pub job: O::Job,
    /// The environment (close it after the job).
    pub env: O::Env,
    /// The first process.
    pub child: O::Child,
}

impl<O: LaunchOps> std::fmt::Debug for Started<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Started { .. }")
    }
}

/// Runs steps 1–5, failing closed.
pub fn start<O: LaunchOps>(ops: &mut O, plan: &PsecPlan) -> Result<Started<O>, LaunchError> {
    let fail = |step, detail| LaunchError { step, detail };
    let job = ops
        .create_job(&plan.job)
        .map_err(|d| fail(Step::CreateJob, d))?;
    let env = match ops.create_environment(&plan.request) {
        Ok(e) => e,
        Err(d) => {
            ops.close_job(job);
            return Err(fail(Step::CreateEnvironment, d));
        }
    };
    let child = match ops.spawn_suspended(&env, plan) {
        Ok(c) => c,
        Err(d) => {
            ops.close_environment(env);
            ops.close_job(job);
            return Err(fail(Step::SpawnSuspended, d));
        }
    };
    if let Err(d) = ops.assign(&job, &child) {
        ops.terminate(child);
        ops.close_environment(env);
        ops.close_job(job);
        return Err(fail(Step::AssignToJob, d));
    }
    if let Err(d) = ops.resume(&child) {
        ops.terminate(child);
        ops.close_environment(env);
        ops.close_job(job);
        return Err(fail(Step::Resume, d));
    }
    Ok(Started { job, env, child })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        calls: Vec<&'static str>,
        fail_at: Option<&'static str>,
    }

    impl Fake {
        fn call(&mut self, name: &'static str) -> Result<(), SysError> {
            self.calls.push(name);
            if self.fail_at == Some(name) {
                Err(SysError {
                    code: 5,
                    message: format!("{name} failed (fake)"),
                })
            } else {
                Ok(())
            }
        }
    }

    impl LaunchOps for Fake {
        type Job = ();
        type Env = ();
        type Child = ();
        fn create_job(&mut self, l: &JobLimits) -> Result<(), SysError> {
            assert_ne!(l.limit_flags & crate::plan::JOB_LIMIT_KILL_ON_JOB_CLOSE, 0);
            self.call("create_job")
        }
        fn create_environment(&mut self, _: &PsecRequest) -> Result<(), SysError> {
            self.call("create_environment")
        }
        fn spawn_suspended(&mut self, _: &(), _: &PsecPlan) -> Result<(), SysError> {
            self.call("spawn_suspended")
        }
        fn assign(&mut self, _: &(), _: &()) -> Result<(), SysError> {
            self.call("assign")
        }
        fn resume(&mut self, _: &()) -> Result<(), SysError> {
            self.call("resume")
        }
        fn terminate(&mut self, _: ()) {
            self.calls.push("terminate");
        }
        fn close_environment(&mut self, _: ()) {
            self.calls.push("close_environment");
        }
        fn close_job(&mut self, _: ()) {
            self.calls.push("close_job");
        }
    }

    #[test]
    fn order_and_fail_closed_paths() {
        let plan = crate::plan::tests::minimal_plan();
        let cases: &[(Option<&str>, &[&str])] = &[
            (
                None,
                &[
                    "create_job",
                    "create_environment",
                    "spawn_suspended",
                    "assign",
                    "resume",
                ],
            ),
            (Some("create_job"), &["create_job"]),
            (
                Some("create_environment"),
                &["create_job", "create_environment", "close_job"],
            ),
            (
                Some("spawn_suspended"),
                &[
                    "create_job",
                    "create_environment",
                    "spawn_suspended",
                    "close_environment",
                    "close_job",
                ],
            ),
            // Not placed in its job: terminated while still suspended, never resumed.
            (
                Some("assign"),
                &[
                    "create_job",
                    "create_environment",
                    "spawn_suspended",
                    "assign",
                    "terminate",
                    "close_environment",
                    "close_job",
                ],
            ),
            (
                Some("resume"),
                &[
                    "create_job",
                    "create_environment",
                    "spawn_suspended",
                    "assign",
                    "resume",
                    "terminate",
                    "close_environment",
                    "close_job",
                ],
            ),
        ];
        for (fail_at, want) in cases {
            let mut f = Fake {
                fail_at: *fail_at,
                ..Default::default()
            };
            let r = start(&mut f, &plan);
            assert_eq!(&f.calls, want, "{fail_at:?}");
            assert_eq!(r.is_ok(), fail_at.is_none());
            if fail_at == &Some("assign") {
                assert!(!f.calls.contains(&"resume"));
                let e = r.unwrap_err();
                assert_eq!(e.step, Step::AssignToJob);
                assert!(e.to_string().contains("did not run"));
            }
        }
    }
}
