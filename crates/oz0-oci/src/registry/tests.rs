//! The client against a registry made here, on loopback, that answers
//! what each test says.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use super::auth::{challenge, query_value};
use super::http::{is_loopback, Url};
use super::*;
use crate::manifest::Descriptor;

/// An answer: status, headers, body.
pub(crate) type Answer = (u16, Vec<(String, String)>, Vec<u8>);
/// What a fake registry answers to a GET of a path, given its port and the
/// request's headers (lower-case names).
pub(crate) type Handler = Arc<dyn Fn(u16, &str, &HashMap<String, String>) -> Answer + Send + Sync>;

/// A registry on loopback; `log` holds every GET's path.
pub(crate) struct Fake {
    pub(crate) port: u16,
    pub(crate) log: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    pub(crate) fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
    pub(crate) fn gets(&self, prefix: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.starts_with(prefix))
            .count()
    }
}

pub(crate) fn serve(h: Handler) -> Fake {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let h = h.clone();
            let log = log2.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                let mut headers = HashMap::new();
                loop {
                    let mut l = String::new();
                    if r.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = l.trim_end().split_once(':') {
                        headers.insert(k.to_ascii_lowercase(), v.trim().to_string());
                    }
                }
                log.lock().unwrap().push(path.clone());
                let (status, hs, body) = h(port, &path, &headers);
                let mut out = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
                if !hs
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                {
                    out.push_str(&format!("Content-Length: {}\r\n", body.len()));
                }
                for (k, v) in hs {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let mut c = c;
                let _ = c.write_all(out.as_bytes());
                let _ = c.write_all(&body);
            });
        }
    });
    Fake { port, log }
}

fn ok(body: &[u8]) -> Answer {
    (200, vec![], body.to_vec())
}

fn client(fake: &Fake) -> Client {
    Client::new(&Options {
        allowed: vec![fake.host()],
        ..Options::default()
    })
    .unwrap()
}

fn reference(fake: &Fake, d: &Digest) -> Reference {
    Reference::parse(&format!("oci:{}/test/img@{d}", fake.host())).unwrap()
}

fn descriptor(data: &[u8]) -> Descriptor {
    Descriptor {
        media_type: "application/vnd.oci.image.layer.v1.tar".into(),
        digest: Digest::of(data),
        size: data.len() as u64,
    }
}

#[test]
fn challenges_and_urls_parse() {
    let (s, p) = challenge(
        r#"Bearer realm="https://auth.example/token",service="reg \"x\"",scope="repository:a/b:pull""#,
    );
    assert_eq!(s, "bearer");
    assert_eq!(p["realm"], "https://auth.example/token");
    assert_eq!(p["service"], "reg \"x\"");
    assert_eq!(p["scope"], "repository:a/b:pull");
    let (s, p) = challenge("Basic realm=Registry");
    assert_eq!((s.as_str(), p["realm"].as_str()), ("basic", "Registry"));
    let u = Url::parse("https://Auth.Example:8443/t?x=1").unwrap();
    assert_eq!(
        (u.authority(), u.target.as_str(), u.tls),
        ("auth.example:8443".into(), "/t?x=1", true)
    );
    assert_eq!(
        Url::parse("https://ghcr.io").unwrap().authority(),
        "ghcr.io"
    );
    for bad in [
        "ftp://x/",
        "https://u:p@x/",
        "https://x/a b",
        "//x/",
        "https:///x",
        "https://x/\u{1b}",
    ] {
        assert!(Url::parse(bad).is_none(), "{bad}");
    }
    assert!(is_loopback("127.0.0.1") && is_loopback("[::1]") && is_loopback("localhost"));
    assert!(!is_loopback("127.0.0.1.example") && !is_loopback("10.0.0.1"));
    assert_eq!(
        query_value("repository:a/b:pull"),
        "repository%3Aa%2Fb%3Apull"
    );
}

#[test]
fn only_allowed_registries_are_spoken_to() {
    let fake = serve(Arc::new(|_, _, _| ok(b"")));
    let c = Client::new(&Options {
        allowed: vec!["ghcr.io".into()],
        ..Options::default()
    })
    .unwrap();
    let e = c
        .manifest(&reference(&fake, &Digest::of(b"")), &Digest::of(b""))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{} is not a registry this node pulls from (allowed: ghcr.io): allow it with --oci-registry {}", fake.host(), fake.host())
    );
    assert_eq!(fake.gets(""), 0);
    let e = Client::new(&Options {
        allowed: vec!["ghcr.io/acme".into()],
        ..Options::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("is not HOST[:PORT]"), "{e}");
}

