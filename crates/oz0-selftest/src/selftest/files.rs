//! The checks of what a run may see and write: files (the mounts and Landlock, each on its own) and protected_paths.

use super::*;
use oz0_core::selftest::parts::{judge_protected, prepare_git, Files, PROTECTED_SCRIPT};

// --- files ------------------------------------------------------------------

pub(super) fn check_files(c: &mut Ctx) -> CheckResult {
    let work = c.dir("files")?;
    let outside = c.dir("outside")?;
    let out = work.join("r.json");
    let f = Files::new(
        &outside.join("written"),
        &c.standin,
        c.cfg.data_dir.as_deref(),
    );
    let mut args = vec!["--write".to_string(), "/etc/oz0-selftest".to_string()];
    args.extend(f.probe_args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = c.launch(c.request(&work, probe_cmd(&out, &args)), None)?;
    let r = read_report(&out)?;
    let abi = oz0_sys::probe::landlock_abi();
    let enforced = o
        .report
        .get("enforced")
        .and_then(|e| e["landlock"]["enforced"].as_str());
    match enforced {
        _ if abi == 0 => {}
        Some("full" | "partial") => {}
        other => {
            return Err(format!(
                "landlock layer: the run's Landlock is {} though this kernel has ABI {abi}",
                other.unwrap_or("missing")
            ))
        }
    }
    if r["write"]["/etc/oz0-selftest"] == "ok" {
        return Err("a write to /etc succeeded".into());
    }
    let first = format!("writes outside refused; {}", f.judge(&r, "mount layer: ")?);
    // The mount layer on its own: the same, in a run without Landlock.
    let out = work.join("mounts-alone.json");
    c.launch_without(c.request(&work, probe_cmd(&out, &args)), Fault::NoLandlock)?;
    let r = read_report(&out)?;
    let seen: Vec<&str> = std::iter::once(("write", "/etc/oz0-selftest"))
        .chain(f.targets())
        .filter(|(section, key)| r[*section][*key] == "ok")
        .map(|(_, key)| key)
        .collect();
    if !seen.is_empty() || Path::new(&f.outside_file).exists() {
        return Err(format!(
            "mount layer: without Landlock, the run reached {}: the mounts alone do not hide what they must",
            seen.join(", ")
        ));
    }
    let landlock = landlock_alone(c)?;
    Ok(format!(
        "{first}; each layer alone: with Landlock off the mounts still hide all of it; {landlock}"
    ))
}

/// The Landlock layer on its own: the stand-in data directory is bound
/// into a run, writable, at a path no Landlock rule covers (the mount
/// layer deliberately opened); Landlock alone must refuse listing it,
/// reading its key and writing in it.
fn landlock_alone(c: &mut Ctx) -> CheckResult {
    let abi = oz0_sys::probe::landlock_abi();
    if abi == 0 {
        return Ok("Landlock: not on this kernel, so the mount layer alone holds the files (no second layer)".into());
    }
    let work = c.dir("landlock")?;
    let out = work.join("r.json");
    let inside = "/oz0/exposed";
    let key = format!("{inside}/identity/node.key");
    let planted = format!("{inside}/planted");
    let req = c.request(
        &work,
        probe_cmd(
            &out,
            &["--list", inside, "--read", &key, "--write", &planted],
        ),
    );
    let fault = Fault::ExposeAt {
        src: c.standin.display().to_string(),
        dest: inside.to_string(),
    };
    c.launch_without(req, fault)?;
    let r = read_report(&out)?;
    let reached: Vec<&str> = [
        ("list", inside),
        ("read", key.as_str()),
        ("write", planted.as_str()),
    ]
    .into_iter()
    .filter(|(section, k)| r[*section][*k] != "EACCES")
    .map(|(_, k)| k)
    .collect();
    if !reached.is_empty() || c.standin.join("planted").exists() {
        return Err(format!(
            "landlock layer: with the stand-in data directory mounted in the run, Landlock did not refuse {} (ABI {abi}): it does not hold on its own",
            reached.join(", ")
        ));
    }
    Ok(format!(
        "with it mounted writable, Landlock (ABI {abi}) alone refuses listing, reading and writing it"
    ))
}

// --- protected_paths ----------------------------------------------------------

pub(super) fn check_protected(c: &mut Ctx) -> CheckResult {
    let work = c.dir("protected")?;
    prepare_git(&work)?;
    c.launch(
        c.request(
            &work,
            vec!["/bin/sh".into(), "-c".into(), PROTECTED_SCRIPT.into()],
        ),
        None,
    )?;
    judge_protected(&work)
}
