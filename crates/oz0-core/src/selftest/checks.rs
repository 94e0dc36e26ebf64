//! The eight checks (see the parent module).

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Cancel, Ended, Fault, RunIo, RunOptions};
use oz0_policy::facts::Property;
use oz0_policy::{EnvVar, Limits, RunSpec};

use super::parts::{judge_environment, judge_protected, prepare_git, Egress, Files, Server, GIVEN};
use super::{read_report, CheckResult, Ctx, Failed};

/// Whether a probe holding in a run is still alive, looked at after the
/// run ended: a process is witnessed by its beat file, never by a pid,
/// since a run's pids may not be the host's. A probe that could lock its
/// beat file says so in it (`locked …`) and holds the lock while it lives:
/// the lock is free the moment it dies. Else it rewrites the file every
/// 50 ms while alive, and a file that changes is a process alive.
fn beating(beat: &Path) -> bool {
    #[cfg(unix)]
    if fs::read(beat).is_ok_and(|b| b.starts_with(b"locked")) {
        let Ok(f) = fs::File::open(beat) else {
            return false;
        };
        // A dying process's lock goes with its last descriptor; a killed
        // run's processes are gone when it returns, a Mac's within moments,
        // a loaded or emulated machine's within seconds (the wait costs
        // nothing when the lock is free).
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return false,
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => return true,
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = fs::read(beat).ok();
    std::thread::sleep(Duration::from_millis(300));
    before.is_some() && fs::read(beat).ok() != before
}

/// Waits up to thirty seconds for every file of `paths` to exist (a
/// loaded or emulated machine starts processes slowly; the wait ends the
/// moment they are there).
fn wait_for(paths: &[&Path]) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if paths.iter().all(|p| p.exists()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// A cancel handle for a run, and what fires it (the platform's, from the
/// configuration).
fn cancel_pair(c: &Ctx) -> Result<(Cancel, super::Fire), Failed> {
    (c.config().cancels)().map_err(|e| format!("cannot make a cancel channel: {e}").into())
}

// --- launch -----------------------------------------------------------------

/// The probe's arguments that start, in the background, a probe that holds
/// and beats in `bg.beat` and starts one more in a process group of its
/// own that beats in `detached.json.beat` (see [`held_beats`]).
const LEAVE_PAIR: &str = "--leave-pair";

/// The two heartbeats of [`LEAVE_PAIR`]'s processes in `work`.
fn held_beats(work: &Path) -> [std::path::PathBuf; 2] {
    [work.join("bg.beat"), work.join("detached.json.beat")]
}

/// What the probe's `--write` puts in a file.
const WRITTEN: &str = "oz0-probe\n";

pub(super) fn launch(c: &mut Ctx) -> CheckResult {
    let work = c.dir("launch")?;
    // The first process writes, starts a child in the background (which
    // starts one more in a process group of its own), waits until both
    // beat, and exits.
    let out = work.join("launch.json");
    let o = c.launch(
        c.request(
            &work,
            c.probe_cmd(&out, &["--write", "launched", LEAVE_PAIR]),
        ),
        None,
    )?;
    if o.exit_code != 0 {
        return Err(format!("the process exited with {} instead of 0", o.exit_code).into());
    }
    match fs::read_to_string(work.join("launched")) {
        Ok(s) if s == WRITTEN => {}
        _ => return Err("the process did not write in its work directory".into()),
    }
    let beats = held_beats(&work);
    if !beats.iter().all(|b| b.exists()) {
        return Err(
            "the processes it started did not run (the probe could not start in the sandbox)"
                .into(),
        );
    }
    let left: Vec<&str> = [
        ("its child", &beats[0]),
        ("the one in a process group of its own", &beats[1]),
    ]
    .into_iter()
    .filter(|(_, b)| beating(b))
    .map(|(what, _)| what)
    .collect();
    if !left.is_empty() {
        return Err(format!("processes it started outlived it ({})", left.join(" and ")).into());
    }
    Ok("wrote its work directory; the processes it started ended with it, one that had left for a process group of its own too".into())
}

// --- files ------------------------------------------------------------------

pub(super) fn files(c: &mut Ctx) -> CheckResult {
    let work = c.dir("files")?;
    let outside = c.dir("outside")?;
    let out = work.join("r.json");
    let f = Files::new(
        &outside.join("written"),
        c.standin(),
        c.config().data_dir.as_deref(),
    );
    let args = f.probe_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    c.launch(c.request(&work, c.probe_cmd(&out, &args)), None)?;
    f.judge(&read_report(&out)?, c.config().files_layer)
        .map(|data| format!("a write outside refused; {data}"))
}

// --- egress -----------------------------------------------------------------

pub(super) fn egress(c: &mut Ctx) -> CheckResult {
    let e = Egress::start()?;
    let work = c.dir("egress")?;
    let out = work.join("r.json");
    let args = e.probe_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut req = c.request(&work, c.probe_cmd(&out, &args));
    req.allow = vec![e.allow()];
    req.forward = vec![e.forwarded.port];
    c.launch(req, None)?;
    e.judge(&read_report(&out)?)
}

// --- ingress ----------------------------------------------------------------

pub(super) fn ingress(c: &mut Ctx) -> CheckResult {
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let work = c.dir("ingress")?;
    let out = work.join("r.json");
    let ps = port.to_string();
    let req = c.request(
        &work,
        c.probe_cmd(&out, &["--listen", &ps, "--hold-ms", "20000"]),
    );
    let (cancel, fire) = cancel_pair(c)?;
    let c = &*c;
    let (reached, run) = std::thread::scope(|s| {
        let h = s.spawn(|| c.launch(req, Some(cancel)));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !out.exists() && Instant::now() < deadline && !h.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let reached =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
                .is_ok();
        fire();
        let run = h
            .join()
            .unwrap_or_else(|_| Err("the listening run panicked".into()));
        (reached, run)
    });
    let o = run?;
    let r = read_report(&out)?;
    if reached {
        return Err(
            format!("the host reached a listener inside the sandbox on 127.0.0.1:{port}").into(),
        );
    }
    if o.ended != Ended::Cancelled {
        return Err("the listening run did not stay up for the check".into());
    }
    if r["listen"] == "ok" {
        Ok(format!(
            "a process in the sandbox listened on 127.0.0.1:{port}; the host could not reach it"
        ))
    } else {
        Ok(format!(
            "the sandbox refused a process in it a listener on 127.0.0.1:{port} ({}); the host reached nothing there",
            r["listen"].as_str().unwrap_or("refused")
        ))
    }
}

// --- job_limits ---------------------------------------------------------------

pub(super) fn job_limits(c: &mut Ctx) -> CheckResult {
    // Three runs, at once (they are independent, and each waits mostly on
    // the kernel): one closed while it holds a child in its group and one
    // in a group of its own; one of 20 children under a limit of 8; one
    // that touches 64 MiB under a limit of 32 MiB. Small, so that the
    // proof costs few page faults (each 4 KiB page is one): the limit is
    // what is shown, not its size.
    let close_work = c.dir("close")?;
    let procs_work = c.dir("procs")?;
    let mem_work = c.dir("mem")?;
    let beats = held_beats(&close_work);
    let (cancel, fire) = cancel_pair(c)?;
    // The first process holds too, until the run is closed.
    let close_req = c.request(
        &close_work,
        c.probe_cmd(
            &close_work.join("close.json"),
            &[LEAVE_PAIR, "--hold-ms", "60000"],
        ),
    );
    // This property's fault: the runs go without their limits.
    let faulted = c.faulted(Property::JobLimits);
    let limited = |l: Limits| if faulted { Limits::default() } else { l };
    let procs_out = procs_work.join("r.json");
    let mut procs_req = c.request(&procs_work, c.probe_cmd(&procs_out, &["--spawn", "20"]));
    procs_req.limits = limited(Limits {
        processes: Some(8),
        ..Default::default()
    });
    let mem_out = mem_work.join("r.json");
    let mut mem_req = c.request(&mem_work, c.probe_cmd(&mem_out, &["--alloc", "64"]));
    mem_req.limits = limited(Limits {
        memory_mib: Some(32),
        ..Default::default()
    });
    let c2 = &*c;
    let panicked = |_| Err(Failed::from("the run panicked"));
    let (closing, procs, mem) = std::thread::scope(|s| {
        let closing = s.spawn(|| c2.launch(close_req, Some(cancel)));
        let procs = s.spawn(|| c2.launch(procs_req, None));
        let mem = s.spawn(|| c2.launch(mem_req, None));
        let started = wait_for(&[&beats[0], &beats[1]]);
        fire();
        (
            closing
                .join()
                .unwrap_or_else(panicked)
                .map(|o| (o, started)),
            procs.join().unwrap_or_else(panicked),
            mem.join().unwrap_or_else(panicked),
        )
    });
    let (o, started) = closing?;
    if !started {
        return Err("the run's processes did not start".into());
    }
    if o.ended != Ended::Cancelled {
        return Err("the run ended before it was closed".into());
    }
    if beats.iter().any(|b| beating(b)) {
        return Err("closing the run left its processes running".into());
    }
    let closed = "closing the run killed its processes, one in a process group of its own";
    // Processes: 20 children under a limit of 8.
    let o = procs
        .map_err(|e| format!("{closed}; but a run limited to 8 processes was refused: {e}"))?;
    let r = read_report(&procs_out)?;
    let started = r["spawned"]
        .as_u64()
        .ok_or("the probe did not report its children")?;
    if started == 0 {
        return Err(format!(
            "{closed}; but no process started under the process limit (exit {})",
            o.exit_code
        )
        .into());
    }
    if started > 6 {
        return Err(format!(
            "{closed}; but {started} of 20 processes started under a limit of 8 (at most 6 may)"
        )
        .into());
    }
    // Memory: 64 MiB under a limit of 32 MiB.
    let o = mem.map_err(|e| format!("{closed}; but a run limited to 32 MiB was refused: {e}"))?;
    if read_report(&mem_out).is_ok_and(|r| r["alloc"] == "ok") {
        return Err(format!(
            "{closed}; but 64 MiB were allocated and touched under a limit of 32 MiB"
        )
        .into());
    }
    // The witness said it began to allocate: the limit stopped a run that
    // had started, not one that never could.
    if !mem_work.join("r.json.alloc").exists() {
        return Err(format!(
            "{closed}; but the run limited to 32 MiB never began to allocate (exit {}): its memory limit was not shown",
            o.exit_code
        )
        .into());
    }
    Ok(format!(
        "{closed}; {started} of 20 processes started under a limit of 8; 64 MiB under 32 MiB refused (exit {})",
        o.exit_code
    ))
}

// --- fail_closed --------------------------------------------------------------

pub(super) fn fail_closed(c: &mut Ctx) -> CheckResult {
    let work = c.dir("failclosed")?;
    let req = c.request(
        &work,
        c.probe_cmd(&work.join("ran.json"), &["--write", "ran"]),
    );
    let spec = RunSpec::new(req).map_err(|e| format!("self-test spec refused: {e}"))?;
    // What the wall says of the confinement it cannot apply is expected:
    // not on the check's output.
    let io = RunIo {
        stdin: crate::Stdio::Null,
        stdout: crate::Stdio::Null,
        stderr: crate::Stdio::Null,
    };
    // This property's fault: a run the wall can confine after all.
    let fault = (!c.faulted(Property::FailClosed)).then_some(Fault::Unconfinable);
    let r = c.config().runs.run(
        &spec,
        RunOptions {
            io,
            fault,
            ..RunOptions::default()
        },
    );
    if work.join("ran").exists() {
        return Err("a process whose sandbox could not be applied ran anyway".into());
    }
    Ok(match r {
        Err(e) => format!(
            "a run whose sandbox could not be applied was refused ({e}); its command never ran"
        ),
        Ok(o) => format!(
            "a run whose sandbox could not be applied ended with {} and its command never ran",
            o.exit_code
        ),
    })
}

// --- protected_paths ----------------------------------------------------------

pub(super) fn protected_paths(c: &mut Ctx) -> CheckResult {
    let work = c.dir("protected")?;
    prepare_git(&work)?;
    let out = work.join("protected.json");
    c.launch(c.request(&work, c.probe_cmd(&out, &["--try-git"])), None)?;
    judge_protected(&work)
}

// --- environment --------------------------------------------------------------

pub(super) fn environment(c: &mut Ctx) -> CheckResult {
    let server = Server::start()?;
    let work = c.dir("env")?;
    let out = work.join("r.json");
    let a = format!("127.0.0.1:{}", server.port);
    let ua = format!("http://{a}/");
    let mut req = c.request(&work, c.probe_cmd(&out, &["--env", "--proxy-get", &ua]));
    req.allow = vec![a];
    req.env = vec![EnvVar::new(GIVEN.0, GIVEN.1).map_err(|e| e.to_string())?];
    c.launch(req, None)?;
    judge_environment(&read_report(&out)?, &ua, c.config().env_adds)
}