#[test]
fn a_blob_without_its_digest_or_size_is_refused() {
    let good = b"the layer".to_vec();
    let d = descriptor(&good);
    let fake = serve(Arc::new(move |_, path, _| {
        let which = path.rsplit('/').nth(2).unwrap_or("");
        match which {
            "same-size" => ok(b"THE LAYER"),
            "longer" => ok(b"the layer, and more"),
            "shorter" => ok(b"the lay"),
            "good" => ok(b"the layer"),
            _ => (404, vec![], vec![]),
        }
    }));
    let c = client(&fake);
    let at = |name: &str| {
        Reference::parse(&format!("oci:{}/test/{name}@{}", fake.host(), d.digest)).unwrap()
    };
    let mut out = Vec::new();
    c.blob(&at("good"), &d, "layer 1 of 1", 1 << 20, &mut out)
        .unwrap();
    assert_eq!(out, good);
    for (name, why) in [
        (
            "same-size",
            format!(
                "what the registry sent has the digest {}: it is not the content asked for",
                Digest::of(b"THE LAYER")
            ),
        ),
        (
            "longer",
            "the registry sends 19 bytes, not the 9 its manifest declares".into(),
        ),
        (
            "shorter",
            "the registry sent 7 bytes, not the 9 its manifest declares".into(),
        ),
    ] {
        let e = c
            .blob(&at(name), &d, "layer 2 of 3 (x)", 1 << 20, &mut Vec::new())
            .unwrap_err();
        let m = e.to_string();
        assert!(
            m.starts_with(&format!("layer 2 of 3 (x) from {}: ", fake.host())),
            "{m}"
        );
        assert!(m.contains(&why), "{name}: {m}");
    }
    // Over the caller's bound on the manifest's word, before any GET.
    let before = fake.gets("");
    let e = c
        .blob(&at("good"), &d, "layer 1 of 1", 8, &mut Vec::new())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("its manifest declares 9 bytes, over the 8 the node takes"),
        "{e}"
    );
    assert_eq!(fake.gets(""), before);
}

#[test]
fn a_manifest_is_bounded_and_checked() {
    let body = br#"{"schemaVersion":2}"#.to_vec();
    let d = Digest::of(&body);
    let b2 = body.clone();
    let fake = serve(Arc::new(move |_, path, h| {
        if path.contains("/big/") {
            return (
                200,
                vec![("Content-Length".into(), (5u64 << 20).to_string())],
                vec![],
            );
        }
        assert!(h["accept"].contains("application/vnd.oci.image.index.v1+json"));
        ok(&b2)
    }));
    let c = client(&fake);
    let (got, _) = c.manifest(&reference(&fake, &d), &d).unwrap();
    assert_eq!(got, body);
    let other = Digest::of(b"other");
    let e = c.manifest(&reference(&fake, &other), &other).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("the manifest {other} from")),
        "{e}"
    );
    assert!(
        e.to_string().contains("is not the content asked for"),
        "{e}"
    );
    let r = Reference::parse(&format!("oci:{}/big/img@{d}", fake.host())).unwrap();
    let e = c.manifest(&r, &d).unwrap_err();
    assert!(
        e.to_string()
            .contains("the registry sends 5242880 bytes, over the 4194304 the node reads"),
        "{e}"
    );
}

fn token_registry(realm_host: Option<&'static str>, want_basic: Option<&'static str>) -> Fake {
    serve(Arc::new(move |port, path, h| {
        if path.starts_with("/token?") {
            assert_eq!(
                path,
                "/token?service=fake%20registry&scope=repository%3Atest%2Fimg%3Apull"
            );
            if let Some(b) = want_basic {
                if h.get("authorization").map(String::as_str) != Some(b) {
                    return (401, vec![], vec![]);
                }
            }
            return ok(br#"{"token":"t0ken"}"#);
        }
        if h.get("authorization").map(String::as_str) == Some("Bearer t0ken") {
            return ok(b"the layer");
        }
        let realm = format!("http://{}:{port}/token", realm_host.unwrap_or("127.0.0.1"));
        (
            401,
            vec![(
                "WWW-Authenticate".into(),
                format!(
                    r#"Bearer realm="{realm}",service="fake registry",scope="repository:test/img:pull""#
                ),
            )],
            vec![],
        )
    }))
}

#[test]
fn the_token_dance() {
    let d = descriptor(b"the layer");
    let fake = token_registry(None, None);
    let c = client(&fake);
    let mut out = Vec::new();
    c.blob(
        &reference(&fake, &d.digest),
        &d,
        "layer 1 of 1",
        1 << 20,
        &mut out,
    )
    .unwrap();
    assert_eq!(out, b"the layer");
    // The token is kept for the repository.
    c.blob(
        &reference(&fake, &d.digest),
        &d,
        "layer 1 of 1",
        1 << 20,
        &mut Vec::new(),
    )
    .unwrap();
    assert_eq!(fake.gets("/token"), 1);

    // A realm the operator did not allow is never asked.
    let fake = token_registry(Some("127.0.0.2"), None);
    let e = client(&fake)
        .blob(
            &reference(&fake, &d.digest),
            &d,
            "layer 1 of 1",
            1 << 20,
            &mut Vec::new(),
        )
        .unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains(&format!("the registry sends the node for a token to \"127.0.0.2:{}\", which is not a registry it allows", fake.port)),
        "{m}"
    );
    assert_eq!(fake.gets("/token"), 0);
}

