//! Whether a sequencer's list (`rebase-merge/git-rebase-todo`,
//! `sequencer/todo`) holds a command git would run on `--continue`, read
//! the way git reads it: a line is split at `\n`; blanks (space, tab) before
//! the command are skipped; the command is `exec` or its short form `x`,
//! followed by a blank, a carriage return or the end of the line.
//!
//! The comment character (`core.commentChar`) is not honoured: a line that
//! git would take as a comment under some setting is still counted, which
//! only ever finds more.

/// Whether `list` holds an `exec` (or `x`) line.
pub fn runs_commands(list: &[u8]) -> bool {
    list.split(|b| *b == b'\n').any(is_exec)
}

fn is_exec(line: &[u8]) -> bool {
    let start = line
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(line.len());
    let line = &line[start..];
    let rest = if let Some(r) = line.strip_prefix(b"exec") {
        r
    } else if let Some(r) = line.strip_prefix(b"x") {
        r
    } else {
        return false;
    };
    matches!(rest.first(), None | Some(b' ' | b'\t' | b'\r' | b'\0'))
}

#[cfg(test)]
mod tests {
    use super::runs_commands;

    #[test]
    fn every_spelling_git_takes() {
        for list in [
            "pick 1 a\nexec make\n",
            "x make",
            "x\tmake",
            "exec\tmake",
            "   \t x make",
            "\texec make",
            "pick 1 a\r\nx\r\n",
            "x",
            "exec",
            "x\0",
        ] {
            assert!(runs_commands(list.as_bytes()), "{list:?}");
        }
    }

    #[test]
    fn what_is_no_command() {
        for list in [
            "pick 1 exec\n",
            "# x make\n",
            "xmake",
            "execute",
            "edit 1 a",
            "",
            "\u{feff}exec make",
            "drop 1 x",
        ] {
            assert!(!runs_commands(list.as_bytes()), "{list:?}");
        }
        assert!(!runs_commands(b"pick 1 \xff\xfe\n"));
        assert!(runs_commands(b"pick 1 \xff\n x \xfe\n"));
    }
}
