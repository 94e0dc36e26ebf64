//! Bodies: the proxy's own short answers, and the bodies of a plain-HTTP
//! exchange, which count their bytes into the exchange's audit record
//! ([`Meter`]) and fail when no data arrives for the idle deadline.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt as _, Empty, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

use super::{BoxError, ProxyBody};
use crate::audit::{AuditRecord, AuditSink};
use crate::token::Token;

fn full(text: impl Into<Bytes>) -> ProxyBody {
    Full::new(text.into()).map_err(|n| match n {}).boxed()
}

pub(super) fn empty() -> ProxyBody {
    Empty::new().map_err(|n| match n {}).boxed()
}

pub(super) fn text_response(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(full(format!("{body}\n")));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The audit record of one plain-HTTP exchange, sent when both its bodies
/// are done (dropped).
pub(super) struct Meter {
    pub(super) record: Mutex<AuditRecord>,
    pub(super) up: AtomicU64,
    pub(super) down: AtomicU64,
    pub(super) start: Instant,
    pub(super) sink: Arc<dyn AuditSink>,
    pub(super) token: Token,
}

impl Drop for Meter {
    fn drop(&mut self) {
        let mut r = self
            .record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        r.bytes_up = self.up.load(Ordering::Relaxed);
        r.bytes_down = self.down.load(Ordering::Relaxed);
        r.duration_ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        r.redact(self.token.expose());
        self.sink.record(&r);
    }
}

/// A body that counts its data bytes into a [`Meter`] and fails when no
/// frame arrives for `idle`.
pub(super) struct Metered<B> {
    inner: B,
    meter: Arc<Meter>,
    up: bool,
    idle: Duration,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Metered<B> {
    pub(super) fn new(inner: B, meter: Arc<Meter>, up: bool, idle: Duration) -> Self {
        Metered {
            inner,
            meter,
            up,
            idle,
            timer: None,
        }
    }
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    let n = if this.up {
                        &this.meter.up
                    } else {
                        &this.meter.down
                    };
                    n.fetch_add(d.len() as u64, Ordering::Relaxed);
                }
                this.timer = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let idle = this.idle;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        Poll::Ready(Some(Err(
                            format!("no body data for {}s", idle.as_secs()).into()
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
