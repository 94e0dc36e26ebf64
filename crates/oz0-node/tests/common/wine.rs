//! The Windows node under Wine, for the tests that drive
//! `orchestrator-zero-node.exe` from Linux (`tests/windows*.rs`).
//!
//! Needs `OZ0_WINDOWS_NODE` (the `.exe`, as `scripts/build-windows-node`
//! stages it with the DLL Wine 8.0 lacks) and Wine (`OZ0_WINE`, default
//! `/usr/lib/wine/wine64`). Each test binary makes one private
//! `WINEPREFIX`, removed once the binary has exited.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use super::{skip, stderr, stdout, TempDir};

/// The Windows node and Wine, or a printed reason.
pub struct Wine {
    pub exe: PathBuf,
    pub wine: PathBuf,
    pub prefix: PathBuf,
}

pub fn wine() -> Option<&'static Wine> {
    static W: OnceLock<Option<Wine>> = OnceLock::new();
    W.get_or_init(|| {
        let Some(exe) = std::env::var_os("OZ0_WINDOWS_NODE").map(PathBuf::from) else {
            skip("OZ0_WINDOWS_NODE is not set: build the Windows node with scripts/build-windows-node and name its .exe");
            return None;
        };
        if !exe.exists() {
            skip(&format!("OZ0_WINDOWS_NODE {} does not exist", exe.display()));
            return None;
        }
        let wine = std::env::var_os("OZ0_WINE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/lib/wine/wine64"));
        if !wine.exists() {
            skip(&format!(
                "{} does not exist: apt-get install wine64",
                wine.display()
            ));
            return None;
        }
        // A prefix is some 700 MB. Statics are never dropped, so a
        // cleaner outlives this process: once it has exited (however it
        // ended), Wine's server for the prefix is stopped and the prefix
        // removed.
        let prefix = TempDir::new("wineprefix");
        let path = prefix.0.clone();
        std::mem::forget(prefix);
        let server = wine.with_file_name("wineserver");
        // Started in the background by a shell that exits at once, so
        // nothing here waits for it.
        let started = Command::new("sh")
            .arg("-c")
            .arg(
                r#"(while kill -0 "$1" 2>/dev/null; do sleep 1; done; WINEPREFIX="$2" "$3" -k 2>/dev/null; sleep 1; rm -rf "$2") >/dev/null 2>&1 </dev/null &"#,
            )
            .arg("cleaner")
            .arg(std::process::id().to_string())
            .arg(&path)
            .arg(&server)
            .status()
            .expect("sh starts");
        assert!(started.success());
        let w = Wine {
            exe,
            wine,
            prefix: path,
        };
        // The prefix is made once, before the tests start Wine side by side.
        let o = w.run(&["--version"], &[]);
        assert!(
            o.status.success() && stdout(&o).starts_with("oz0-node "),
            "oz0-node.exe --version under Wine: {:?} {} {}",
            o.status,
            stdout(&o),
            stderr(&o)
        );
        Some(w)
    })
    .as_ref()
}

/// The Windows spelling of a Linux path (Wine's Z: is /).
pub fn win(p: &Path) -> String {
    format!("Z:{}", p.display()).replace('/', "\\")
}

impl Wine {
    /// `oz0-node.exe ARGS` with `env`, the environment otherwise Wine's own.
    /// Wine gives a file no access list of its own and answers from its
    /// Unix mode, so the umask 077 makes what the node creates private, as
    /// a user's own folders are on Windows.
    pub fn cmd(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"umask 077 && exec "$0" "$@""#)
            .arg(&self.wine)
            .arg(&self.exe)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.prefix.join("home"))
            .env("WINEPREFIX", &self.prefix)
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .envs(env.iter().copied())
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.cmd(args, env).output().expect("wine starts")
    }
}

/// Stops a Windows process as Ctrl-C does (Wine turns SIGINT into the
/// console's Ctrl-C event), so Wine's server sees it end cleanly; killed
/// after 10 s if it has not.
pub fn stop(child: &mut std::process::Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Wine's lines end in CRLF where the console writes them.
pub fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(|l| l.trim_end_matches('\r').to_string())
        .collect()
}
