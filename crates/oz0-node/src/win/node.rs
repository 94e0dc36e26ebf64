//! `run` and `facts` on Windows: the node daemon.
//!
//! At start the node probes PSEC (with `--sandbox psec` it also runs the
//! self-test, once, and logs each check), writes `<data-dir>\facts.json`,
//! and with `--edge` registers and reports the facts. The edge routes a
//! Windows node at tier 0 whatever it proved; the node polls the tier-0
//! queue and runs its shell jobs one at a time with no wall (the one
//! daemon of every platform, `crate::edge`, through
//! `oz0_windows::tier0::JobObject`), until Ctrl-C.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oz0_core::exit::Exit;
use oz0_core::Wall;
use oz0_edge::client::NodeKey;
use oz0_policy::facts::NodeFacts;

use crate::daemon::{event_loop, fail, log};
use crate::edge::{PlatformLink, SettingsError, Walls};
use crate::flags::DaemonFlags;
use oz0_windows::wall;

use crate::platform::{platform, Platform, Settings};

/// `run` flags.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// auto: probe PSEC and report what it found (tier 0); psec: also run
    /// the self-test of PSEC at start, reporting tier 1 (routed as tier 0)
    /// when every check holds; none: no sandbox, no probe of PSEC's use.
    #[arg(long, value_enum, default_value_t = Sandbox::Auto)]
    pub sandbox: Sandbox,
    #[command(flatten)]
    pub data: crate::flags::DataDirArg,
    #[command(flatten)]
    pub daemon: DaemonFlags,
}

/// `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sandbox {
    /// Probe PSEC and report it; work is tier 0.
    Auto,
    /// No sandbox (tier 0).
    None,
    /// Windows 11's PSEC: self-test it at start.
    Psec,
}

fn edge(a: &RunArgs, data_dir: &Path) -> Result<(Option<crate::edge::Settings>, Walls), String> {
    let read_token = |file: &Path| {
        let text = std::fs::read_to_string(file).map_err(|e| {
            SettingsError::TokenFile(format!("--enrolment-token-file {}: {e}", file.display()))
        })?;
        readable_only_by_me(file, "--enrolment-token-file").map_err(SettingsError::TokenFile)?;
        crate::flags::enrolment_token(&text, file)
            .map_err(|e| SettingsError::TokenFile(e.to_string()))
    };
    // Windows compares paths ignoring case.
    let overlap = |a: &Path, b: &Path| {
        let lower = |p: &Path| PathBuf::from(p.to_string_lossy().to_lowercase());
        let (a, b) = (lower(a), lower(b));
        a.starts_with(&b) || b.starts_with(&a)
    };
    let settings = crate::edge::Settings::from_daemon(
        &a.daemon,
        data_dir,
        PlatformLink {
            read_token: &read_token,
            name: std::env::var("COMPUTERNAME")
                .ok()
                .map(|h| h.trim().to_ascii_lowercase()),
            temp: std::env::temp_dir(),
            overlap: &overlap,
            platform: Platform::NAME,
        },
    )
    .map_err(|e| e.to_string())?;
    let sandbox = platform(Settings {
        data_dir: Some(data_dir.to_path_buf()),
        psec: false,
    })
    .tier0()?;
    Ok((settings, Walls { sandbox }))
}

/// Probes, self-tests when asked (the data directory `data_dir` among what
/// it shows no run reaches), and assembles the facts, logging each step;
/// with PSEC, also the egress route its runs would take.
fn assess(sandbox: Sandbox, data_dir: &Path) -> NodeFacts {
    let walls = platform(Settings {
        data_dir: Some(data_dir.to_path_buf()),
        psec: sandbox == Sandbox::Psec,
    });
    let wall = walls.wall();
    let check = wall.check();
    log(&check.headline);
    log(&check.facts_line);
    log(&wall::availability_line(&check));
    let outcome = if sandbox == Sandbox::Psec {
        wall.self_test(&check, &mut |l| log(&l.text()))
    } else {
        None
    };
    if let (Some(_), Some(r)) = (&outcome, wall.report(outcome.as_ref())) {
        log(&r.tier_line);
        log(&r.fix_line);
    } else if let Some(f) = &check.fix {
        log(f);
    }
    if sandbox == Sandbox::Psec {
        if let Some(r) = wall.route() {
            let named = std::env::var_os(oz0_windows::route::ROUTE_ENV).is_some();
            log(&wall::route_line(&r, named));
        }
    }
    wall::facts(&check, outcome.as_ref(), sandbox == Sandbox::None)
}

