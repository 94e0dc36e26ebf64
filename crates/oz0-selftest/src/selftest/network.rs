//! The checks of what a run may reach and carry: egress (only through the proxy, only what is allowed), ingress (nothing of the host reaches in) and environment (nothing of the node's).

use super::*;

// --- egress -----------------------------------------------------------------

/// A loopback HTTP server answering 200 to everything, until dropped. It
/// counts the connections it accepted.
struct Server {
    port: u16,
    stop: Arc<AtomicBool>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Server {
    fn start() -> Result<Server, String> {
        let l = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("cannot listen on loopback: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s2, a2) = (stop.clone(), accepted.clone());
        std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        a2.fetch_add(1, Ordering::SeqCst);
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(Server {
            port,
            stop,
            accepted,
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

pub(super) fn check_egress(c: &mut Ctx) -> CheckResult {
    let allowed = Server::start()?;
    let forwarded = Server::start()?;
    let work = c.dir("egress")?;
    let out = work.join("r.json");
    let a = format!("127.0.0.1:{}", allowed.port);
    let f = format!("127.0.0.1:{}", forwarded.port);
    let ua = format!("http://{a}/");
    let uf = format!("http://{f}/");
    let unlisted = "http://oz0-selftest.invalid/";
    let args = [
        "--connect",
        &a,
        "--connect",
        &f,
        "--proxy-get",
        &ua,
        "--proxy-get",
        &uf,
        "--proxy-get-noauth",
        &ua,
        "--proxy-get",
        unlisted,
    ];
    let mut req = c.request(&work, probe_cmd(&out, &args));
    req.allow = vec![a.clone()];
    req.forward = vec![forwarded.port];
    c.launch(req, Some(c.cfg.egress), None, None)?;
    let r = read_report(&out)?;
    // Each listener must have seen exactly the one connection the proxy made
    // for it. (A direct "connect ok" alone may have met the run's own bridge,
    // whose port inside can equal a host port.)
    for (t, s) in [(&a, &allowed), (&f, &forwarded)] {
        let n = s.accepted.load(Ordering::SeqCst);
        if n > 1 || (r["connect"][t] == "ok" && n != 1) {
            return Err(format!(
                "a direct connection to the host's {t} succeeded ({n} connections reached it)"
            ));
        }
    }
    let get = |k: &str| r["proxy_get"][k].clone();
    if get(&format!("auth {ua}")) != 200 {
        return Err(format!(
            "the allowed host {a} did not answer through the proxy: {}",
            get(&format!("auth {ua}"))
        ));
    }
    if get(&format!("auth {uf}")) != 200 {
        return Err(format!(
            "the forwarded port {} did not answer through the proxy: {}",
            forwarded.port,
            get(&format!("auth {uf}"))
        ));
    }
    if get(&format!("noauth {ua}")) != 407 {
        return Err(format!(
            "the proxy answered {} without the run's token (407 expected)",
            get(&format!("noauth {ua}"))
        ));
    }
    if get(&format!("auth {unlisted}")) != 403 {
        return Err(format!(
            "a host the allowlist does not name got {} (403 expected)",
            get(&format!("auth {unlisted}"))
        ));
    }
    Ok(format!("direct connections to {a} and the forwarded port refused; through the proxy {a} and the forwarded port answer; 407 without the token; 403 for a name the allowlist does not name"))
}

// --- ingress ----------------------------------------------------------------

pub(super) fn check_ingress(c: &mut Ctx) -> CheckResult {
    let port = TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port: {e}"))?
        .port();
    let work = c.dir("ingress")?;
    let out = work.join("r.json");
    let ps = port.to_string();
    let req = c.request(
        &work,
        probe_cmd(&out, &["--listen", &ps, "--hold-ms", "20000"]),
    );
    let (cancel_r, cancel_w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let c = &*c;
    let (reached, run) = std::thread::scope(|s| {
        let h = s.spawn(|| c.launch(req, None, None, Some(cancel_r)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !out.exists() && Instant::now() < deadline && !h.is_finished() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let reached =
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
                .is_ok();
        let _ = rustix::io::write(&cancel_w, b"x");
        let run = h
            .join()
            .unwrap_or_else(|_| Err("the listening run panicked".to_string()));
        (reached, run)
    });
    let o = run?;
    let r = read_report(&out)?;
    if r["listen"] != "ok" {
        return Err(format!(
            "the process in the sandbox could not listen on its loopback: {}",
            r["listen"]
        ));
    }
    if reached {
        return Err(format!(
            "the host reached a listener inside the sandbox on 127.0.0.1:{port}"
        ));
    }
    if o.ended != Ended::Cancelled {
        return Err("the listening run did not stay up for the check".into());
    }
    Ok(format!("a process in the sandbox listened on its 127.0.0.1:{port}; the host could not reach it ({} ms)", ms(t.elapsed())))
}

// --- environment --------------------------------------------------------------

pub(super) fn check_environment(c: &mut Ctx) -> CheckResult {
    let server = Server::start()?;
    let work = c.dir("env")?;
    let out = work.join("r.json");
    let a = format!("127.0.0.1:{}", server.port);
    let ua = format!("http://{a}/");
    let mut req = c.request(&work, probe_cmd(&out, &["--env", "--proxy-get", &ua]));
    req.allow = vec![a];
    req.env = vec![EnvVar::new("OZ0SELFTEST_GIVEN", "given").map_err(|e| e.to_string())?];
    c.launch(req, Some(c.cfg.egress), None, None)?;
    let r = read_report(&out)?;
    let env = r["env"]
        .as_object()
        .ok_or("the probe reported no environment")?;
    if let Some(k) = env
        .keys()
        .find(|k| k.to_ascii_uppercase().starts_with("OZ0_"))
    {
        return Err(format!("the node's variable {k} reached the run"));
    }
    if env.get("OZ0SELFTEST_GIVEN").and_then(|v| v.as_str()) != Some("given") {
        return Err("the caller's variable did not reach the run".into());
    }
    for need in [
        "PATH",
        "HOME",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        if !env.contains_key(need) {
            return Err(format!("{need} is missing"));
        }
    }
    if env.contains_key("NO_PROXY") || env.contains_key("no_proxy") {
        return Err("NO_PROXY is set".into());
    }
    let allowed: std::collections::BTreeSet<&str> = [
        "OZ0SELFTEST_GIVEN",
        "PATH",
        "HOME",
        "TMPDIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .collect();
    // The C library or the kernel may add nothing; anything else leaked.
    if let Some(k) = env
        .keys()
        .find(|k| !allowed.contains(k.as_str()) && k.as_str() != "PWD")
    {
        return Err(format!("{k} reached the run without being given"));
    }
    if r["proxy_get"][format!("auth {ua}")] != 200 {
        return Err("the proxy variables do not carry the run's token".into());
    }
    Ok("the caller's variable, PATH, HOME, TMPDIR and the proxy's with the run's token; no OZ0_ variable of the node".into())
}
