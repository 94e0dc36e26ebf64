//! Tier 0 on Windows as the node core's door: [`JobObject`] runs one
//! command with no wall, started suspended and placed in a kill-on-close
//! job object before it runs, so that every process it starts is in the
//! job: when its first process ends, its timeout passes or its cancel
//! fires, all of them end ([`crate::supervise`]).
//!
//! What it gets: exactly its variables, plus `SystemRoot` and, when it
//! names no `PATH` (in any letter case), the system's
//! (`%SystemRoot%\System32;%SystemRoot%`) ([`job_env`]); its work folder as
//! its current folder. A run that asks for what only a wall enforces
//! (egress, limits) is refused: tier 0 has none.
//!
//! Paths reach a run's spec as `/X:/folder` ([`carry`], [`uncarry`]); a
//! tier-0 run's folder is the node's own choice, so it is carried as it is
//! spelled (PSEC's stricter [`crate::winpath::WinPath`] is for what a wall
//! enforces). The decisions and the run's outcome are tested on Linux over
//! [`JobOps`] with a fake; the native operations are `native::JobRunner`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use oz0_core::{Cancel, Ended, Outcome, RunError, RunIo, RunOptions};
use oz0_policy::{AbsPath, RunSpec};

use crate::supervise::{supervise, Watch};

/// Why a path cannot be carried in a run's spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CarryError {
    /// Not Unicode, which a spec's paths are.
    #[error("{} is not valid Unicode", .0.display())]
    NotUnicode(PathBuf),
    /// Not on a drive letter.
    #[error("{0} is not a folder on a drive letter (X:\\…): name one")]
    NoDrive(String),
}

/// `C:\work\job1` as a run's spec carries it: `/C:/work/job1`.
pub fn carry(p: &Path) -> Result<String, CarryError> {
    let s = p
        .to_str()
        .ok_or_else(|| CarryError::NotUnicode(p.to_path_buf()))?;
    let b = s.as_bytes();
    let drive = b.len() >= 3
        && b[0].is_ascii_alphabetic()
        && b[1] == b':'
        && (b[2] == b'\\' || b[2] == b'/');
    if !drive {
        return Err(CarryError::NoDrive(s.to_string()));
    }
    Ok(format!("/{}", s.replace('\\', "/")))
}

/// A path a run's spec carries (`/X:/a/b`) as Windows spells it (`X:\a\b`).
pub fn uncarry(p: &AbsPath) -> PathBuf {
    let s = p.as_str().strip_prefix('/').unwrap_or(p.as_str());
    let mut w = s.replace('/', "\\");
    // A drive alone (`/C:`) is its root.
    if w.len() == 2 && w.ends_with(':') {
        w.push('\\');
    }
    PathBuf::from(w)
}

/// A tier-0 run's whole environment: `SystemRoot`, `OZ0_SANDBOX` (it has
/// no wall: tier 0), the system's `PATH` when the run names none (Windows'
/// names ignore case), then the run's own variables.
pub fn job_env(spec: &RunSpec, system_root: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("SystemRoot".to_string(), system_root.to_string()),
        (
            oz0_policy::describe::SANDBOX_VAR.to_string(),
            oz0_policy::describe::NO_WALL_VALUE.to_string(),
        ),
    ];
    if !spec
        .env
        .iter()
        .any(|v| v.name.as_str().eq_ignore_ascii_case("PATH"))
    {
        let r = system_root.trim_end_matches('\\');
        env.push(("PATH".into(), format!("{r}\\System32;{r}")));
    }
    for v in &spec.env {
        env.push((v.name.as_str().to_string(), v.value.clone()));
    }
    env
}

/// What a tier-0 run starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The program (the command's first word).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Its current folder.
    pub cwd: PathBuf,
}

/// Why a run did not start.
#[derive(Debug)]
pub enum StartError {
    /// The program could not be executed (not found: 127, else 126).
    NotExecuted {
        /// Why.
        reason: String,
        /// Its status.
        code: i32,
    },
    /// The job could not hold it: it never ran.
    Refused(String),
}

/// The system's side of a tier-0 run.
pub trait JobOps {
    /// A started run.
    type Run: Watch;
    /// Starts `l` suspended, places it in a new kill-on-close job object,
    /// then resumes it; not placed ⇒ killed, never run.
    fn start(&self, l: &Launch, io: RunIo, cancel: Option<Cancel>)
        -> Result<Self::Run, StartError>;
}