#[test]
fn credentials_come_from_a_file_only_the_node_reads() {
    let dir = std::env::temp_dir().join(format!("oz0-oci-auth-{}", crate::fsx::random_name()));
    std::fs::create_dir(&dir).unwrap();
    let file = dir.join("auth.json");
    let fake = token_registry(None, Some("Basic dXNlcjpwYXNz"));
    std::fs::write(
        &file,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "dXNlcjpwYXNz"}}}}}}"#,
            fake.host()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let opts = Options {
        allowed: vec![fake.host()],
        auth_file: Some(file.clone()),
        ca_file: None,
    };
    let e = Client::new(&opts).unwrap_err().to_string();
    assert!(e.contains("with mode 644: chown it to uid"), "{e}");
    assert!(e.contains("chmod 600"), "{e}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Client::new(&opts).unwrap();
    let d = descriptor(b"the layer");
    c.blob(
        &reference(&fake, &d.digest),
        &d,
        "layer 1 of 1",
        1 << 20,
        &mut Vec::new(),
    )
    .unwrap();
    // Without them, the token service refuses, and the message says so.
    let e = client(&fake)
        .blob(
            &reference(&fake, &d.digest),
            &d,
            "layer 1 of 1",
            1 << 20,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("its token service refused the node (HTTP 401)"),
        "{e}"
    );
    // A damaged file is not echoed (it holds secrets).
    std::fs::write(&file, r#"{"auths": {"x": {"auth": "s3cret-not-base64!"}}}"#).unwrap();
    let e = Client::new(&opts).unwrap_err().to_string();
    assert!(
        e.contains("is not base64 of user:password") && !e.contains("s3cret"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn redirects_only_for_blobs_and_never_to_plain_http_off_loopback() {
    let d = descriptor(b"the layer");
    let fake = serve(Arc::new(|port, path, h| match path {
        p if p.starts_with("/cdn/") => {
            // No credentials follow a redirect.
            assert!(!h.contains_key("authorization"));
            ok(b"the layer")
        }
        p if p.contains("/plain/") => (
            307,
            vec![("Location".into(), "http://cdn.example/x".into())],
            vec![],
        ),
        p if p.contains("/loop/") => (307, vec![("Location".into(), p.to_string())], vec![]),
        _ => (
            307,
            vec![(
                "Location".into(),
                format!("http://127.0.0.1:{port}/cdn/blob"),
            )],
            vec![],
        ),
    }));
    let c = client(&fake);
    let at = |name: &str| {
        Reference::parse(&format!("oci:{}/test/{name}@{}", fake.host(), d.digest)).unwrap()
    };
    let mut out = Vec::new();
    c.blob(&at("img"), &d, "layer 1 of 1", 1 << 20, &mut out)
        .unwrap();
    assert_eq!(out, b"the layer");
    let e = c
        .blob(&at("plain"), &d, "layer 1 of 1", 1 << 20, &mut Vec::new())
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("redirected to plain HTTP at \"cdn.example\""),
        "{e}"
    );
    let e = c
        .blob(&at("loop"), &d, "layer 1 of 1", 1 << 20, &mut Vec::new())
        .unwrap_err();
    assert!(e.to_string().contains("redirected over 5 times"), "{e}");
    // A manifest is never redirected.
    let e = c.manifest(&at("img"), &d.digest).unwrap_err();
    assert!(
        e.to_string().contains("the registry answered HTTP 307"),
        "{e}"
    );
}

/// What a registry elsewhere may never send the node to, however it is
/// written: this machine, and its link.
#[test]
fn this_machine_and_its_link_however_written() {
    use super::http::is_here;
    for here in [
        "127.0.0.1",
        "127.1.2.3",
        "0.0.0.0",
        "::1",
        "::",
        "::ffff:127.0.0.1",
        "::ffff:0.0.0.0",
        "169.254.169.254",
        "fe80::1",
        "::ffff:169.254.169.254",
    ] {
        assert!(is_here(here.parse().unwrap()), "{here}");
    }
    for elsewhere in [
        "93.184.216.34",
        "10.0.0.1",
        "2001:db8::1",
        "::ffff:93.184.216.34",
    ] {
        assert!(!is_here(elsewhere.parse().unwrap()), "{elsewhere}");
    }
}
