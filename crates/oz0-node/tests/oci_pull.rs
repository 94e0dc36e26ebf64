//! `oz0-node oci pull` against a real registry on loopback (Debian's
//! `docker-registry`), with images this test builds by hand as OCI layouts
//! and pushes with `skopeo`: a good image is pulled by digest, checked and
//! unpacked once; bad ones are each refused with the reason.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::TempDir;
use sha2::Digest as _;

fn sha256(data: &[u8]) -> String {
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A ustar header.
fn header(name: &str, flag: u8, mode: u32, size: usize, link: &str) -> Vec<u8> {
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
fn tar(entries: &[(&str, u8, u32, &[u8])]) -> Vec<u8> {
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
fn noise(n: usize) -> Vec<u8> {
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
struct Registry {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Registry {
    /// None (after `common::skip`) when the tools are not installed.
    fn start() -> Option<Registry> {
        for tool in ["docker-registry", "skopeo"] {
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok();
            if !found {
                common::skip(&format!(
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

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Pushes an image of `layers` (tar streams) whose config names
    /// `diff_ids` (each layer's own when `None`) as `NAME:TAG`; returns the
    /// manifest's digest in the registry.
    fn push(&self, name: &str, layers: &[Vec<u8>], diff_ids: Option<Vec<String>>) -> String {
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
            r#"{{"architecture":"{arch}","os":"linux","config":{{"Entrypoint":["/bin/server"],"Cmd":["--stdio"],"Env":["PATH=/bin","GREETING=\u001b[31mred"],"WorkingDir":"/srv","User":"1000:1000"}},"rootfs":{{"type":"layers","diff_ids":[{}]}}}}"#,
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

/// `oz0-node oci pull` with the data dir `data`, allowing the registry.
fn pull(reg: &Registry, data: &Path, image: &str, extra: &[&str]) -> std::process::Output {
    Command::new(common::node())
        .args(["--no-config", "oci", "pull", "--data-dir"])
        .arg(data)
        .args(["--oci-registry", &reg.host()])
        .args(extra)
        .arg(image)
        .output()
        .unwrap()
}

fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn not_root() -> bool {
    if rustix_is_root() {
        return common::skip(
            "oci pull refuses root; this test runs as an unprivileged user (scripts/test)",
        );
    }
    true
}

fn rustix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

#[test]
fn an_image_is_pulled_by_digest_checked_and_unpacked_once() {
    if !not_root() {
        return;
    }
    let Some(reg) = Registry::start() else { return };
    let layer1 = tar(&[
        ("bin/", b'5', 0o755, b""),
        ("bin/server", b'0', 0o4755, b"#!/bin/sh\necho hi\n"),
        ("dev/", b'5', 0o755, b""),
        ("dev/sda", b'4', 0o660, b""),
        ("etc/old", b'0', 0o644, b"old"),
    ]);
    let layer2 = tar(&[
        ("etc/.wh.old", b'0', 0o644, b""),
        ("srv/", b'5', 0o755, b""),
        ("srv/data", b'0', 0o644, b"data"),
    ]);
    let digest = reg.push("acme/tool", &[layer1, layer2], None);
    let image = format!("oci:{}/acme/tool@{digest}", reg.host());
    let dir = TempDir::new("oci-pull");
    let data = dir.join("data");
    let out = pull(&reg, &data, &image, &["--json"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rootfs = PathBuf::from(v["rootfs"].as_str().unwrap());
    assert_eq!(
        rootfs,
        data.join("oci/images")
            .join(digest.trim_start_matches("sha256:"))
            .join("rootfs")
    );
    assert_eq!(v["pulled"], true);
    assert_eq!(
        v["config"]["entrypoint"],
        serde_json::json!(["/bin/server"])
    );
    assert_eq!(v["config"]["cmd"], serde_json::json!(["--stdio"]));
    assert_eq!(v["config"]["working_dir"], "/srv");
    assert_eq!(v["config"]["user"], "1000:1000");
    // Layers applied in order, the whiteout hiding the lower file; the
    // device node dropped and the setuid bit cleared, each named.
    assert_eq!(names(&rootfs), ["bin", "dev", "etc", "srv"]);
    assert!(names(&rootfs.join("etc")).is_empty());
    assert!(names(&rootfs.join("dev")).is_empty());
    assert_eq!(std::fs::read(rootfs.join("srv/data")).unwrap(), b"data");
    assert_eq!(
        v["unpacked"]["cleared_named"],
        serde_json::json!(["bin/server"])
    );
    assert_eq!(
        v["unpacked"]["dropped_named"],
        serde_json::json!(["dev/sda"])
    );
    let meta = std::fs::metadata(rootfs.join("bin/server")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o555);
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&data).unwrap()),
        "the node's user's"
    );
    // Read-only: the node's user cannot add to it.
    assert!(std::fs::write(rootfs.join("srv/new"), b"x").is_err());

    // Again: from the cache. The text form escapes the image's strings.
    let out = pull(&reg, &data, &image, &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.contains("pulled      no: it was in the cache"),
        "{text}"
    );
    assert!(
        text.contains(r#"env         "GREETING=\u001b[31mred""#),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(
        text.contains(r#"cleared     setuid/setgid/sticky bits of 1: ["bin/server"]"#),
        "{text}"
    );
}

#[test]
fn bad_images_are_refused_with_the_reason() {
    if !not_root() {
        return;
    }
    let Some(reg) = Registry::start() else { return };
    let dir = TempDir::new("oci-bad");
    let data = dir.join("data");
    let fails = |image: &str, extra: &[&str], code: i32, why: &str| {
        let out = pull(&reg, &data, image, extra);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{image}: {err}");
        assert!(err.contains(why), "{image}: {err}");
        err
    };

    // A layer that escapes the rootfs.
    let escape = tar(&[("../escape", b'0', 0o644, b"x")]);
    let d = reg.push("bad/escape", &[escape], None);
    let err = fails(
        &format!("oci:{}/bad/escape@{d}", reg.host()),
        &[],
        1,
        "entry \"../escape\": its name holds '..', which could land outside the rootfs",
    );
    assert!(err.contains("layer 1 of 1 (sha256:"), "{err}");
    assert!(!dir.join("escape").exists() && !data.join("oci/escape").exists());

    // A link, then an entry through it.
    let linked = tar(&[("l", b'2', 0o777, b"/tmp"), ("l/x", b'0', 0o644, b"x")]);
    let d = reg.push("bad/link", &[linked], None);
    fails(
        &format!("oci:{}/bad/link@{d}", reg.host()),
        &[],
        1,
        "it goes through the symbolic link \"l\" the image placed earlier",
    );

    // A layer whose content is not what the config names (diff_ids).
    let good = tar(&[("a", b'0', 0o644, b"a")]);
    let wrong = format!("sha256:{}", sha256(b"another layer"));
    let d = reg.push("bad/diffid", &[good], Some(vec![wrong.clone()]));
    fails(
        &format!("oci:{}/bad/diffid@{d}", reg.host()),
        &[],
        1,
        &format!("not {wrong} as the image's config names it"),
    );

    // A layer over the cache's bound, refused before it is fetched.
    let big = tar(&[("big", b'0', 0o644, &noise(2 << 20))]);
    let d = reg.push("bad/big", &[big], None);
    fails(
        &format!("oci:{}/bad/big@{d}", reg.host()),
        &["--oci-cache-mib", "1"],
        1,
        "over the cache's bound of 1048576 bytes",
    );

    // A digest the registry does not have.
    let absent = format!("sha256:{}", sha256(b"absent"));
    fails(
        &format!("oci:{}/bad/escape@{absent}", reg.host()),
        &[],
        1,
        "the registry has no such manifest",
    );

    // A tag, and a registry not allowed: refused before any GET.
    fails(
        &format!("oci:{}/bad/escape:v1", reg.host()),
        &[],
        2,
        "names a tag, not a digest",
    );
    let out = Command::new(common::node())
        .args(["--no-config", "oci", "pull", "--data-dir"])
        .arg(&data)
        .arg(format!("oci:{}/bad/escape@{d}", reg.host()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::stderr(&out).contains(&format!(
            "is not a registry this node pulls from (allowed: none): allow it with --oci-registry {}",
            reg.host()
        )),
        "{}",
        common::stderr(&out)
    );

    // Nothing was kept of any of them.
    assert!(names(&data.join("oci/images")).is_empty());
    assert!(names(&data.join("oci/tmp")).is_empty());
}