/// This user's SID, and who else may read `path` (by name; empty when
/// only this user, SYSTEM and Administrators may).
fn others_reading(path: &Path, what: &str) -> Result<(String, Vec<String>), String> {
    use oz0_windows::{acl, native};
    let user = native::current_user_sid()
        .map_err(|e| format!("cannot read this user's SID to check {what}: {e}"))?;
    let list = native::access_list(path).map_err(|e| {
        format!(
            "{what} {}: cannot read its access list: {e}",
            path.display()
        )
    })?;
    let readers = acl::readers_besides(list.as_deref(), &user);
    Ok((user, readers))
}

/// Refuses a secret's file others can read (Linux refuses its mode), with
/// the fix.
fn readable_only_by_me(path: &Path, flag: &str) -> Result<(), String> {
    let (_, readers) = others_reading(path, flag)?;
    if readers.is_empty() {
        return Ok(());
    }
    let shown = path.display().to_string();
    Err(format!(
        "{flag} {shown} can be read by {}: let only this user read it (`icacls \"{shown}\" /inheritance:r /grant:r \"%USERNAME%:F\"`)",
        readers.join(", ")
    ))
}

/// Makes `path` readable by no one but this user, `SYSTEM` and
/// Administrators (Linux's 0700 and 0600): a folder or file whose access
/// list lets anyone else read it — Everyone, Users, ALL APPLICATION
/// PACKAGES (every container) — is given the node's private list again,
/// with a warning, and read back; when that does not take the node stops,
/// with the fix.
fn private(path: &Path, what: &str) -> Result<(), String> {
    use oz0_windows::{acl, native};
    let (user, readers) = others_reading(path, what)?;
    if readers.is_empty() {
        return Ok(());
    }
    let shown = path.display().to_string();
    let fix = acl::icacls_fix(&shown);
    native::set_access_list(path, &acl::private_sddl(&user)).map_err(|e| {
        format!(
            "{what} {shown} can be read by {}, and the node could not make it private ({e}): run `{fix}`, then start the node again",
            readers.join(", ")
        )
    })?;
    // Read back: the list Windows keeps is what counts.
    let (_, still) = others_reading(path, what)?;
    if !still.is_empty() {
        return Err(format!(
            "{what} {shown} can still be read by {} after the node set its private access list: run `{fix}`, then start the node again",
            still.join(", ")
        ));
    }
    log(&format!(
        "warning: {what} {shown} could be read by {}: made private again (only this user and SYSTEM)",
        readers.join(", ")
    ));
    Ok(())
}

/// Runs the node daemon.
pub fn run(a: RunArgs) -> i32 {
    let data_dir = match a.data.resolve() {
        Ok(d) => d,
        Err(e) => return fail(e, Exit::Usage),
    };
    let (edge, walls) = match edge(&a, &data_dir) {
        Ok(e) => e,
        Err(e) => return fail(e, Exit::Usage),
    };
    if let Err(e) = std::fs::create_dir_all(&data_dir).map_err(|e| {
        format!(
            "cannot create the data directory {}: {e}",
            data_dir.display()
        )
    }) {
        return fail(e, Exit::CheckFailed);
    }
    let key_path = data_dir.join("identity").join("node.key");
    let key = match private(&data_dir, "the data directory")
        .and_then(|_| NodeKey::load_or_create(&key_path).map_err(|e| e.to_string()))
        .and_then(|k| private(&key_path, "the node key").map(|_| k))
    {
        Ok(k) => k,
        Err(e) => return fail(e, Exit::CheckFailed),
    };
    let facts = assess(a.sandbox, &data_dir);
    match crate::facts_file::write(&data_dir, &facts) {
        Ok(p) => log(&format!(
            "facts written to {}: tier proven {}, routed {}",
            p.display(),
            facts.tier_proven,
            facts.tier_routed
        )),
        Err(e) => return fail(e, Exit::CheckFailed),
    }
    event_loop(edge, walls, key, facts, a.daemon.once)
}
