//! A registry on loopback (Debian's `docker-registry`) and images built by
//! hand as OCI layouts, pushed with `skopeo`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use sha2::Digest as _;

use super::TempDir;

/// Whether gVisor's `runsc` (Debian's package) answers here.
pub fn has_runsc() -> bool {
    Command::new("runsc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn sha256(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A ustar header.
pub fn header(name: &str, flag: u8, mode: u32, size: usize, link: &str) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[100..107].copy_from_slice(format!("{mode:07o}").as_bytes());
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = flag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h
}

/// A tar stream of `(name, type flag, mode, data)` entries (a link's
/// target is its data).
pub fn tar(entries: &[(&str, u8, u32, &[u8])]) -> Vec<u8> {
    let mut t = Vec::new();
    for (name, flag, mode, data) in entries {
        if matches!(flag, b'1' | b'2') {
            t.extend(header(
                name,
                *flag,
                *mode,
                0,
                std::str::from_utf8(data).unwrap(),
            ));
            continue;
        }
        t.extend(header(name, *flag, *mode, data.len(), ""));
        t.extend_from_slice(data);
        t.extend(vec![0u8; (512 - data.len() % 512) % 512]);
    }
    t.extend(vec![0u8; 1024]);
    t
}

/// Bytes gzip cannot shrink.
pub fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A registry on a loopback port of its own, stopped when dropped.
pub struct Registry {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Registry {
    /// None (after `super::skip`) when the tools are not installed.
    pub fn start() -> Option<Registry> {
        for tool in ["docker-registry", "skopeo"] {
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            if !found {
                super::skip(&format!(
                    "{tool} is not installed (apt-get install docker-registry skopeo)"
                ));
                return None;
            }
        }
        let dir = TempDir::new("oci-registry");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(
            dir.join("config.yml"),
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.join("store").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
            .spawn()
            .unwrap();
        let r = Registry { child, port, dir };
        // Up when /v2/ answers.
        for _ in 0..200 {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
                let mut got = String::new();
                let _ = s.read_to_string(&mut got);
                if got.starts_with("HTTP/1.0 200") || got.starts_with("HTTP/1.1 200") {
                    return Some(r);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!(
            "docker-registry did not answer on 127.0.0.1:{port}: {}",
            std::fs::read_to_string(r.dir.join("registry.log")).unwrap_or_default()
        );
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes an image of `layers` (tar streams) whose config names
    /// `diff_ids` (each layer's own when `None`) as `NAME:TAG`; returns the
    /// manifest's digest in the registry.
    pub fn push(&self, name: &str, layers: &[Vec<u8>], diff_ids: Option<Vec<String>>) -> String {
        let run = r#"{"Entrypoint":["/bin/server"],"Cmd":["--stdio"],"Env":["PATH=/bin","GREETING=\u001b[31mred\u009b2J"],"WorkingDir":"/srv","User":"1000:1000"}"#;
        self.push_with(name, layers, diff_ids, run)
    }

    /// [`Registry::push`] with `run` as the config's `config` object
    /// (entrypoint, cmd, variables...).
    pub fn push_with(
        &self,
        name: &str,
        layers: &[Vec<u8>],
        diff_ids: Option<Vec<String>>,
        run: &str,
    ) -> String {
        let layout = self.dir.join(&format!("layout-{}", name.replace('/', "-")));
        let blobs = layout.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).unwrap();
        let put = |data: &[u8]| {
            let h = sha256(data);
            std::fs::write(blobs.join(&h), data).unwrap();
            (format!("sha256:{h}"), data.len())
        };
        let mut descs = Vec::new();
        for l in layers {
            let (d, size) = put(l);
            descs.push(format!(
                r#"{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{d}","size":{size}}}"#
            ));
        }
        let ids = diff_ids.unwrap_or_else(|| {
            layers
                .iter()
                .map(|l| format!("sha256:{}", sha256(l)))
                .collect()
        });
        let ids: Vec<String> = ids.iter().map(|d| format!("\"{d}\"")).collect();
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            a => a,
        };
        let config = format!(
            r#"{{"architecture":"{arch}","os":"linux","config":{run},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
            ids.join(",")
        );
        let (cd, csize) = put(config.as_bytes());
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{cd}","size":{csize}}},"layers":[{}]}}"#,
            descs.join(",")
        );
        let (md, msize) = put(manifest.as_bytes());
        std::fs::write(
            layout.join("index.json"),
            format!(
                r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{md}","size":{msize},"annotations":{{"org.opencontainers.image.ref.name":"v1"}}}}]}}"#
            ),
        )
        .unwrap();
        std::fs::write(
            layout.join("oci-layout"),
            r#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .unwrap();
        let digest_file = layout.join("pushed-digest");
        let out = Command::new("skopeo")
            .args([
                "copy",
                "--quiet",
                "--insecure-policy",
                "--dest-tls-verify=false",
                "--digestfile",
            ])
            .arg(&digest_file)
            .arg(format!("oci:{}:v1", layout.display()))
            .arg(format!("docker://{}/{name}:v1", self.host()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "skopeo copy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(digest_file)
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where npm installs the server for every user.
pub const SERVER_DIR: &str = "/usr/lib/node_modules/@modelcontextprotocol/server-filesystem";

/// `node` and the shared libraries `ldd` names for it (real files), or
/// why not.
pub fn node_and_libraries() -> Result<(PathBuf, Vec<(PathBuf, String)>), String> {
    let node = Command::new("sh")
        .args(["-c", "command -v node"])
        .output()
        .map_err(|e| e.to_string())?;
    let node = PathBuf::from(String::from_utf8_lossy(&node.stdout).trim());
    if !node.is_absolute() {
        return Err("node is not on PATH (apt-get install nodejs)".into());
    }
    let node = std::fs::canonicalize(&node).map_err(|e| e.to_string())?;
    let out = Command::new("ldd")
        .arg(&node)
        .output()
        .map_err(|e| e.to_string())?;
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`, or the
        // loader's own `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let path = match line.split("=>").nth(1) {
            Some(rest) => rest.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        let Some(path) = path.filter(|p| p.starts_with('/')) else {
            continue;
        };
        let real = std::fs::canonicalize(path).map_err(|e| format!("{path}: {e}"))?;
        libs.push((real, path.to_string()));
    }
    Ok((node, libs))
}

/// The image's one layer: `node` at /usr/bin/node, its libraries where
/// `ldd` found them, the server's package at /app. Built with the host's
/// `tar` from a staged folder.
pub fn server_layer(root: &TempDir) -> Result<Vec<u8>, String> {
    let (node, libs) = node_and_libraries()?;
    let stage = root.join("stage");
    let copy = |from: &Path, to: &str| -> Result<(), String> {
        let dest = stage.join(to.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::copy(from, &dest).map_err(|e| format!("{}: {e}", from.display()))?;
        Ok(())
    };
    copy(&node, "/usr/bin/node")?;
    for (real, named) in &libs {
        copy(real, named)?;
    }
    std::fs::create_dir_all(&stage).map_err(|e| e.to_string())?;
    let cp = Command::new("cp")
        .args(["-a", SERVER_DIR])
        .arg(stage.join("app"))
        .status()
        .map_err(|e| e.to_string())?;
    if !cp.success() {
        return Err(format!("cp -a {SERVER_DIR} failed"));
    }
    let tar = Command::new("tar")
        .args(["--numeric-owner", "--owner=0", "--group=0", "-C"])
        .arg(&stage)
        .args(["-cf", "-", "."])
        .output()
        .map_err(|e| e.to_string())?;
    if !tar.status.success() {
        return Err(String::from_utf8_lossy(&tar.stderr).into_owned());
    }
    Ok(tar.stdout)
}

/// The image's config: the server with `/work` as its one allowed folder.
pub const FS_RUN: &str = r#"{"Entrypoint":["/usr/bin/node","/app/dist/index.js"],"Cmd":["/work"],"Env":["PATH=/usr/bin:/bin","NODE_ENV=production"],"WorkingDir":"/work"}"#;