/// A run id unique on this machine while the node runs.
pub fn new_run_id() -> String {
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{t:x}-{n}", std::process::id())
}

/// Runs `spec` at tier 0 through `ops` (see the module's text). A fault
/// changes nothing here: with no wall, every weakness a fault would make
/// is there already.
pub fn run_in_job<O: JobOps>(
    ops: &O,
    system_root: &str,
    spec: &RunSpec,
    opts: RunOptions,
) -> Result<Outcome, RunError> {
    let RunOptions {
        io, cancel, role, ..
    } = opts;
    if let Some(why) = oz0_core::tier0::refusal(spec, &role) {
        return Err(why.into());
    }
    let l = Launch {
        program: spec.command[0].clone(),
        args: spec.command[1..].to_vec(),
        env: job_env(spec, system_root),
        cwd: uncarry(&spec.work),
    };
    let started = Instant::now();
    let outcome = |ended, exit_code, warnings| Outcome {
        run_id: new_run_id(),
        ended,
        exit_code,
        duration_ms: started.elapsed().as_millis().try_into().unwrap_or(u64::MAX),
        limit_hit: None,
        warnings,
        report: serde_json::Map::new(),
    };
    let mut run = match ops.start(&l, io, cancel) {
        Ok(r) => r,
        Err(StartError::NotExecuted { reason, code }) => {
            return Ok(outcome(Ended::NotExecuted { reason }, code, vec![]))
        }
        Err(StartError::Refused(why)) => return Err(why.into()),
    };
    let timeout = spec
        .limits
        .timeout_seconds
        .map(std::time::Duration::from_secs);
    let end = supervise(&mut run, timeout, started, &Instant::now)
        .map_err(|e| format!("cannot wait for the run: {e}; every process of its job was ended"))?;
    let warnings = if end.left > 0 {
        vec![format!(
            "{} processes of the run were still in its job after it was ended",
            end.left
        )]
    } else {
        vec![]
    };
    Ok(outcome(end.ended, end.exit_code, warnings))
}

/// Tier 0 on Windows: a job object around every process of the run.
#[derive(Debug, Clone)]
pub struct JobObject {
    /// `%SystemRoot%`, given to every run.
    pub system_root: String,
}

impl JobObject {
    /// With this machine's `SystemRoot` (`C:\Windows` when unset).
    pub fn new() -> JobObject {
        JobObject {
            system_root: std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\Windows".into()),
        }
    }
}

impl Default for JobObject {
    fn default() -> Self {
        JobObject::new()
    }
}

#[cfg(windows)]
impl oz0_core::Sandbox for JobObject {
    fn tier(&self) -> u8 {
        0
    }

