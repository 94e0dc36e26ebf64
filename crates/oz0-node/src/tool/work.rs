//! What a call on Linux and Windows shares: its work folder, and `/work`
//! standing for it in the server's command and the call's arguments.

use std::path::PathBuf;

use super::WORK_IN_VM;

/// Says why `plugin call` made no call; its status (125).
pub fn call_refused(msg: String) -> i32 {
    eprintln!("oz0-node: plugin call refused: {msg}");
    oz0_core::exit::Exit::Sandbox.code()
}

/// `why` a server did not answer, with the end of what it wrote to its
/// stderr, `f`, when it wrote anything.
pub fn with_stderr_end(why: String, f: std::fs::File) -> String {
    match stderr_end(f) {
        Some(end) => format!("{why}; its stderr ended with: {end}"),
        None => why,
    }
}

/// The last line or so (at most 300 bytes) of what a server wrote to
/// `f`, trimmed; None when it wrote nothing.
fn stderr_end(mut f: std::fs::File) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let len = f.seek(SeekFrom::End(0)).ok()?;
    f.seek(SeekFrom::Start(len.saturating_sub(300))).ok()?;
    let mut buf = Vec::with_capacity(300);
    f.take(300).read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    let text = text.trim();
    (!text.is_empty()).then(|| text.replace('\n', " | "))
}

/// Time the server's run may go on past the call's deadline before its
/// own timeout kills it (the call ends it first in every normal case).
pub(super) const RUN_GRACE_S: u64 = 30;

/// `/work` or `/work/…` as the path `work`, the rest's `/` as `sep` (the
/// server's system's separator); anything else unchanged.
pub(super) fn at_work(s: &str, work: &str, sep: char) -> String {
    match s.strip_prefix(WORK_IN_VM) {
        Some("") => work.to_string(),
        Some(rest) if rest.starts_with('/') => {
            format!("{work}{}", rest.replace('/', &sep.to_string()))
        }
        _ => s.to_string(),
    }
}

/// Every string of `v` that names `/work` or a path under it, as `work`.
pub(super) fn args_at_work(v: &mut serde_json::Value, work: &str, sep: char) {
    use serde_json::Value;
    match v {
        Value::String(s) => *s = at_work(s, work, sep),
        Value::Array(a) => a.iter_mut().for_each(|x| args_at_work(x, work, sep)),
        Value::Object(o) => o.values_mut().for_each(|x| args_at_work(x, work, sep)),
        _ => {}
    }
}

/// A private folder for one call, removed on drop.
pub struct CallDir(pub PathBuf);

impl CallDir {
    /// A new folder under the system's temporary folder, made new (never
    /// one that was there), readable by this user alone on Linux (Windows'
    /// user temporary folder is the user's own).
    pub fn new() -> std::io::Result<CallDir> {
        #[cfg(target_os = "linux")]
        let b = {
            use std::os::unix::fs::DirBuilderExt;
            let mut b = std::fs::DirBuilder::new();
            b.mode(0o700);
            b
        };
        #[cfg(windows)]
        let b = std::fs::DirBuilder::new();
        let p = std::env::temp_dir().join(format!("oz0-call-{}", unique()?));
        b.create(&p)?;
        Ok(CallDir(p))
    }
}

/// The call's work folder: `--work`'s (a folder), or a new private one,
/// removed when the first value is dropped. On Linux `--work` is made
/// absolute without following links (`..` taken by name), so the wall
/// sees the path as given and refuses it if it is or passes through a
/// link, as for `sandbox run`: another run may have turned a folder on
/// the way into a link to the home folder. Elsewhere, its real path.
pub fn work_folder(work: Option<&std::path::Path>) -> Result<(Option<CallDir>, PathBuf), String> {
    #[cfg(target_os = "linux")]
    let real = |w: &std::path::Path| std::path::absolute(w).map(|p| oz0_policy::path::by_name(&p));
    #[cfg(not(target_os = "linux"))]
    let real = |w: &std::path::Path| std::fs::canonicalize(w).map(plain);
    match work {
        Some(w) => match real(w) {
            Ok(p) if p.is_dir() => Ok((None, p)),
            Ok(p) => Err(format!("--work {}: not a folder", p.display())),
            Err(e) => Err(format!("--work {}: {e}", w.display())),
        },
        None => {
            let d = CallDir::new().map_err(|e| {
                format!(
                    "a work folder under {}: {e}",
                    std::env::temp_dir().display()
                )
            })?;
            let p = d.0.clone();
            Ok((Some(d), p))
        }
    }
}

/// A real path as the server is given it: on Windows without the `\\?\`
/// that canonicalising adds before a drive letter (a path on a share
/// keeps it, and is refused where a run's spec takes it).
#[cfg(not(target_os = "linux"))]
fn plain(p: PathBuf) -> PathBuf {
    #[cfg(windows)]
    if let Some(rest) = p.to_str().and_then(|s| s.strip_prefix("\\\\?\\")) {
        if rest.as_bytes().get(1) == Some(&b':') {
            return PathBuf::from(rest);
        }
    }
    p
}

/// 16 hex digits no other call has.
fn unique() -> std::io::Result<String> {
    #[cfg(target_os = "linux")]
    {
        let mut id = [0u8; 8];
        rustix::rand::getrandom(&mut id, rustix::rand::GetRandomFlags::empty())?;
        Ok(id.iter().map(|b| format!("{b:02x}")).collect())
    }
    #[cfg(windows)]
    {
        // Made new or refused: a name taken fails the call, never shares.
        Ok(oz0_windows::tier0::new_run_id())
    }
}

impl Drop for CallDir {
    fn drop(&mut self) {
        // The server wrote here: std's removal follows no link it left.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_paths_stand_for_the_work_folder() {
        assert_eq!(at_work("/work", "/t/w", '/'), "/t/w");
        assert_eq!(
            at_work("/work/.oz0-files/a", "/t/w", '/'),
            "/t/w/.oz0-files/a"
        );
        for same in ["/workshop", "work", "/x/work", "", "/work2/a"] {
            assert_eq!(at_work(same, "/t/w", '/'), same);
        }
        let mut v = serde_json::json!({"path": "/work/a", "list": ["/work", 3, {"p": "/workx"}]});
        args_at_work(&mut v, "/t/w", '/');
        assert_eq!(
            v,
            serde_json::json!({"path": "/t/w/a", "list": ["/t/w", 3, {"p": "/workx"}]})
        );
        // A Windows server sees its own separators.
        assert_eq!(
            at_work("/work/.oz0-files/a.txt", "C:\\T\\oz0-call-1", '\\'),
            "C:\\T\\oz0-call-1\\.oz0-files\\a.txt"
        );
    }
}
