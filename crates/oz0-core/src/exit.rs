//! Exit statuses: part of the API, documented in the README. Defined here
//! once; the stage inside a sandbox, the launcher and the command line use
//! these.

/// The statuses `oz0-node` exits with (besides a command's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Exit {
    /// Success (or the command's own 0).
    Ok = 0,
    /// A check failed (`sandbox check`: the tier is lower than asked).
    CheckFailed = 1,
    /// The command line was wrong (also clap's own usage errors).
    Usage = 2,
    /// The command ran, but the look after it found what host git would
    /// run or follow and could not rename it aside: it is left in place,
    /// named on stderr (the command's own status is in the status
    /// document's `command_exit_code`).
    GitLeftInPlace = 122,
    /// The run ended, but its `--json-status` document could not be
    /// written (the run may have made its folder unwritable): any document
    /// at that path is not this run's, and the command's own status would
    /// tell nothing of it.
    StatusUnwritten = 123,
    /// `--timeout` was reached; the run was killed (as `timeout(1)` says).
    Timeout = 124,
    /// The sandbox refused the run or could not start it: the command never
    /// ran. Also a VM that could not run its server.
    Sandbox = 125,
    /// The command was found but could not be executed.
    NotExecutable = 126,
    /// The command was not found inside the sandbox.
    NotFound = 127,
}

impl Exit {
    /// The numeric status.
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// The status of a command that could not be executed, as a shell reports
/// it: 127 when it was not found, else 126.
pub fn exec_failure_code(e: &std::io::Error) -> i32 {
    if e.kind() == std::io::ErrorKind::NotFound {
        Exit::NotFound.code()
    } else {
        Exit::NotExecutable.code()
    }
}

/// A finished process's status as a shell reports it: its exit code, or
/// 128+N when signal N ended it.
#[cfg(unix)]
pub fn status_code(status: std::process::ExitStatus) -> i32 {
    status.code().unwrap_or_else(|| {
        128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_the_documented_numbers() {
        let documented = [
            (Exit::Ok, 0),
            (Exit::CheckFailed, 1),
            (Exit::Usage, 2),
            (Exit::GitLeftInPlace, 122),
            (Exit::StatusUnwritten, 123),
            (Exit::Timeout, 124),
            (Exit::Sandbox, 125),
            (Exit::NotExecutable, 126),
            (Exit::NotFound, 127),
        ];
        for (e, n) in documented {
            assert_eq!(e.code(), n, "{e:?}");
        }
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(exec_failure_code(&missing), 127);
        assert_eq!(exec_failure_code(&denied), 126);
    }

    #[cfg(unix)]
    #[test]
    fn a_signal_is_128_plus_its_number() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status_code(std::process::ExitStatus::from_raw(9)), 137);
        assert_eq!(status_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
    }
}
