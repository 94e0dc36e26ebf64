//! Staging shared by the microVM tests and benchmark: a stripped copy of the
//! node binary (the guest loads it over 9p, under emulation), `work/` and
//! `data/`, all reachable by the unprivileged user the node runs as; removed
//! on drop.

// Shared by several test targets and the benchmark; each uses a part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A staged folder.
pub struct Stage {
    /// The folder.
    pub dir: PathBuf,
    /// The staged node binary.
    pub exe: PathBuf,
}

impl Stage {
    /// `oz0-node sandbox vm` with this stage's folders and a 90 s boot
    /// timeout: the staged binary first, then its arguments, to which the
    /// caller adds its own options, `--` and the server.
    pub fn vm_args(&self) -> Vec<String> {
        vec![
            self.exe.display().to_string(),
            "sandbox".into(),
            "vm".into(),
            "--data-dir".into(),
            self.dir.join("data").display().to_string(),
            "--work".into(),
            self.dir.join("work").display().to_string(),
            "--boot-timeout".into(),
            "90".into(),
        ]
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Stages `node_bin` under `<temp>/oz0-<tag>-<pid>`.
pub fn stage(tag: &str, node_bin: &str) -> Stage {
    let dir = std::env::temp_dir().join(format!("oz0-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let exe = dir.join("oz0-vm-testnode");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&exe)
        .arg(node_bin)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !stripped {
        std::fs::copy(node_bin, &exe).unwrap();
    }
    for p in [&dir, &dir.join("work"), &dir.join("data")] {
        chmod(p, 0o777);
    }
    chmod(&exe, 0o755);
    Stage { dir, exe }
}

/// An HTTP listener on 127.0.0.1 (the only kind of target the tests use)
/// answering every request with `body`; returns its port.
pub fn http_listener(body: &'static str) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}
