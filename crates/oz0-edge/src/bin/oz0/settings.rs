//! `oz0`'s settings file, durations on the command line, and its man
//! pages.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// `~/.config/oz0/config.toml` (or `OZ0_CONFIG`): what the flags and
/// variables leave unset.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct Settings {
    /// The edge's URL.
    pub(super) edge: Option<String>,
    /// Its CA's certificate file.
    pub(super) edge_ca: Option<PathBuf>,
    /// The operator token's file.
    pub(super) token_file: Option<PathBuf>,
    /// The default tenant.
    pub(super) tenant: Option<String>,
}

fn path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("OZ0_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("oz0").join("config.toml"))
}

/// Where the settings file is looked for, for messages.
pub(super) fn path_hint() -> String {
    path().map_or_else(
        || "~/.config/oz0/config.toml".to_string(),
        |p| p.display().to_string(),
    )
}

impl Settings {
    /// The file's settings; none when it does not exist (unless
    /// `OZ0_CONFIG` names it).
    pub(super) fn load() -> Result<Settings> {
        let Some(p) = path() else {
            return Ok(Settings::default());
        };
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && std::env::var_os("OZ0_CONFIG").is_none() =>
            {
                return Ok(Settings::default())
            }
            Err(e) => {
                return Err(e).with_context(|| format!("reading oz0's settings {}", p.display()))
            }
        };
        toml::from_str(&text).map_err(|e| {
            super::follow::usage(format!(
                "oz0's settings {}: {e}(its keys: edge, edge-ca, token-file, tenant)",
                p.display()
            ))
        })
    }
}

/// Why a command-line duration was refused: the value given and the
/// forms taken.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum DurationError {
    /// Not a number with an optional s, m or h.
    #[error("{0:?} is not a duration: give 90, 90s, 10m or 2h")]
    NotADuration(String),
    /// More seconds than fit.
    #[error("{0:?} is too long a duration")]
    TooLong(String),
}

/// A duration: seconds, or a number with s, m or h.
pub(super) fn duration(s: &str) -> Result<u64, DurationError> {
    let (n, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = n
        .parse()
        .map_err(|_| DurationError::NotADuration(s.to_string()))?;
    let by = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(DurationError::NotADuration(s.to_string())),
    };
    n.checked_mul(by)
        .ok_or_else(|| DurationError::TooLong(s.to_string()))
}

/// Writes a man page for `cmd` and each of its subcommands into `dir`
/// (`oz0.1`, `oz0-job.1`, `oz0-job-logs.1`, …), or prints `oz0.1`.
pub(super) fn man_pages(cmd: clap::Command, dir: Option<&Path>) -> Result<()> {
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        oz0_edge::term::print(&String::from_utf8_lossy(&page))?;
        return Ok(());
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    fn walk(cmd: clap::Command, name: String, dir: &Path) -> Result<()> {
        // A man page is titled by its command's whole name (leaked: the
        // program ends right after).
        let cmd = cmd.name(&*Box::leak(name.clone().into_boxed_str()));
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
        let file = dir.join(format!("{name}.1"));
        // Never through a link at the page's name (the folder may be
        // shared, as /tmp/man is): a link there is refused, not followed.
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::custom_flags(
            &mut o,
            i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).expect("O_NOFOLLOW fits an int"),
        );
        o.open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, &page))
            .with_context(|| {
                format!("writing {} (a link there is not followed)", file.display())
            })?;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), dir)?;
        }
        Ok(())
    }
    let mut cmd = cmd;
    cmd.build();
    walk(cmd, "oz0".into(), dir)
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations() {
        assert_eq!(super::duration("90"), Ok(90));
        assert_eq!(super::duration("10m"), Ok(600));
        assert_eq!(super::duration("2h"), Ok(7200));
        assert_eq!(
            super::duration("5d").unwrap_err().to_string(),
            r#""5d" is not a duration: give 90, 90s, 10m or 2h"#
        );
        assert!(super::duration("x").is_err());
        assert_eq!(
            super::duration("18446744073709551615h")
                .unwrap_err()
                .to_string(),
            r#""18446744073709551615h" is too long a duration"#
        );
    }
}
