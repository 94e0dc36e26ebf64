//! The command line `CreateProcessW` gets, quoted so that the C runtime's
//! `CommandLineToArgvW` rules give back exactly the run's arguments.

/// Longest command line `CreateProcessW` takes, in UTF-16 units with the NUL.
pub const MAX_COMMAND_LINE_UNITS: usize = 32_767;

/// Why a command could not be written as a Windows command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdLineError {
    /// The program is not a full path.
    #[error("the program {0:?} is not a full Windows path: name it in full (e.g. C:\\Windows\\System32\\cmd.exe), because Windows would search the work directory for a bare name first")]
    ProgramNotAbsolute(String),
    /// The program's path contains a quote.
    #[error("the program path {0:?} contains a double quote, which the first word of a Windows command line cannot carry")]
    ProgramQuote(String),
    /// Too long.
    #[error("the command line is {0} UTF-16 units, over Windows' limit of {MAX_COMMAND_LINE_UNITS}: pass long input through a file")]
    TooLong(usize),
}

/// Quotes one argument (not the program) by the C runtime's rules.
pub fn quote_arg(arg: &str) -> String {
    let plain = !arg.is_empty() && !arg.contains([' ', '\t', '\n', '\u{b}', '"']);
    if plain {
        return arg.to_string();
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    let mut backslashes = 0usize;
    for c in arg.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.extend(std::iter::repeat_n('\\', backslashes * 2 + 1));
                out.push('"');
                backslashes = 0;
            }
            _ => {
                out.extend(std::iter::repeat_n('\\', backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.extend(std::iter::repeat_n('\\', backslashes * 2));
    out.push('"');
    out
}

/// The whole command line: the program (full path, always quoted: the first
/// word is split on quotes only) then each argument quoted.
pub fn command_line(command: &[String]) -> Result<String, CmdLineError> {
    let program = command.first().map(String::as_str).unwrap_or_default();
    if crate::winpath::WinPath::parse(program).is_err() {
        return Err(CmdLineError::ProgramNotAbsolute(program.to_string()));
    }
    if program.contains('"') {
        return Err(CmdLineError::ProgramQuote(program.to_string()));
    }
    let mut line = format!("\"{program}\"");
    for a in &command[1..] {
        line.push(' ');
        line.push_str(&quote_arg(a));
    }
    let units = line.encode_utf16().count() + 1;
    if units > MAX_COMMAND_LINE_UNITS {
        return Err(CmdLineError::TooLong(units));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CommandLineToArgvW`'s rules for arguments after the first, to check
    /// that quoting round-trips.
    fn split(line: &str) -> Vec<String> {
        let mut args = vec![];
        let mut chars = line.chars().peekable();
        loop {
            while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                chars.next();
            }
            if chars.peek().is_none() {
                return args;
            }
            let mut cur = String::new();
            let mut quoted = false;
            let mut backslashes = 0;
            while let Some(&c) = chars.peek() {
                if !quoted && (c == ' ' || c == '\t') {
                    break;
                }
                chars.next();
                match c {
                    '\\' => backslashes += 1,
                    '"' => {
                        cur.extend(std::iter::repeat_n('\\', backslashes / 2));
                        if backslashes % 2 == 1 {
                            cur.push('"');
                        } else if quoted && chars.peek() == Some(&'"') {
                            chars.next();
                            cur.push('"');
                        } else {
                            quoted = !quoted;
                        }
                        backslashes = 0;
                    }
                    _ => {
                        cur.extend(std::iter::repeat_n('\\', backslashes));
                        backslashes = 0;
                        cur.push(c);
                    }
                }
            }
            cur.extend(std::iter::repeat_n('\\', backslashes));
            args.push(cur);
        }
    }

    #[test]
    fn quoting_round_trips() {
        let args = [
            "plain",
            "",
            "two words",
            "a\"b",
            "trailing\\",
            "trailing space\\",
            "\\\\server\\share",
            "\\\"",
            "tab\there",
            "ünïcode",
        ];
        for a in args {
            let q = quote_arg(a);
            assert_eq!(split(&q), vec![a.to_string()], "{a:?} -> {q}");
        }
    }

    #[test]
    fn golden_command_line() {
        let cmd: Vec<String> = [
            "C:\\Windows\\System32\\curl.exe",
            "-sS",
            "https://api.github.com/zen",
            "say \"hi\"",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            command_line(&cmd).unwrap(),
            r#""C:\Windows\System32\curl.exe" -sS https://api.github.com/zen "say \"hi\"""#
        );
    }

    #[test]
    fn refusals() {
        let e = command_line(&["cmd.exe".to_string()]).unwrap_err();
        assert!(e.to_string().contains("search the work directory"));
        let long = vec!["C:\\x.exe".to_string(), "a".repeat(MAX_COMMAND_LINE_UNITS)];
        assert!(matches!(command_line(&long), Err(CmdLineError::TooLong(_))));
    }
}
