//! The checks of what a run may reach and carry: egress (only through the proxy, only what is allowed), ingress (nothing of the host reaches in) and environment (nothing of the node's).

use super::*;
use oz0_core::selftest::parts::{judge_environment, Egress, Server, GIVEN};

// --- egress -----------------------------------------------------------------

pub(super) fn check_egress(c: &mut Ctx) -> CheckResult {
    let e = Egress::start()?;
    let work = c.dir("egress")?;
    let out = work.join("r.json");
    let args = e.probe_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut req = c.request(&work, probe_cmd(&out, &args));
    req.allow = vec![e.allow()];
    req.forward = vec![e.forwarded.port];
    c.launch(req, None)?;
    e.judge(&read_report(&out)?)
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
        let h = s.spawn(|| c.launch(req, Some(cancel_r)));
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
    req.env = vec![EnvVar::new(GIVEN.0, GIVEN.1).map_err(|e| e.to_string())?];
    c.launch(req, None)?;
    // Linux adds nothing of its own to a run's environment.
    judge_environment(&read_report(&out)?, &ua, &[])
}
