//! How a refusal leaves the edge: [`ApiError`] as an HTTP response, the
//! conversions from store and authentication errors (logged, then worded
//! for the caller), and request bodies parsed without echoing them.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::auth::AuthError;
use crate::log::{Level, Tally};
use crate::store::StoreError;
use crate::wire::ApiError;

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &str, reason: impl Into<String>) -> ApiError {
        ApiError {
            status: status.as_u16(),
            error: code.to_string(),
            reason: reason.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (status, Json(&self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            // Bearer: no browser offers to send it, or prompts for it
            // (the Nodes page asks for Basic itself).
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"oz0-edge\""),
            );
        }
        r
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        crate::log::error(&format!("store error: {e}"), None);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store",
            "the edge's store failed; retry later",
        )
    }
}

/// Refusals of each kind, logged a few lines an interval however many
/// come (a fleet of unregistered nodes polling sends thousands).
static REFUSED: [Tally; 7] = [const { Tally::new(Level::Warn) }; 7];

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        let kind = match e {
            AuthError::Header(_) => 0,
            AuthError::UnknownNode(_) => 1,
            AuthError::Skew(_) => 2,
            AuthError::Signature(_) => 3,
            AuthError::Replay(_) => 4,
            AuthError::Token => 5,
            AuthError::PublicKey => 6,
        };
        REFUSED[kind].note(&format!("refused: {e}"), None);
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthenticated", e.to_string())
    }
}

pub(super) type ApiResult<T> = Result<T, ApiError>;

pub(super) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> ApiResult<T> {
    // The parser's message can quote the sender's text; only its position is returned.
    serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the {what} does not parse (line {}, column {}): send the documented JSON, with no unknown fields", e.line(), e.column()),
        )
    })
}
