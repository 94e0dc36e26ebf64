//! Reading a git configuration file a run may have written, without git,
//! and telling which of its settings make host git run a program or read
//! elsewhere.
//!
//! The node never runs git on what a run left (git would act on it: that is
//! the danger). It reads the names of the settings itself (section,
//! subsection, key; values are never needed) and holds them against the
//! settings that `git init`, `git clone`, `git remote` and `git branch`
//! write, which run nothing ([`is_inert`]). Anything else — `core.fsmonitor`,
//! `core.hooksPath`, `core.sshCommand`, filters, `diff.*.textconv`,
//! `include.path`, `alias.*`, `remote.*.uploadpack`… — is a finding, as is a
//! file this reader cannot make sense of.

/// One setting: `section`, `subsection` (as written), `key` (both lowered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The section, lowercase.
    pub section: String,
    /// The subsection, as written (`[remote "origin"]`), if any.
    pub subsection: Option<String>,
    /// The key, lowercase.
    pub key: String,
    /// The value as git reads it (quotes and escapes undone, a line
    /// continued where it ends in a backslash, blanks outside quotes at
    /// either end dropped); `None` for a key written without `=` (git's
    /// boolean true).
    pub value: Option<String>,
}

impl Setting {
    /// `section.key`, or `section.<subsection>.key` with the subsection
    /// shown as `*` (a subsection is the run's text: never printed).
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(_) => format!("{}.*.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }
}

/// Why a configuration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct ConfigError {
    /// The line (from 1).
    pub line: usize,
    /// What is wrong.
    pub what: &'static str,
}

/// The settings of a git configuration file, in order.
pub fn settings(text: &str) -> Result<Vec<Setting>, ConfigError> {
    let mut out = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    let lines: Vec<&str> = text.split('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let n = i + 1;
        let err = |what| ConfigError { line: n, what };
        let mut rest = lines[i].trim_start_matches([' ', '\t', '\r']);
        i += 1;
        if rest.starts_with('[') {
            let (s, after) = header(rest).ok_or(err("a section header git would not read"))?;
            section = Some(s);
            rest = after.trim_start_matches([' ', '\t', '\r']);
        }
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let key_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        let key = &rest[..key_len];
        if key.is_empty() || !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return Err(err("a line that is no setting"));
        }
        let Some((sec, sub)) = &section else {
            return Err(err("a setting before any section"));
        };
        let mut setting = Setting {
            section: sec.clone(),
            subsection: sub.clone(),
            key: key.to_ascii_lowercase(),
            value: None,
        };
        let after = rest[key_len..].trim_start_matches([' ', '\t', '\r']);
        if after.is_empty() || after.starts_with('#') || after.starts_with(';') {
            out.push(setting);
            continue;
        }
        let value = after
            .strip_prefix('=')
            .ok_or(err("a key followed by something other than ="))?;
        // The value, to its end: quotes, escapes, and a backslash at the
        // end of a line continuing it on the next. `kept` is how much of
        // `text` is not trailing blanks outside quotes.
        let mut v = value.chars().peekable();
        let mut quoted = false;
        let mut text = String::new();
        let mut kept = 0;
        loop {
            match v.next() {
                None => {
                    if quoted {
                        return Err(err("a quote left open"));
                    }
                    break;
                }
                Some('"') => {
                    quoted = !quoted;
                    kept = text.len();
                }
                Some('\\') => {
                    match v.next() {
                        Some(c @ ('"' | '\\')) => text.push(c),
                        Some('n') => text.push('\n'),
                        Some('t') => text.push('\t'),
                        Some('b') => text.push('\u{8}'),
                        // Only a line break may follow at the end of a line.
                        Some('\r') if v.peek().is_none() => {}
                        None | Some('\r') => {
                            let next = lines.get(i).ok_or(err("a value continued past the end"))?;
                            i += 1;
                            v = next.chars().peekable();
                        }
                        Some(_) => return Err(err("an escape git does not know")),
                    }
                    kept = text.len();
                }
                Some('#' | ';') if !quoted => break,
                Some(c @ (' ' | '\t' | '\r')) if !quoted => {
                    // Blanks before the value are not part of it.
                    if !text.is_empty() {
                        text.push(c);
                    }
                }
                Some(c) => {
                    text.push(c);
                    kept = text.len();
                }
            }
        }
        text.truncate(kept);
        setting.value = Some(text);
        out.push(setting);
    }
    Ok(out)
}

