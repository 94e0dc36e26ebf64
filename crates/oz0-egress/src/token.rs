//! The per-run token: what a request must present to use a run's socket.

use std::fmt;

use base64::Engine as _;
use subtle::ConstantTimeEq;

use crate::EgressError;

/// Random bytes in a token (256 bits).
pub const TOKEN_BYTES: usize = 32;
/// The Basic-auth user name.
pub const PROXY_USER: &str = "oz0";
/// Longest `Proxy-Authorization` value looked at; longer ones are refused
/// without decoding.
pub const MAX_AUTH_HEADER: usize = 512;

/// A run's proxy token: 64 lowercase hex digits from the OS CSPRNG.
///
/// `Debug` and `Display` never print it; only [`Token::expose`],
/// [`Token::proxy_url`] and [`Token::proxy_env`] do, for handing it to the
/// run's own environment.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh token from the OS random number generator.
    pub fn generate() -> Result<Token, EgressError> {
        let mut raw = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut raw).map_err(|e| EgressError::Random(e.to_string()))?;
        let mut hex = String::with_capacity(2 * TOKEN_BYTES);
        for b in raw {
            hex.push(char::from_digit(u32::from(b >> 4), 16).expect("nibble"));
            hex.push(char::from_digit(u32::from(b & 15), 16).expect("nibble"));
        }
        Ok(Token(hex))
    }

    /// A token received from elsewhere (e.g. handed across a process
    /// boundary): exactly 64 lowercase hex digits.
    pub fn from_secret(s: &str) -> Result<Token, EgressError> {
        let ok = s.len() == 2 * TOKEN_BYTES
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Token(s.to_string()))
        } else {
            Err(EgressError::BadToken)
        }
    }

    /// The secret itself. Put it only into the run's environment.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `http://oz0:<token>@127.0.0.1:<port>`: the proxy URL of a run whose
    /// bridge listens on `port`.
    pub fn proxy_url(&self, port: u16) -> String {
        format!("http://{PROXY_USER}:{}@127.0.0.1:{port}", self.0)
    }

    /// The variables a run gets: `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`
    /// and their lowercase forms, all [`Token::proxy_url`]. No `NO_PROXY`:
    /// node-local services are reached through the proxy too.
    pub fn proxy_env(&self, port: u16) -> Vec<(String, String)> {
        let url = self.proxy_url(port);
        ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
            .iter()
            .flat_map(|n| [n.to_string(), n.to_ascii_lowercase()])
            .map(|n| (n, url.clone()))
            .collect()
    }

    /// True if `value` (one `Proxy-Authorization` header value) carries this
    /// token: `Basic base64(oz0:<token>)` or `Bearer <token>`. The secret is
    /// compared in constant time; only its (public) length can short-cut.
    pub fn authorizes(&self, value: &[u8]) -> bool {
        if value.len() > MAX_AUTH_HEADER {
            return false;
        }
        let value = value.trim_ascii();
        let Some(space) = value.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (scheme, rest) = value.split_at(space);
        let rest = rest.trim_ascii();
        if scheme.eq_ignore_ascii_case(b"basic") {
            let Ok(decoded) = BASE64.decode(rest) else {
                return false;
            };
            let mut want = Vec::with_capacity(PROXY_USER.len() + 1 + self.0.len());
            want.extend_from_slice(PROXY_USER.as_bytes());
            want.push(b':');
            want.extend_from_slice(self.0.as_bytes());
            bool::from(decoded.ct_eq(&want))
        } else if scheme.eq_ignore_ascii_case(b"bearer") {
            bool::from(rest.ct_eq(self.0.as_bytes()))
        } else {
            false
        }
    }
}

/// Standard alphabet; padding optional (some clients drop it).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(s: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(s)
        )
        .into_bytes()
    }

    #[test]
    fn fresh_tokens_differ_and_are_hex() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert_eq!(Token::from_secret(a.expose()).unwrap(), a);
    }

    #[test]
    fn debug_and_display_hide_the_secret() {
        let t = Token::generate().unwrap();
        for shown in [format!("{t:?}"), format!("{t}"), format!("{:?}", Some(&t))] {
            assert!(!shown.contains(t.expose()), "{shown}");
        }
    }

    #[test]
    fn url_and_env() {
        let t = Token::from_secret(&"ab".repeat(32)).unwrap();
        let url = format!("http://oz0:{}@127.0.0.1:3128", "ab".repeat(32));
        assert_eq!(t.proxy_url(3128), url);
        let env = t.proxy_env(3128);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "HTTP_PROXY",
                "http_proxy",
                "HTTPS_PROXY",
                "https_proxy",
                "ALL_PROXY",
                "all_proxy"
            ]
        );
        assert!(env.iter().all(|(_, v)| *v == url));
    }

    #[test]
    fn header_forms() {
        let t = Token::generate().unwrap();
        let other = Token::generate().unwrap();
        let s = t.expose();
        let good: Vec<Vec<u8>> = vec![
            basic(&format!("oz0:{s}")),
            basic(&format!("oz0:{s}")).to_ascii_uppercase()[..6]
                .iter()
                .chain(&basic(&format!("oz0:{s}"))[6..])
                .copied()
                .collect(),
            format!("Bearer {s}").into_bytes(),
            format!("bearer   {s}  ").into_bytes(),
            basic(&format!("oz0:{s}"))
                .into_iter()
                .filter(|&b| b != b'=')
                .collect(),
        ];
        for g in &good {
            assert!(t.authorizes(g), "{}", String::from_utf8_lossy(g));
        }
        let bad: Vec<Vec<u8>> = vec![
            vec![],
            b"Basic".to_vec(),
            b"Basic !!!".to_vec(),
            basic(&format!("root:{s}")),
            basic(&format!("oz0:{}", other.expose())),
            basic(&format!("oz0:{s}x")),
            basic(&format!("oz0:{}", &s[..63])),
            basic(s),
            format!("Bearer {}", other.expose()).into_bytes(),
            format!("Bearer oz0:{s}").into_bytes(),
            format!("Digest {s}").into_bytes(),
            format!("Bearer {}", s.to_uppercase()).into_bytes(),
            format!("Bearer {s}{}", " ".repeat(MAX_AUTH_HEADER)).into_bytes(),
        ];
        for b in &bad {
            assert!(!t.authorizes(b), "{}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn from_secret_refuses_other_shapes() {
        for s in [
            "",
            "abc",
            &"AB".repeat(32),
            &"g".repeat(64),
            &"a".repeat(65),
        ] {
            assert!(Token::from_secret(s).is_err(), "{s}");
        }
    }
}