    fn run(&self, spec: &RunSpec, opts: RunOptions) -> Result<Outcome, RunError> {
        run_in_job(&crate::native::JobRunner, &self.system_root, spec, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    use crate::launch::SysError;
    use crate::supervise::Woke;
    use oz0_core::Role;
    use oz0_policy::{EnvVar, Limits, RunRequest};

    fn spec(env: &[(&str, &str)], limits: Limits, allow: &[&str]) -> RunSpec {
        RunSpec::new(RunRequest {
            work: carry(Path::new("C:\\Users\\me\\Temp\\oz0-node-work\\job-1-1")).unwrap(),
            data_dir: carry(Path::new("C:\\Users\\me\\AppData\\Local\\oz0-node")).unwrap(),
            env: env
                .iter()
                .map(|(k, v)| EnvVar::new(k, v).unwrap())
                .collect(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
            limits,
            command: vec![
                "C:\\Windows\\System32\\cmd.exe".into(),
                "/c".into(),
                "exit 3".into(),
            ],
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn paths_travel_as_the_spec_carries_them_and_back() {
        let p = Path::new("C:\\Users\\LONGUS~1\\Temp\\job-1");
        let c = carry(p).unwrap();
        assert_eq!(c, "/C:/Users/LONGUS~1/Temp/job-1");
        assert_eq!(
            uncarry(&AbsPath::new(&c).unwrap()),
            PathBuf::from("C:\\Users\\LONGUS~1\\Temp\\job-1")
        );
        assert_eq!(
            uncarry(&AbsPath::new("/D:").unwrap()),
            PathBuf::from("D:\\")
        );
        for bad in ["relative\\x", "\\\\server\\share\\x", "C:"] {
            assert!(carry(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_environment_is_the_runs_plus_systemroot_and_the_systems_path() {
        let s = spec(&[("GREETING", "hi")], Limits::default(), &[]);
        assert_eq!(
            job_env(&s, "C:\\Windows"),
            vec![
                ("SystemRoot".to_string(), "C:\\Windows".to_string()),
                ("OZ0_SANDBOX".into(), "tier=0;wall=none".into()),
                ("PATH".into(), "C:\\Windows\\System32;C:\\Windows".into()),
                ("GREETING".into(), "hi".into()),
            ]
        );
        // A PATH in any letter case is the run's own.
        let s = spec(&[("Path", "D:\\bin")], Limits::default(), &[]);
        assert_eq!(
            job_env(&s, "C:\\Windows"),
            vec![
                ("SystemRoot".to_string(), "C:\\Windows".to_string()),
                ("OZ0_SANDBOX".into(), "tier=0;wall=none".into()),
                ("Path".into(), "D:\\bin".into()),
            ]
        );
    }

    /// Records what it was asked to start; its run answers from a script.
    #[derive(Default)]
    struct Fake {
        started: RefCell<Vec<Launch>>,
        start: RefCell<Option<StartError>>,
        woke: RefCell<Vec<Result<Woke, SysError>>>,
        ended: RefCell<u32>,
    }

    struct FakeRun<'a>(&'a Fake);

    impl Watch for FakeRun<'_> {
        /// Past its script, every wait runs out (a run that never ends).
        fn wait(&mut self, ms: Option<u32>) -> Result<Woke, SysError> {
            let mut w = self.0.woke.borrow_mut();
            if w.is_empty() {
                let ms = ms.expect("a run without end is waited with a bound");
                std::thread::sleep(std::time::Duration::from_millis(ms.min(50).into()));
                return Ok(Woke::TimedOut);
            }
            w.remove(0)
        }
        fn end_all(&mut self) {
            *self.0.ended.borrow_mut() += 1;
        }
        fn active(&mut self) -> Option<u32> {
            Some(0)
        }
    }

    impl<'a> JobOps for &'a Fake {
        type Run = FakeRun<'a>;
        fn start(
            &self,
            l: &Launch,
            _: RunIo,
            _: Option<Cancel>,
        ) -> Result<FakeRun<'a>, StartError> {
            self.started.borrow_mut().push(l.clone());
            match self.start.borrow_mut().take() {
                Some(e) => Err(e),
                None => Ok(FakeRun(self)),
            }
        }
    }

    fn go(f: &Fake, s: &RunSpec) -> Result<Outcome, RunError> {
        run_in_job(&f, "C:\\Windows", s, RunOptions::default())
    }

    #[test]
    fn a_run_starts_its_command_in_its_work_folder_and_ends_as_it_exited() {
        let f = Fake::default();
        f.woke.borrow_mut().push(Ok(Woke::Exited(3)));
        let s = spec(&[], Limits::default(), &[]);
        let o = go(&f, &s).unwrap();
        assert_eq!((o.ended, o.exit_code), (Ended::Exited, 3));
        assert!(o.warnings.is_empty());
        let l = f.started.borrow()[0].clone();
        assert_eq!(l.program, "C:\\Windows\\System32\\cmd.exe");
        assert_eq!(l.args, vec!["/c", "exit 3"]);
        assert_eq!(
            l.cwd,
            PathBuf::from("C:\\Users\\me\\Temp\\oz0-node-work\\job-1-1")
        );
        assert_eq!(
            *f.ended.borrow(),
            1,
            "the job is ended after its first process"
        );
    }

    #[test]
    fn timeout_cancel_and_start_failures_map_to_the_doors_outcome() {
        let timed = spec(
            &[],
            Limits {
                timeout_seconds: Some(1),
                ..Default::default()
            },
            &[],
        );
        // A run that never ends meets its timeout (a second, waited).
        let f = Fake::default();
        let o = go(&f, &timed).unwrap();
        assert_eq!((o.ended, o.exit_code), (Ended::Timeout, 124));
        assert_eq!(*f.ended.borrow(), 1);
        let f = Fake::default();
        f.woke.borrow_mut().push(Ok(Woke::Cancelled));
        let o = go(&f, &spec(&[], Limits::default(), &[])).unwrap();
        assert_eq!(o.ended, Ended::Cancelled);
        // Not found: not executed, 127, as on every platform.
        let f = Fake::default();
        *f.start.borrow_mut() = Some(StartError::NotExecuted {
            reason: "cannot execute x: not found".into(),
            code: 127,
        });
        let o = go(&f, &spec(&[], Limits::default(), &[])).unwrap();
        assert_eq!(o.exit_code, 127);
        assert!(matches!(o.ended, Ended::NotExecuted { .. }));
        // Not placed in its job: refused, never run.
        let f = Fake::default();
        *f.start.borrow_mut() = Some(StartError::Refused("not placed".into()));
        let e = go(&f, &spec(&[], Limits::default(), &[])).unwrap_err();
        assert!(e.to_string().contains("not placed"), "{e}");
        // A failed wait: an error, and the job was ended.
        let f = Fake::default();
        f.woke.borrow_mut().push(Err(SysError {
            code: 6,
            message: "WaitForMultipleObjects failed".into(),
        }));
        let e = go(&f, &spec(&[], Limits::default(), &[])).unwrap_err();
        assert!(
            e.to_string().contains("every process of its job was ended"),
            "{e}"
        );
        assert_eq!(*f.ended.borrow(), 1);
    }

    /// The real door on Windows (under Wine in CI): a process in a job
    /// object, its status, its timeout, and a cancel set from another
    /// thread ending a run that would go on.
    #[cfg(windows)]
    #[test]
    fn on_windows_a_run_exits_times_out_and_is_cancelled_through_the_door() {
        use oz0_core::Sandbox;
        let root = std::env::var("SystemRoot").unwrap_or_else(|_| "C:\\Windows".into());
        let cmd = format!("{root}\\System32\\cmd.exe");
        let ping = format!("{root}\\System32\\ping.exe");
        let work = carry(&std::env::temp_dir()).unwrap();
        let spec = |command: Vec<String>, timeout: Option<u64>| {
            RunSpec::new(RunRequest {
                work: work.clone(),
                data_dir: "/C:/oz0-no-such-data-dir".into(),
                limits: Limits {
                    timeout_seconds: timeout,
                    ..Default::default()
                },
                command,
                ..Default::default()
            })
            .unwrap()
        };
        let quiet = || RunOptions::new(RunIo::quiet(), None);
        let sb = JobObject::new();
        let o = sb
            .run(
                &spec(vec![cmd.clone(), "/c".into(), "exit 3".into()], None),
                quiet(),
            )
            .unwrap();
        assert_eq!((o.ended, o.exit_code), (Ended::Exited, 3));
        let long = vec![ping.clone(), "-n".into(), "60".into(), "127.0.0.1".into()];
        let o = sb.run(&spec(long.clone(), Some(1)), quiet()).unwrap();
        assert_eq!((o.ended, o.exit_code), (Ended::Timeout, 124));
        let event = crate::native::CancelEvent::new().unwrap();
        let cancel = event.cancel().unwrap();
        let o = std::thread::scope(|s| {
            let run = s.spawn(|| {
                sb.run(
                    &spec(long, None),
                    RunOptions::new(RunIo::quiet(), Some(cancel)),
                )
            });
            std::thread::sleep(std::time::Duration::from_millis(500));
            event.set();
            run.join().unwrap()
        })
        .unwrap();
        assert_eq!(o.ended, Ended::Cancelled);
        let o = sb
            .run(&spec(vec!["C:\\no\\such.exe".into()], None), quiet())
            .unwrap();
        assert!(matches!(o.ended, Ended::NotExecuted { .. }), "{o:?}");
    }

    #[test]
    fn what_only_a_wall_enforces_is_refused_before_anything_starts() {
        let limits = Limits {
            memory_mib: Some(64),
            ..Default::default()
        };
        for s in [
            spec(&[], limits, &[]),
            spec(&[], Limits::default(), &["example.com"]),
        ] {
            let f = Fake::default();
            let e = go(&f, &s).unwrap_err();
            assert!(e.to_string().contains("tier 0 has no wall"), "{e}");
            assert!(f.started.borrow().is_empty());
        }
        let f = Fake::default();
        let opts = RunOptions {
            role: Role::Monitor(Default::default()),
            ..Default::default()
        };
        let s = spec(&[], Limits::default(), &[]);
        assert!(run_in_job(&&f, "C:\\Windows", &s, opts).is_err());
        assert!(f.started.borrow().is_empty());
    }
}
