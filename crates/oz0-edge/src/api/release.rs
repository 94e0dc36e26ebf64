//! The releases a node fetches (`--release-dir`): a version's signed
//! manifest and its files in pieces, each request signed by the node's key.
//! The edge serves the bytes as they are; the node checks them against the
//! release key it was built with (see [`crate::release`]).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::Json;
use base64::Engine;

use super::error::{parse_json, ApiResult};
use super::Edge;
use crate::release::{self, Piece, ReleaseRequest, Signed};
use crate::wire::ApiError;

fn no_release(version: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_release",
        format!("this edge serves no release {}: sign one into its --release-dir with `oz0 release sign --version {}`", version.escape_debug(), version.escape_debug()),
    )
}

/// Reads with the blocking file calls off the runtime.
async fn read(edge: &Edge, req: ReleaseRequest, max: u64) -> ApiResult<Option<Vec<u8>>> {
    let Some(dir) = edge.cfg.release_dir.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no_release",
            "this edge serves no releases: start it with --release-dir DIR",
        ));
    };
    let r = tokio::task::spawn_blocking(move || match &req.name {
        None => release::read_manifest(&dir, &req.version),
        Some(n) => release::read_piece(&dir, &req.version, n, req.offset, max),
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "reading the release failed",
        )
    })?;
    r.map_err(|e| {
        crate::log::error(&format!("release: {e}"), None);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "release",
            "the edge could not read its release (its log says why)",
        )
    })
}

/// A version's signed manifest.
pub(super) async fn manifest(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Signed>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    edge.heard_from(&node, now).await?;
    let mut req: ReleaseRequest = parse_json(&body, "release request")?;
    req.name = None;
    let version = req.version.clone();
    let bytes = read(&edge, req, release::MAX_MANIFEST_BYTES)
        .await?
        .ok_or_else(|| no_release(&version))?;
    let signed: Signed = serde_json::from_slice(&bytes).map_err(|e| {
        crate::log::error(&format!("release {version}: its release.json: {e}"), None);
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "release",
            "the edge's release manifest does not parse (its log says why)",
        )
    })?;
    Ok(Json(signed))
}

/// A piece of a version's file.
pub(super) async fn piece(
    State(edge): State<Arc<Edge>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Piece>> {
    let (node, now) = edge.node_request(&method, &uri, &h, &body).await?;
    edge.heard_from(&node, now).await?;
    let req: ReleaseRequest = parse_json(&body, "release request")?;
    if req.name.is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "a piece names its file: send name",
        ));
    }
    let version = req.version.clone();
    let bytes = read(&edge, req, release::PIECE_BYTES)
        .await?
        .ok_or_else(|| no_release(&version))?;
    Ok(Json(Piece {
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    }))
}
