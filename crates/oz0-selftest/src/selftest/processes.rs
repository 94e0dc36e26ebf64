//! The checks of what a run's processes may do: launch (one tree that ends with its command; seccomp on its own), job_limits and fail_closed.

use super::*;

// --- launch -----------------------------------------------------------------

pub(super) fn check_launch(c: &mut Ctx) -> CheckResult {
    let work = c.dir("launch")?;
    let m = marker("launch");
    // The first process writes, starts a long-lived child, and exits.
    let script = format!(
        "echo ok > launched; /oz0/oz0-node sandbox probe --no-syscalls --out bg.json --hold-ms 60000 --tag {m} >/dev/null 2>&1 & \
         i=0; while [ ! -e bg.json ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; exit 0"
    );
    let o = c.launch(
        c.request(&work, vec!["/bin/sh".into(), "-c".into(), script]),
        None,
    );
    let leftover = processes_with(&m);
    kill_all(&m);
    let o = o?;
    if o.exit_code != 0 {
        return Err(format!(
            "the process exited with {} instead of 0",
            o.exit_code
        ));
    }
    match fs::read_to_string(work.join("launched")) {
        Ok(s) if s == "ok\n" => {}
        _ => return Err("the process did not write in its work directory".into()),
    }
    if !work.join("bg.json").exists() {
        return Err("the child process did not start".into());
    }
    if !leftover.is_empty() {
        return Err(format!(
            "a process it started outlived it (pids {leftover:?})"
        ));
    }
    let seccomp = seccomp_alone(c)?;
    Ok(format!(
        "wrote its work directory; the process it started ended with it; {seccomp}"
    ))
}

/// The seccomp layer on its own: the probe tries the system calls the
/// filter refuses, once in a run with the filter and once in the same run
/// without it. A call refused with the filter that this kernel allows
/// without it is refused by the filter alone; at least two such calls
/// prove the layer, whatever the namespaces and capabilities refuse too.
fn seccomp_alone(c: &mut Ctx) -> CheckResult {
    let work = c.dir("seccomp")?;
    let (with, without) = (work.join("with.json"), work.join("without.json"));
    let probe = |out: &Path| -> Vec<String> {
        let mut v = probe_cmd(out, &[]);
        v.retain(|a| a != "--no-syscalls");
        v
    };
    c.launch(c.request(&work, probe(&with)), None)?;
    c.launch_without(c.request(&work, probe(&without)), Fault::NoSeccomp)?;
    let (a, b) = (read_report(&with)?, read_report(&without)?);
    if a["seccomp"] != "2" {
        return Err(format!(
            "seccomp layer: no filter is in place in the run (Seccomp: {} in /proc/self/status)",
            a["seccomp"]
        ));
    }
    let calls = a["syscalls"]
        .as_object()
        .ok_or("the probe reported no system calls")?;
    let mut proven: Vec<&str> = calls
        .iter()
        .filter(|(k, v)| {
            v.as_str().is_some_and(|e| e.starts_with('E')) && b["syscalls"][k.as_str()] == "ok"
        })
        .map(|(k, _)| k.as_str())
        .collect();
    proven.sort_unstable();
    if proven.len() < 2 {
        return Err(format!(
            "seccomp layer: the filter refused {} call(s) this kernel allows here without it ({}); it refuses at least two on a machine it works on",
            proven.len(),
            proven.join(", ")
        ));
    }
    Ok(format!(
        "seccomp alone refuses {}, which this kernel allows without the filter",
        proven.join(", ")
    ))
}

// --- job_limits ---------------------------------------------------------------

pub(super) fn check_job_limits(c: &mut Ctx) -> CheckResult {
    let Some(mode) = c.cfg.job_mode.clone() else {
        return Err(format!(
            "no job limits on this machine: {}",
            c.cfg
                .job_unavailable
                .clone()
                .unwrap_or_else(|| "no cgroup mode".into())
        ));
    };
    let faulty = c.cfg.fault == Some(Property::JobLimits);
    let limits = |l: Limits| if faulty { Limits::default() } else { l };
    // Processes: 20 children under a limit of 8. The probe counts the
    // children the system let it start (no race with their start-up).
    let work = c.dir("procs")?;
    let out = work.join("r.json");
    let mut req = c.request(&work, probe_cmd(&out, &["--spawn", "20"]));
    req.limits = limits(Limits {
        processes: Some(8),
        ..Default::default()
    });
    c.launch(req, None)?;
    let r = read_report(&out)?;
    let started = r["spawned"]
        .as_u64()
        .ok_or("the probe did not report its children")?;
    if started == 0 {
        return Err("no process started under the process limit".into());
    }
    if started > 6 {
        return Err(format!("{started} of 20 processes started under a limit of 8 (at most 6 may: the limit counts bubblewrap's two and the starting process)"));
    }
    // Memory: 512 MiB under a limit of 256 MiB.
    let work = c.dir("mem")?;
    let out = work.join("r.json");
    let mut req = c.request(&work, probe_cmd(&out, &["--alloc", "512"]));
    req.limits = limits(Limits {
        memory_mib: Some(256),
        ..Default::default()
    });
    let o = c.launch(req, None)?;
    let r = read_report(&out).ok();
    if r.as_ref().is_some_and(|r| r["alloc"] == "ok") {
        return Err("512 MiB were allocated and touched under a limit of 256 MiB".into());
    }
    let oom = o.limit_hit == Some(oz0_core::LimitHit::Memory);
    // Closing the job kills its processes: its folders are gone.
    let mode_name = mode.name();
    Ok(format!(
        "{started} of 20 processes started under a limit of 8 (pids.max counts bubblewrap's 2 and the starting process); 512 MiB under 256 MiB {} (exit {}); {mode_name}",
        if oom { "killed by the memory limit" } else { "refused" },
        o.exit_code
    ))
}

// --- fail_closed --------------------------------------------------------------

pub(super) fn check_fail_closed(c: &mut Ctx) -> CheckResult {
    if c.cfg.job_mode.is_none() {
        return Err(
            "no job limits on this machine, so placement cannot be shown to fail closed".into(),
        );
    }
    // The run's job made impossible to join (the fault), unless this
    // property's own fault is injected: then the job is a working one and
    // the check must see that the command ran.
    let fault = (c.cfg.fault != Some(Property::FailClosed)).then_some(Fault::Unconfinable);
    let work = c.dir("failclosed")?;
    let mut req = c.request(
        &work,
        vec!["/bin/sh".into(), "-c".into(), "echo ran > ran".into()],
    );
    req.limits = Limits {
        processes: Some(16),
        ..Default::default()
    };
    let r = c.launch_with(req, None, fault);
    if work.join("ran").exists() {
        return Err("a process whose job could not be made ran anyway".into());
    }
    match r {
        Err(e) if e.contains("job") => Ok(
            "a run whose job (cgroup) could not be made was refused; its command never ran".into(),
        ),
        Err(e) => Err(format!("refused, but not for its job: {e}")),
        Ok(_) => Err("a run whose job could not be made was reported as started".into()),
    }
}
