//! The strict patterns and closed sets a node's strings must match to be
//! kept: builds, versions, architectures, feature and node names.

use super::MAX_FIELD_CHARS;

pub(super) fn short(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_FIELD_CHARS
}

fn digits(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// `^\d{4,5}(\.\d{1,5})?$`: a Windows build such as `26200.9457`, or the
/// build number alone from a registry without an update revision (`18362`,
/// Windows 7's `7601`).
pub fn is_windows_build(s: &str) -> bool {
    match s.split_once('.') {
        Some((a, b)) => digits(a, 4, 5) && digits(b, 1, 5),
        None => digits(s, 4, 5),
    }
}

/// `^\d{1,4}\.\d{1,4}(\.\d{1,4})?$`: a version such as `0.8.0` or `1.0`.
pub fn is_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    (2..=3).contains(&parts.len()) && parts.iter().all(|p| digits(p, 1, 4))
}

/// A Linux kernel release: `^\d{1,2}\.\d{1,3}(\.\d{1,4}){0,2}` then
/// optionally `-` or `+` and a local version of ASCII letters and digits separated
/// by single `.`, `_`, `+`, `~` or `-` (`6.1.0-28-amd64`,
/// `5.15.167.4-microsoft-standard-WSL2`), 64 characters at most.
pub fn is_kernel_release(s: &str) -> bool {
    if !short(s) {
        return false;
    }
    let (head, tail) = match s.find(['-', '+']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let parts: Vec<&str> = head.split('.').collect();
    if !(2..=4).contains(&parts.len())
        || !digits(parts[0], 1, 2)
        || !digits(parts[1], 1, 3)
        || !parts[2..].iter().all(|p| digits(p, 1, 4))
    {
        return false;
    }
    match tail {
        None => true,
        Some(t) => {
            let sep = |b: u8| matches!(b, b'.' | b'_' | b'+' | b'~' | b'-');
            let b = t.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || sep(c))
                && !b.windows(2).any(|w| sep(w[0]) && sep(w[1]))
        }
    }
}

/// A macOS build (`24G84`, `25A5279m`) or version (`15.6`).
pub fn is_macos_build(s: &str) -> bool {
    if is_version(s) {
        return true;
    }
    let b = s.as_bytes();
    let lead = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=2).contains(&lead) || b.len() <= lead || !b[lead].is_ascii_uppercase() {
        return false;
    }
    let rest = &b[lead + 1..];
    let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    (1..=5).contains(&n)
        && match &rest[n..] {
            [] => true,
            [c] => c.is_ascii_lowercase(),
            _ => false,
        }
}

/// `^\d{1,4}\.\d{1,4}\.\d{1,4}(-[a-z0-9]{1,16}(\.[a-z0-9]{1,16}){0,3})?$`.
pub fn is_node_version(s: &str) -> bool {
    let (core, pre) = match s.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (s, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| digits(p, 1, 4))
        && pre.is_none_or(|p| {
            let ids: Vec<&str> = p.split('.').collect();
            ids.len() <= 4
                && ids.iter().all(|i| {
                    (1..=16).contains(&i.len())
                        && i.bytes()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                })
        })
}

/// A closed set of CPU architectures.
pub fn is_arch(s: &str) -> bool {
    matches!(
        s,
        "x86_64" | "aarch64" | "riscv64" | "armv7" | "i686" | "ppc64le" | "s390x"
    )
}

/// `^[a-z][a-z0-9_]{0,31}$`: a PSEC feature name.
pub fn is_feature(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=32).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// `^[a-z0-9][a-z0-9.-]{0,62}$`: a node's name (a host name).
pub fn is_node_name(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
}

/// What a node's name looks like, in the words of a refusal.
pub const NODE_NAME_FORM: &str = "1 to 63 lower-case letters, digits, '.' and '-', beginning with a letter or digit, and not shaped like a node id (n and 24 hex digits), e.g. build-01";

/// A name a node may register: [`is_node_name`], and not shaped like a
/// node id (it could pass for another node).
pub fn is_usable_node_name(s: &str) -> bool {
    is_node_name(s) && !crate::auth::is_node_id(s)
}
