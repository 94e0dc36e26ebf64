//! An operator's side: nodes, jobs and the raw requests tests send.

use super::{decode, ClientError, Trust};
use crate::auth;
use crate::http::{self, EdgeUrl};
use crate::routing::{JobRequest, RawJobRequest};
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

    /// Nodes, of one tenant or all, heard from within a day.
    pub async fn nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeView>, ClientError> {
        self.nodes_with(tenant, false).await
    }

    /// Nodes, of one tenant or all; with `all`, also those not heard from
    /// for a day and more.
    pub async fn nodes_with(
        &self,
        tenant: Option<&str>,
        all_nodes: bool,
    ) -> Result<Vec<NodeView>, ClientError> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self
                .node_page_with(tenant, after.as_deref(), Some(crate::MAX_PAGE), all_nodes)
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
        self.node_page_with(tenant, after, limit, false).await
    }

    /// One page of nodes; with `all`, also those not heard from for a day.
    pub async fn node_page_with(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: Option<i64>,
        all: bool,
    ) -> Result<crate::wire::NodePage, ClientError> {
        let mut q = Vec::new();
        if all {
            q.push("all=true".to_string());
        }
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

    /// Drains a node: no new work; the jobs it still runs after
    /// `deadline_s` seconds go back to their queues (it stops them).
    pub async fn drain_node(
        &self,
        id_or_name: &str,
        deadline_s: Option<u64>,
    ) -> Result<NodeView, ClientError> {
        if !(auth::is_node_id(id_or_name) || crate::sanitize::is_node_name(id_or_name)) {
            return Err(ClientError::Url(format!("node {id_or_name:?}")));
        }
        let q = deadline_s
            .map(|d| format!("?deadline_s={d}"))
            .unwrap_or_default();
        let (s, b) = self
            .call("POST", &format!("/v1/nodes/{id_or_name}/drain{q}"), vec![])
            .await?;
        decode(s, &b)
    }

    /// The tenants the edge serves.
    pub async fn tenants(&self) -> Result<Vec<String>, ClientError> {
        let (s, b) = self.call("GET", "/v1/tenants", vec![]).await?;
        decode::<crate::wire::Tenants>(s, &b).map(|t| t.tenants)
    }

    /// Queues a job again (a new job with its kind, origin, needs and
    /// payload).
    pub async fn rerun_job(&self, tenant: &str, job_id: &str) -> Result<Accepted, ClientError> {
        let (s, b) = self
            .call(
                "POST",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}/rerun"),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// Submits a job; a refusal carries the edge's reason.
    pub async fn submit_job(
        &self,
        tenant: &str,
        job: &JobRequest,
    ) -> Result<Accepted, ClientError> {
        self.submit_raw_job(tenant, &RawJobRequest::from(job.clone()))
            .await
    }

    /// Submits a job as it is sent, its payload not read as its kind's
    /// type here (the edge reads it, and refuses what does not read).
    pub async fn submit_raw_job(
        &self,
        tenant: &str,
        job: &RawJobRequest,
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

    /// What a job wrote after byte `stdout_after` of its stdout and
    /// `stderr_after` of its stderr, held up to `wait_ms` (at most
    /// [`crate::wire::MAX_WAIT_MS`]) until there is some or the job
    /// ended; the answer has its state and exit status.
    pub async fn job_logs_after(
        &self,
        tenant: &str,
        job_id: &str,
        stdout_after: Option<i64>,
        stderr_after: Option<i64>,
        wait_ms: u64,
    ) -> Result<crate::wire::JobLogs, ClientError> {
        let mut q = vec![format!("wait_ms={wait_ms}")];
        if let Some(a) = stdout_after {
            q.push(format!("stdout_after={a}"));
        }
        if let Some(a) = stderr_after {
            q.push(format!("stderr_after={a}"));
        }
        let (s, b) = self
            .call(
                "GET",
                &format!("/v1/tenants/{tenant}/jobs/{job_id}/logs?{}", q.join("&")),
                vec![],
            )
            .await?;
        decode(s, &b)
    }

    /// Connections (and TLS handshakes) this client opened so far.
    pub fn connections_opened(&self) -> u64 {
        self.edge.connections_opened()
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
