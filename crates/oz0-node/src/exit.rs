//! Exit statuses: part of the API, documented in the README.

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
    /// `--timeout` was reached; the run was killed (set by the launcher,
    /// `oz0_linux::launch::EXIT_TIMEOUT`).
    #[allow(dead_code)]
    Timeout = 124,
    /// The sandbox refused the run or could not start it: the command never ran.
    Sandbox = 125,
    /// The command was found but could not be executed (set by the
    /// in-sandbox stage, `oz0_linux::stage`).
    #[allow(dead_code)]
    NotExecutable = 126,
    /// The command was not found inside the sandbox (set by the stage).
    #[allow(dead_code)]
    NotFound = 127,
}

impl Exit {
    /// The numeric status.
    pub fn code(self) -> i32 {
        self as i32
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn statuses_match_the_sandbox_layers() {
        assert_eq!(Exit::Sandbox.code(), oz0_linux::stage::STAGE_FAILED);
        assert_eq!(Exit::Timeout.code(), oz0_linux::launch::EXIT_TIMEOUT);
    }
}
