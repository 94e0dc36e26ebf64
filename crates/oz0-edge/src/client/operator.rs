//! An operator's side: nodes, jobs and the raw requests tests send.

use super::{decode, ClientError, Trust};
use crate::auth;
use crate::http::{self, EdgeUrl};
use crate::routing::JobRequest;
use crate::wire::{Accepted, ApiError, JobView, NodeView};

/// An operator's connection to the edge (the `oz0` CLI, tests).
#[derive(Debug, Clone)]
pub struct OperatorClient {
    edge: EdgeUrl,
    token: String,
}

impl OperatorClient {
    /// A client for `edge_url` with an operator token, trusting the
    /// system's CAs.
    pub fn new(edge_url: &str, token: &str) -> Result<OperatorClient, ClientError> {
        OperatorClient::with_trust(edge_url, token, &Trust::System)
    }

    /// As [`OperatorClient::new`], verifying the edge against `trust`.
    pub fn with_trust(
        edge_url: &str,
        token: &str,
        trust: &Trust,
    ) -> Result<OperatorClient, ClientError> {
        Ok(OperatorClient {
            edge: EdgeUrl::parse_with(edge_url, trust)?,
            token: token.to_string(),
        })
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, bytes::Bytes), ClientError> {
        http::request(
            &self.edge,
            method,
            path,
            &[("authorization", format!("Bearer {}", self.token))],
            body,
        )
        .await
    }

    /// Nodes, of one tenant or all.
    pub async fn nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeView>, ClientError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .node_page(tenant, after.as_deref(), Some(crate::MAX_PAGE))
                .await?;
            all.extend(page.nodes);
            match page.next {
                Some(n) => after = Some(n),
                None => return Ok(all),
            }
        }
    }

    /// One page of nodes (`after`: the previous page's `next`).
    pub async fn node_page(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: Option<i64>,
    ) -> Result<crate::wire::NodePage, ClientError> {
        let mut q = Vec::new();
        match tenant {
            Some(t) if crate::routing::is_tenant(t) => q.push(format!("tenant={t}")),
            Some(t) => return Err(ClientError::Url(format!("tenant {t:?}"))),
            None => {}
        }
        if let Some(a) = after {
            q.push(format!("after={}", query_value(a)?));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let (s, b) = self
            .call("GET", &format!("/v1/nodes?{}", q.join("&")), vec![])
            .await?;
        decode(s, &b)
    }

    /// One node, by id or name.
    pub async fn node(&self, id_or_name: &str) -> Result<NodeView, ClientError> {
        if !(auth::is_node_id(id_or_name) || crate::sanitize::is_node_name(id_or_name)) {
            return Err(ClientError::Refused {
                status: 404,
                refusal: ApiError {
                    status: 404,
                    error: "no_node".into(),
                    reason: "a node is named by its id (n + 24 hex digits) or its host name".into(),
                },
            });
        }
        let (s, b) = self
            .call("GET", &format!("/v1/nodes/{id_or_name}"), vec![])
            .await?;
        decode(s, &b)
    }

    /// Approves, drains, undrains or removes a node (`action`).
    pub async fn node_action(
        &self,
        id_or_name: &str,
        action: &str,
    ) -> Result<NodeView, ClientError> {
        if !(auth::is_node_id(id_or_name) || crate::sanitize::is_node_name(id_or_name)) {
            return Err(ClientError::Url(format!("node {id_or_name:?}")));
        }
        let (s, b) = self
            .call("POST", &format!("/v1/nodes/{id_or_name}/{action}"), vec![])
            .await?;
        decode(s, &b)
    }

    /// Submits a job; a refusal carries the edge's reason.
    pub async fn submit_job(
        &self,
        tenant: &str,
        job: &JobRequest,
    ) -> Result<Accepted, ClientError> {
        let (s, b) = self
            .call(
                "POST",
                &format!("/v1/tenants/{tenant}/jobs"),
                serde_json::to_vec(job).expect("serializes"),
            )
            .await?;
        decode(s, &b)
    }

    /// A job's state.
    pub async fn job(&self, tenant: &str, job_id: &str) -> Result<JobView, ClientError> {
        let (s, b) = self
            .call(
                "GET",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// A page of a tenant's jobs, newest first (`before`: the previous
    /// page's `next`).
    pub async fn jobs(
        &self,
        tenant: &str,
        state: Option<&str>,
        before: Option<&str>,
        limit: Option<i64>,
    ) -> Result<crate::wire::JobPage, ClientError> {
        let mut q = Vec::new();
        if let Some(s) = state {
            q.push(format!("state={}", query_value(s)?));
        }
        if let Some(b) = before {
            q.push(format!("before={}", query_value(b)?));
        }
        if let Some(l) = limit {
            q.push(format!("limit={l}"));
        }
        let path = format!("/v1/tenants/{tenant}/jobs?{}", q.join("&"));
        let (s, b) = self.call("GET", &path, vec![]).await?;
        decode(s, &b)
    }

    /// A job's output tails.
    pub async fn job_logs(
        &self,
        tenant: &str,
        job_id: &str,
    ) -> Result<crate::wire::JobLogs, ClientError> {
        let (s, b) = self
            .call(
                "GET",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}/logs"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// Cancels a job that has not ended: a queued one is never handed out,
    /// a leased one's node stops it at its next renewal. Refused
    /// (`job_ended`) when it had already ended.
    pub async fn cancel_job(&self, tenant: &str, job_id: &str) -> Result<JobView, ClientError> {
        let (s, b) = self
            .call(
                "POST",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}/cancel"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// The Nodes page's HTML.
    pub async fn nodes_page(&self) -> Result<String, ClientError> {
        let (s, b) = self.call("GET", "/nodes", vec![]).await?;
        if s == 200 {
            Ok(String::from_utf8_lossy(&b).into_owned())
        } else {
            decode(s, &b)
        }
    }
}

/// A query value the client puts in a URL: letters, digits and `._-:`.
fn query_value(s: &str) -> Result<&str, ClientError> {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b))
    {
        Ok(s)
    } else {
        Err(ClientError::Url(format!("query value {s:?}")))
    }
}

/// Sends one raw request (tests of refusals: forged signatures, replays).
pub async fn raw_request(
    edge_url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ClientError> {
    raw_request_with(edge_url, &Trust::System, method, path, headers, body).await
}

/// [`raw_request`], verifying the edge against `trust`.
pub async fn raw_request_with(
    edge_url: &str,
    trust: &Trust,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ClientError> {
    let url = EdgeUrl::parse_with(edge_url, trust)?;
    let (s, b) = http::request(&url, method, path, headers, body).await?;
    Ok((s, b.to_vec()))
}
