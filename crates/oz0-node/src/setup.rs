//! `setup cgroups`: the one-time machine setup that needs root, and its
//! removal (`oz0_limits` does the work; this prints what it did).

use oz0_core::exit::Exit;

/// `setup cgroups --remove`.
pub fn remove_cgroups(user: &str, json: bool) -> i32 {
    match oz0_limits::remove_delegation(user) {
        Ok(r) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("report serialises")
                );
            } else if r.removed.is_empty() {
                println!(
                    "Nothing to remove: no cgroup folder of {} was found",
                    r.user
                );
            } else {
                println!("Removed {}'s cgroup folders:", r.user);
                for p in &r.removed {
                    println!("  {}", p.display());
                }
            }
            if !json {
                for k in &r.kept {
                    println!("Kept {} ({})", k.path.display(), k.why);
                }
            }
            Exit::Ok.code()
        }
        Err(e) => {
            eprintln!("oz0-node: setup cgroups --remove: {e}");
            Exit::CheckFailed.code()
        }
    }
}

/// `setup cgroups`.
pub fn setup_cgroups(user: &str, mode: &str, json: bool) -> i32 {
    let mode = match mode {
        "auto" => oz0_limits::SetupMode::Auto,
        "v1" => oz0_limits::SetupMode::V1,
        "v2" => oz0_limits::SetupMode::V2,
        other => {
            eprintln!("oz0-node: --mode {other:?}: use auto, v1 or v2");
            return Exit::Usage.code();
        }
    };
    match oz0_limits::setup_delegation(user, mode) {
        Ok(r) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("report serialises")
                );
            } else {
                println!(
                    "Delegated cgroup {:?} to {} (uid {}): {}",
                    r.version,
                    r.user,
                    r.uid,
                    r.delegated
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                println!("Controllers: {}", r.controllers.join(", "));
                if !r.next.is_empty() {
                    println!("Next: {}", r.next);
                }
            }
            Exit::Ok.code()
        }
        Err(e) => {
            eprintln!("oz0-node: setup cgroups: {e}");
            Exit::CheckFailed.code()
        }
    }
}
