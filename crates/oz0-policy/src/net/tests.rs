//! Unit tests of the egress policy: host canonicalisation, allow rules,
//! verdicts, address classes and request targets.

use std::net::IpAddr;

use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn host(x: &str) -> Host {
    Host::parse(x).unwrap_or_else(|e| panic!("{x}: {e}"))
}

fn port(p: u16) -> Port {
    Port::new(p).unwrap()
}

#[test]
fn empty_is_no_egress() {
    let e = Egress::parse(&[], &[]).unwrap();
    assert_eq!(e, Egress::default());
    assert!(!e.is_enabled());
    assert!(Egress::parse(&[], &[8080]).unwrap().is_enabled());
    assert!(Egress::parse(&s(&["a.com"]), &[]).unwrap().is_enabled());
}

#[test]
fn canonical_hosts() {
    let cases: &[(&str, &str)] = &[
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("0x7F.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("10.0.0.0x1", "10.0.0.1"),
        ("[::1]", "[::1]"),
        ("::1", "[::1]"),
        ("[0:0:0:0:0:0:0:1]", "[::1]"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("[::ffff:7f00:1]", "127.0.0.1"),
        ("[2001:DB8::A]", "[2001:db8::a]"),
        ("1.2.3.com", "1.2.3.com"),
        ("0x7f.com", "0x7f.com"),
        ("0x1g", "0x1g"),
        ("1a", "1a"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("_svc.example.com", "_svc.example.com"),
    ];
    for (input, want) in cases {
        assert_eq!(host(input).to_string(), *want, "{input}");
    }
}

#[test]
fn bad_hosts() {
    let cases: &[(&str, &str)] = &[
        ("", "empty"),
        (".", "only a dot"),
        ("a..b", "empty label"),
        (".a.com", "empty label"),
        ("a.com..", "empty label"),
        ("-a.com", "starts or ends"),
        ("a b.com", "letters, digits"),
        ("a\0.com", "letters, digits"),
        ("bücher.de", "punycode"),
        ("256.0.0.1", "numeric"),
        ("1.2.3.4.5", "numeric"),
        ("1.2.3.256", "numeric"),
        ("1.2.65536", "numeric"),
        ("4294967296", "numeric"),
        ("99999999999999999999999", "numeric"),
        ("09", "numeric"),
        ("a.09", "numeric"),
        ("[::1", "lacks"),
        ("[::1%eth0]", "zone"),
        ("[1.2.3.4]", "IPv6"),
        ("1:2", "IPv6"),
        ("a.com:80", "IPv6"),
    ];
    for (input, want) in cases {
        let err = Host::parse(input).expect_err(input).to_string();
        assert!(err.contains(want), "{input:?}: {err:?} lacks {want:?}");
    }
    let long = format!("{}.com", "a".repeat(64));
    assert!(Host::parse(&long).unwrap_err().to_string().contains("63"));
    let very_long = ["a".repeat(63).as_str(); 4].join(".");
    assert!(Host::parse(&very_long)
        .unwrap_err()
        .to_string()
        .contains("253"));
}

#[test]
fn allow_entries_parse() {
    let cases: &[(&str, &str)] = &[
        ("example.com", "example.com"),
        ("EXAMPLE.com.:443", "example.com:443"),
        ("*.example.com", "*.example.com"),
        ("*.Example.com:8443", "*.example.com:8443"),
        ("*.co.uk", "*.co.uk"),
        ("10.1.2.3", "10.1.2.3"),
        ("127.1:8080", "127.0.0.1:8080"),
        ("[::1]:443", "[::1]:443"),
        ("::1", "[::1]"),
        ("2001:db8::1", "[2001:db8::1]"),
        ("[2001:db8::1]", "[2001:db8::1]"),
        ("a.com:65535", "a.com:65535"),
        ("a.com:1", "a.com:1"),
    ];
    for (input, want) in cases {
        let r = AllowRule::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(r.to_string(), *want, "{input}");
        // The display form parses back to the same rule.
        assert_eq!(AllowRule::parse(&r.to_string()).unwrap(), r, "{input}");
    }
}

#[test]
fn allow_entries_refused() {
    let cases: &[(&str, &str)] = &[
        ("", "empty"),
        ("*", "too much"),
        ("*:443", "too much"),
        ("*.com", "too much"),
        ("*.com.", "too much"),
        ("*.", "too much"),
        ("*.*.com", "only as the whole first label"),
        ("a.*.com", "only as the whole first label"),
        ("*a.com", "only as the whole first label"),
        ("**.a.com", "only as the whole first label"),
        ("*.1.2.3", "IP addresses"),
        ("*.10.0.0.1", "IP addresses"),
        ("http://example.com", "--allow example.com"),
        ("https://u:p@example.com:8443/x", "--allow example.com:8443"),
        ("example.com/path", "--allow example.com"),
        ("example.com?q", "path"),
        ("example.com#f", "path"),
        ("user@example.com", "--allow example.com"),
        ("a.com:0", "port \"0\""),
        ("a.com:65536", "port \"65536\""),
        ("a.com:99999999", "1 to 65535"),
        ("a.com:", "port \"\""),
        ("a.com:http", "1 to 65535"),
        ("a.com:+80", "1 to 65535"),
        ("[::1]:0", "1 to 65535"),
        (" a.com", "whitespace"),
        ("a.com\r\nX: y", "whitespace"),
        ("a\0.com", "control"),
        ("x.invalid", ".invalid"),
        ("*.invalid.", "too much"),
        ("*.x.invalid", ".invalid"),
        ("localhost", "--forward"),
        ("LOCALHOST.:80", "--forward"),
        ("a.localhost", "--forward"),
        ("999.1.1.1", "not a valid one"),
    ];
    for (input, want) in cases {
        let err = AllowRule::parse(input).expect_err(input).to_string();
        assert!(err.contains(want), "{input:?}: {err:?} lacks {want:?}");
    }
    let long = "a".repeat(MAX_ENTRY_LEN + 1);
    assert!(AllowRule::parse(&long)
        .unwrap_err()
        .to_string()
        .contains("longer"));
}

#[test]
fn egress_parse_lists() {
    let dup = Egress::parse(&s(&["a.com", "A.com."]), &[]).unwrap_err();
    assert_eq!(dup, NetError::AllowDuplicate("a.com".into()));
    assert_eq!(Egress::parse(&[], &[0]).unwrap_err(), NetError::ForwardZero);
    assert_eq!(
        Egress::parse(&[], &[80, 80]).unwrap_err(),
        NetError::ForwardDuplicate(80)
    );
    let many: Vec<String> = (0..=MAX_ALLOW).map(|i| format!("h{i}.com")).collect();
    assert!(Egress::parse(&many, &[])
        .unwrap_err()
        .to_string()
        .contains("over the limit"));
    let ports: Vec<u16> = (1..=u16::try_from(MAX_FORWARD).unwrap() + 1).collect();
    assert!(Egress::parse(&[], &ports).is_err());
    let e = Egress::parse(&s(&["a.com", "a.com:443"]), &[1, 65535]).unwrap();
    assert_eq!(e.allow.len(), 2);
    assert_eq!(
        serde_json::to_value(&e).unwrap(),
        serde_json::json!({"allow": ["a.com", "a.com:443"], "forward": [1, 65535]})
    );
}

#[test]
fn verdicts() {
    let e = Egress::parse(
        &s(&[
            "example.com",
            "*.wild.org",
            "api.only.net:443",
            "10.0.0.5",
            "[2001:db8::1]:8443",
        ]),
        &[8080],
    )
    .unwrap();
    use Verdict::*;
    let name = |x: &str| match Host::parse(x).unwrap() {
        Host::Name(n) => n,
        Host::Ip(_) => unreachable!(),
    };
    let deny = Deny;
    let cases: &[(&str, u16, Verdict)] = &[
        ("example.com", 443, Resolve(name("example.com"), port(443))),
        ("EXAMPLE.COM.", 80, Resolve(name("example.com"), port(80))),
        ("www.example.com", 443, deny(DenyReason::NotAllowed)),
        ("badexample.com", 443, deny(DenyReason::NotAllowed)),
        ("a.wild.org", 1, Resolve(name("a.wild.org"), port(1))),
        ("a.b.wild.org", 1, Resolve(name("a.b.wild.org"), port(1))),
        ("wild.org", 443, deny(DenyReason::NotAllowed)),
        ("xwild.org", 443, deny(DenyReason::NotAllowed)),
        (
            "api.only.net",
            443,
            Resolve(name("api.only.net"), port(443)),
        ),
        ("api.only.net", 80, deny(DenyReason::NotAllowed)),
        (
            "10.0.0.5",
            22,
            Literal("10.0.0.5".parse().unwrap(), port(22)),
        ),
        (
            "012.0.0.5",
            22,
            Literal("10.0.0.5".parse().unwrap(), port(22)),
        ),
        ("10.0.0.6", 22, deny(DenyReason::NotAllowed)),
        (
            "[2001:db8:0::1]",
            8443,
            Literal("2001:db8::1".parse().unwrap(), port(8443)),
        ),
        ("[2001:db8::1]", 443, deny(DenyReason::NotAllowed)),
        ("127.0.0.1", 8080, Forward(port(8080))),
        ("127.1", 8080, Forward(port(8080))),
        ("2130706433", 8080, Forward(port(8080))),
        ("localhost", 8080, Forward(port(8080))),
        ("LocalHost.", 8080, Forward(port(8080))),
        ("127.0.0.1", 8081, deny(DenyReason::NotAllowed)),
        ("localhost", 8081, deny(DenyReason::NotForwarded)),
        ("x.localhost", 8080, deny(DenyReason::NotForwarded)),
        ("x.invalid", 443, deny(DenyReason::InvalidTld)),
        ("invalid", 443, deny(DenyReason::InvalidTld)),
        ("[::1]", 8080, deny(DenyReason::NotAllowed)),
    ];
    for (h, p, want) in cases {
        assert_eq!(&e.verdict(&host(h), port(*p)), want, "{h}:{p}");
    }
}

#[test]
fn a_wildcard_does_not_open_invalid() {
    let e = Egress::parse(&s(&["*.example.com"]), &[]).unwrap();
    assert_eq!(
        e.verdict(&host("x.invalid"), port(443)),
        Verdict::Deny(DenyReason::InvalidTld)
    );
}

#[test]
fn address_classes() {
    let cases: &[(&str, Option<AddrClass>)] = &[
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("2606:4700::1111", None),
        ("0.0.0.0", Some(AddrClass::Unspecified)),
        ("0.1.2.3", Some(AddrClass::Unspecified)),
        ("127.0.0.1", Some(AddrClass::Loopback)),
        ("127.255.0.9", Some(AddrClass::Loopback)),
        ("10.1.2.3", Some(AddrClass::Private)),
        ("172.16.0.1", Some(AddrClass::Private)),
        ("172.31.255.255", Some(AddrClass::Private)),
        ("172.32.0.1", None),
        ("192.168.1.1", Some(AddrClass::Private)),
        ("100.64.0.1", Some(AddrClass::Cgnat)),
        ("100.127.255.255", Some(AddrClass::Cgnat)),
        ("100.128.0.1", None),
        ("169.254.1.1", Some(AddrClass::LinkLocal)),
        ("169.254.169.254", Some(AddrClass::Metadata)),
        ("224.0.0.1", Some(AddrClass::Multicast)),
        ("255.255.255.255", Some(AddrClass::Broadcast)),
        ("240.0.0.1", Some(AddrClass::Reserved)),
        ("192.0.2.1", Some(AddrClass::Reserved)),
        ("::", Some(AddrClass::Unspecified)),
        ("::1", Some(AddrClass::Loopback)),
        ("::ffff:127.0.0.1", Some(AddrClass::Loopback)),
        ("::ffff:169.254.169.254", Some(AddrClass::Metadata)),
        ("::127.0.0.1", Some(AddrClass::Loopback)),
        ("64:ff9b::10.0.0.1", Some(AddrClass::Private)),
        ("64:ff9b::8.8.8.8", None),
        ("2002:7f00:1::", Some(AddrClass::Loopback)),
        ("2002:808:808::", None),
        ("fe80::1", Some(AddrClass::LinkLocal)),
        ("fec0::1", Some(AddrClass::LinkLocal)),
        ("fc00::1", Some(AddrClass::UniqueLocal)),
        ("fd12:3456::1", Some(AddrClass::UniqueLocal)),
        ("fd00:ec2::254", Some(AddrClass::Metadata)),
        ("ff02::1", Some(AddrClass::Multicast)),
        ("2001:db8::1", Some(AddrClass::Reserved)),
    ];
    for (ip, want) in cases {
        let got = classify(ip.parse().unwrap());
        assert_eq!(got, *want, "{ip}");
    }
}

#[test]
fn address_ok_honours_named_literals_and_own_addresses() {
    let e = Egress::parse(&s(&["svc.test", "127.0.0.1:9000", "10.0.0.5"]), &[]).unwrap();
    let ip = |x: &str| x.parse::<IpAddr>().unwrap();
    let own = [ip("203.0.114.7")];
    assert_eq!(
        e.address_ok(ip("127.0.0.1"), port(80), &own),
        Err(AddrClass::Loopback)
    );
    assert_eq!(e.address_ok(ip("127.0.0.1"), port(9000), &own), Ok(()));
    assert_eq!(
        e.address_ok(ip("::ffff:127.0.0.1"), port(9000), &own),
        Ok(())
    );
    assert_eq!(e.address_ok(ip("10.0.0.5"), port(1), &own), Ok(()));
    assert_eq!(
        e.address_ok(ip("10.0.0.6"), port(1), &own),
        Err(AddrClass::Private)
    );
    assert_eq!(
        e.address_ok(ip("203.0.114.7"), port(443), &own),
        Err(AddrClass::OwnInterface)
    );
    assert_eq!(e.address_ok(ip("8.8.4.4"), port(443), &own), Ok(()));
}

#[test]
fn targets() {
    let (h, p) = parse_target("Example.com.:443").unwrap();
    assert_eq!((h.to_string(), p.get()), ("example.com".into(), 443));
    let (h, p) = parse_target("[::1]:8080").unwrap();
    assert_eq!((h.to_string(), p.get()), ("[::1]".into(), 8080));
    for bad in [
        "example.com",
        "a.com:0",
        "a.com:x",
        ":443",
        "[::1]",
        "a b:1",
        "::1:80",
    ] {
        assert!(parse_target(bad).is_err(), "{bad}");
    }
}

#[test]
fn strict_subdomain() {
    let n = |x: &str| match host(x) {
        Host::Name(n) => n,
        Host::Ip(_) => unreachable!(),
    };
    assert!(n("a.example.com").is_strict_subdomain_of(&n("example.com")));
    assert!(!n("example.com").is_strict_subdomain_of(&n("example.com")));
    assert!(!n("aexample.com").is_strict_subdomain_of(&n("example.com")));
}
