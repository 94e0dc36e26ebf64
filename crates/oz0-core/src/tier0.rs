//! Tier 0's one rule, for every platform's sandbox without a wall (Linux's
//! and macOS' `Plain`, Windows' job object, the daemon's tier-0 jobs):
//! what only a wall can enforce is refused, never run without it.

use crate::Role;
use oz0_policy::RunSpec;

/// What `spec` asks for that no one enforces without a wall, by the names
/// a job's payload uses: `egress`, `memory`, `processes`, `cpu_seconds`,
/// `tmp_size` (a private `/tmp` of that size). Empty when nothing.
fn asks(spec: &RunSpec) -> Vec<&'static str> {
    let l = &spec.limits;
    [
        (spec.egress.is_enabled(), "egress"),
        (l.memory_mib.is_some(), "memory"),
        (l.processes.is_some(), "processes"),
        (l.cpu_seconds.is_some(), "cpu_seconds"),
        (l.tmp_mib.is_some(), "tmp_size"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect()
}

/// Why tier 0 refuses to run `spec` as `role`; None when it runs it.
pub fn refusal(spec: &RunSpec, role: &Role) -> Option<String> {
    if role != &Role::Command {
        return Some(format!(
            "tier 0 has no wall, and {} runs only inside one",
            role.what()
        ));
    }
    let asks = asks(spec);
    if asks.is_empty() {
        return None;
    }
    Some(format!(
        "tier 0 has no wall: it enforces neither job limits nor an egress allowlist, so a run that asks for them ({}) is refused",
        asks.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oz0_policy::{Limits, RunRequest};

    fn spec(allow: &[&str], limits: Limits) -> RunSpec {
        RunSpec::new(RunRequest {
            work: "/tmp/w".into(),
            data_dir: "/tmp/d".into(),
            command: vec!["/bin/true".into()],
            allow: allow.iter().map(|s| s.to_string()).collect(),
            limits,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn what_only_a_wall_enforces_is_refused_by_name() {
        assert_eq!(refusal(&spec(&[], Limits::default()), &Role::Command), None);
        // A wall time is the supervisor's: tier 0 keeps it.
        let timed = Limits {
            timeout_seconds: Some(5),
            ..Default::default()
        };
        assert_eq!(refusal(&spec(&[], timed), &Role::Command), None);
        let all = Limits {
            memory_mib: Some(64),
            processes: Some(8),
            cpu_seconds: Some(3),
            tmp_mib: Some(16),
            ..Default::default()
        };
        let why = refusal(&spec(&["example.com"], all), &Role::Command).unwrap();
        assert!(
            why.starts_with("tier 0 has no wall: ")
                && why.ends_with("(egress, memory, processes, cpu_seconds, tmp_size) is refused"),
            "{why}"
        );
        let tmp = Limits {
            tmp_mib: Some(16),
            ..Default::default()
        };
        assert!(refusal(&spec(&[], tmp), &Role::Command)
            .unwrap()
            .contains("(tmp_size)"));
        let m = refusal(
            &spec(&[], Limits::default()),
            &Role::Monitor(Default::default()),
        );
        assert!(m.unwrap().starts_with("tier 0 has no wall, and "));
    }
}