/// A section header at the start of `line`: the section (lowercase) and
/// subsection, and what follows the `]`.
fn header(line: &str) -> Option<((String, Option<String>), &str)> {
    let body = line.strip_prefix('[')?;
    let name_len = body
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        .unwrap_or(body.len());
    let name = &body[..name_len];
    let rest = &body[name_len..];
    if name.is_empty() {
        return None;
    }
    if let Some(after) = rest.strip_prefix(']') {
        // `[section]` or the old `[section.subsection]`.
        return Some(match name.split_once('.') {
            Some((s, sub)) if !s.is_empty() && !sub.is_empty() => (
                (s.to_ascii_lowercase(), Some(sub.to_ascii_lowercase())),
                after,
            ),
            Some(_) => return None,
            None => ((name.to_ascii_lowercase(), None), after),
        });
    }
    if name.contains('.') {
        return None;
    }
    // `[section "subsection"]`.
    let quoted = rest.trim_start_matches([' ', '\t']).strip_prefix('"')?;
    let mut sub = String::new();
    let mut chars = quoted.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => {
                let after = quoted[at + 1..].strip_prefix(']')?;
                return Some(((name.to_ascii_lowercase(), Some(sub)), after));
            }
            '\\' => sub.push(chars.next()?.1),
            '\n' => return None,
            c => sub.push(c),
        }
    }
    None
}

/// Settings that run nothing and read nothing elsewhere: what `git init`,
/// `git clone`, `git remote add`, `git branch --set-upstream-to` and
/// `git config user.*` write, and a few like them. `*` stands for any
/// subsection.
pub const INERT: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.safecrlf",
    "core.eol",
    "core.quotepath",
    "core.compression",
    "core.bigfilethreshold",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "core.untrackedcache",
    "core.commitgraph",
    "core.multipackindex",
    "core.abbrev",
    "core.checkstat",
    "core.trustctime",
    "core.splitindex",
    "extensions.objectformat",
    "extensions.refstorage",
    "extensions.worktreeconfig",
    "extensions.preciousobjects",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.push",
    "remote.*.tagopt",
    "remote.*.prune",
    "remote.*.mirror",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "branch.*.pushremote",
    "branch.*.description",
    "user.name",
    "user.email",
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "push.default",
    "push.autosetupremote",
    "fetch.prune",
    "merge.ff",
    "gc.auto",
    "gc.autodetach",
    "index.version",
    "lfs.repositoryformatversion",
    "submodule.*.url",
    "submodule.*.active",
    "submodule.*.branch",
];

/// Whether `s` is one of [`INERT`].
pub fn is_inert(s: &Setting) -> bool {
    INERT.contains(&s.name().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        settings(text).unwrap().iter().map(Setting::name).collect()
    }

    #[test]
    fn reads_what_git_writes() {
        let init = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://example.com/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n";
        let s = settings(init).unwrap();
        assert_eq!(s.len(), 8);
        assert!(s.iter().all(is_inert), "{s:?}");
        assert_eq!(s[5].subsection.as_deref(), Some("origin"));
    }

    #[test]
    fn reads_values_as_git_does() {
        let text = "[core]\n\thooksPath = \"  .husky/x\"  ; c\n[include]\n\tpath=../a\\\n/b # c\n\tpath = \"q\\\"t\\\\\" tail \n[x]\n\tflag\n";
        let s = settings(text).unwrap();
        let v: Vec<Option<&str>> = s.iter().map(|s| s.value.as_deref()).collect();
        assert_eq!(
            v,
            [
                Some("  .husky/x"),
                Some("../a/b"),
                Some("q\"t\\ tail"),
                None
            ]
        );
    }

    #[test]
    fn finds_what_runs_programs() {
        let evil = "# comment\n[core]\n  FSMonitor = \"touch /tmp/x; false\" ; trailing\n[Core]\nhooksPath=/tmp/h\n[filter \"lfs\"]\n\tprocess = x\n[alias]\n\tst = !sh\n[include]\n\tpath = ../evil\n[diff.pdf]\n\ttextconv = x\n[remote \"o\"]\n\tuploadpack = x\n";
        let n = names(evil);
        assert_eq!(
            n,
            [
                "core.fsmonitor",
                "core.hookspath",
                "filter.*.process",
                "alias.st",
                "include.path",
                "diff.*.textconv",
                "remote.*.uploadpack"
            ]
        );
        assert!(settings(evil).unwrap().iter().all(|s| !is_inert(s)));
    }

    #[test]
    fn values_span_lines_and_quotes_hide_comment_marks() {
        let t = "[core]\n\teditor = \"a # b ; c\" \\\n   continued\n\tfsmonitor\n[user]\n\tname = x\\\\\n";
        assert_eq!(names(t), ["core.editor", "core.fsmonitor", "user.name"]);
        // A key on the line of its section.
        assert_eq!(names("[core] fsmonitor = x\n"), ["core.fsmonitor"]);
    }

    /// What this reader cannot make sense of is refused, never read past.
    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "fsmonitor = x\n",
            "[core\nx = 1\n",
            "[core]\n\t=x\n",
            "[core]\n\tx = \"open\n",
            "[core]\n\tx = a\\q\n",
            "[core]\n\tx y\n",
            "[s \"sub\n",
            "[core]\n\tx = a\\",
        ] {
            assert!(settings(bad).is_err(), "{bad:?}");
        }
    }
}
