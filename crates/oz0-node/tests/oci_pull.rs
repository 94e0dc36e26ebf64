//! `oz0-node oci pull` against a real registry on loopback (Debian's
//! `docker-registry`), with images this test builds by hand as OCI layouts
//! and pushes with `skopeo`: a good image is pulled by digest, checked and
//! unpacked once; bad ones are each refused with the reason.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::oci::{noise, sha256, tar, Registry};
use common::TempDir;

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
        text.contains(r#"env         "GREETING=\u001b[31mred\u009b2J""#),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{9b}'),
        "{text}"
    );
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
