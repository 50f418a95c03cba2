//! The call to the notification receiver, with the action id as its idempotency key.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::auth::Auth;

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// 2xx: the receiver has it (a replayed key is answered 2xx too).
    Accepted { status: u16 },
    /// The receiver says this request is wrong (400, 413, 422): recorded, never retried.
    Rejected { status: u16, reason: String },
    /// Anything else — 5xx, 408/409/425/429, and also 3xx, 401, 403, 404 (a moved, misconfigured
    /// or unauthorised endpoint says nothing about the notification), timeouts, connection
    /// failures: retried later with the same key, and alarmed through the DLQ if it lasts.
    /// `maybe_delivered`: the receiver may have it (no answer, the connection lost after
    /// sending, a 500/502/504), as opposed to a call that never reached it or was turned away.
    Failed {
        status: Option<u16>,
        reason: String,
        maybe_delivered: bool,
    },
}

/// What a receiver's status endpoint says about an action: 200 with `{"received": true}` for a
/// call it has taken in (delivered, or still being processed), `{"received": false}` for one
/// it never got; anything else says nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// `received: true`.
    Delivered,
    /// `received: false`.
    NotDelivered,
    /// No answer that says: asked again later, never a call meanwhile.
    Unanswered(String),
}

/// The hosts plain http may reach: this machine (the local pipeline's receiver), as the
/// template's `NotificationUrl` pattern allows. Anything else goes over TLS: a notice names a
/// customer and its account, and a bearer token or a signature must not cross a network bare.
const LOCAL_HOSTS: [&str; 4] = ["127.0.0.1", "localhost", "host.docker.internal", "[::1]"];

/// `url` (the setting `name`) parsed: https, or http to one of [`LOCAL_HOSTS`].
fn secure_url(name: &str, url: &str) -> Result<http::Uri, String> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|e| format!("{name} {url:?} is not a URL: {e}"))?;
    match (parsed.scheme_str(), parsed.host()) {
        (Some("https"), Some(_)) => Ok(parsed),
        (Some("http"), Some(host)) if LOCAL_HOSTS.contains(&host) => Ok(parsed),
        (Some("http"), _) => Err(format!(
            "{name} {url} is plain http to another machine: only https, or http to {}",
            LOCAL_HOSTS.join(", ")
        )),
        _ => Err(format!("{name} {url} must be an absolute https URL")),
    }
}

#[derive(Debug, Clone)]
pub struct Notifier {
    url: http::Uri,
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    /// `None`: the receiver deduplicates on `Idempotency-Key`. Else where it says whether it
    /// has an action (`GET <url>/<actionId>`), asked before any call that could repeat one.
    status_url: Option<String>,
    /// How the receiver knows the call is ours (on every call, status questions included).
    auth: Auth,
}

impl Notifier {
    /// `url` must be an absolute https URL (http only on this machine); TLS trusts the
    /// system's roots.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, String> {
        let url = secure_url("NOTIFICATION_URL", url)?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| format!("cannot load the system's TLS roots: {e}"))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            url,
            client: Client::builder(TokioExecutor::new()).build(https),
            timeout,
            status_url: None,
            auth: Auth::None,
        })
    }

    /// Authenticates every call with `auth`.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// For a receiver that does not deduplicate: `status_url` (https, as `url`) answers `GET
    /// <status_url>/<actionId>` as [`Status`] says.
    pub fn without_deduplication(mut self, status_url: &str) -> Result<Self, String> {
        secure_url("NOTIFICATION_STATUS_URL", status_url)?;
        self.status_url = Some(status_url.trim_end_matches('/').to_owned());
        Ok(self)
    }

    /// Gets the call's credentials at hand (see `Auth::prepare`): before the lease is renewed.
    pub async fn prepare(&self) -> Result<(), String> {
        tokio::time::timeout(self.timeout, self.auth.prepare())
            .await
            .unwrap_or_else(|_| Err("no credentials in time".into()))
    }

    /// Whether the receiver honours `Idempotency-Key` (a call may simply be repeated).
    pub fn deduplicates(&self) -> bool {
        self.status_url.is_none()
    }

    /// What the receiver says about `action_id` (only for one that does not deduplicate).
    pub async fn status(&self, action_id: &str) -> Status {
        let Some(base) = &self.status_url else {
            return Status::Unanswered("the receiver has no status endpoint".into());
        };
        let request = http::Request::get(format!("{base}/{}", path_segment(action_id)))
            .body(Full::new(Bytes::new()));
        let mut request = match request {
            Ok(request) => request,
            Err(e) => return Status::Unanswered(format!("cannot build the status request: {e}")),
        };
        if let Err(reason) = self.auth.apply(&mut request, &[]).await {
            return Status::Unanswered(reason);
        }
        match tokio::time::timeout(self.timeout, self.client.request(request)).await {
            Err(_) => Status::Unanswered(format!("no status within {:?}", self.timeout)),
            Ok(Err(e)) => Status::Unanswered(format!("status call failed: {e}")),
            Ok(Ok(response)) => {
                let status = response.status().as_u16();
                self.auth.answered(status).await;
                if status != 200 {
                    // A bare 404 may be a wrong path or a gateway's: it proves nothing.
                    return Status::Unanswered(format!("status answered HTTP {status}"));
                }
                let body = tokio::time::timeout(self.timeout, first_bytes(response.into_body()))
                    .await
                    .unwrap_or_default();
                match serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v["received"].as_bool())
                {
                    Some(true) => Status::Delivered,
                    Some(false) => Status::NotDelivered,
                    None => Status::Unanswered(
                        "status answered 200 without a boolean `received`".into(),
                    ),
                }
            }
        }
    }

    /// How long a call may take before it counts as failed.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn send(&self, action_id: &str, payload: &Value) -> Delivery {
        let body = Bytes::from(payload.to_string());
        let request = http::Request::post(self.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("Idempotency-Key", action_id)
            .body(Full::new(body.clone()));
        let mut request = match request {
            Ok(request) => request,
            Err(e) => {
                return Delivery::Rejected {
                    status: 0,
                    reason: format!("cannot build the request: {e}"),
                };
            }
        };
        // No credentials, no call: retried (a secret unreadable for a moment is not a notice
        // to drop). Bounded: the call runs under a lease sized for it.
        let applied = tokio::time::timeout(self.timeout, self.auth.apply(&mut request, &body))
            .await
            .unwrap_or_else(|_| Err("no credentials in time".into()));
        if let Err(reason) = applied {
            return Delivery::Failed {
                status: None,
                reason,
                maybe_delivered: false,
            };
        }
        let response = match tokio::time::timeout(self.timeout, self.client.request(request)).await
        {
            Err(_) => {
                return Delivery::Failed {
                    status: None,
                    reason: format!("no answer within {:?}", self.timeout),
                    maybe_delivered: true,
                };
            }
            Ok(Err(e)) => {
                return Delivery::Failed {
                    status: None,
                    reason: format!("call failed: {e}"),
                    // A connection never made sent nothing; any other failure may have.
                    maybe_delivered: !e.is_connect(),
                };
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        self.auth.answered(status).await;
        // The body only serves the recorded reason (kept for years): its first bytes, read no
        // further, whatever the receiver sends.
        let body = tokio::time::timeout(self.timeout, first_bytes(response.into_body()))
            .await
            .unwrap_or_default();
        classify(status, reason_text(&body))
    }
}

/// At most this much of a receiver's answer is read, and this many characters kept.
const BODY_READ_BYTES: usize = 1024;
const REASON_CHARS: usize = 256;

/// The first [`BODY_READ_BYTES`] of `body`: frames are read only until they are there.
async fn first_bytes(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut kept = Vec::with_capacity(BODY_READ_BYTES);
    while kept.len() < BODY_READ_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    let room = BODY_READ_BYTES - kept.len();
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            _ => break,
        }
    }
    kept
}

/// A receiver's answer as a recorded reason: at most [`REASON_CHARS`] characters, control
/// characters (line breaks, escapes a terminal or log viewer would act on) as spaces.
fn reason_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .chars()
        .take(REASON_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Only answers that mean "this request is wrong" are final: 400 (malformed), 413 (too large)
/// and 422 (understood, refused). A customer notification is never dropped because of the
/// endpoint's state (moved, unauthorised, not found): that is retried with the same key.
fn classify(status: u16, body: String) -> Delivery {
    let reason = format!("HTTP {status}: {body}");
    match status {
        200..=299 => Delivery::Accepted { status },
        400 | 413 | 422 => Delivery::Rejected { status, reason },
        _ => Delivery::Failed {
            status: Some(status),
            reason,
            // A server error that is not an explicit "not now" (503) may have done the work.
            maybe_delivered: matches!(status, 500..=599) && status != 503,
        },
    }
}

/// An action id as one path segment: unreserved characters and `:` as they are, the rest
/// percent-encoded.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_receiver_answers_should_finalise_only_what_says_the_request_is_wrong() {
        for status in [200, 201, 204] {
            assert!(matches!(
                classify(status, String::new()),
                Delivery::Accepted { .. }
            ));
        }
        for status in [400, 413, 422] {
            assert!(
                matches!(classify(status, String::new()), Delivery::Rejected { .. }),
                "{status}"
            );
        }
        for status in [301, 302, 307, 401, 403, 404, 408, 409, 425, 429, 503] {
            assert!(
                matches!(
                    classify(status, String::new()),
                    Delivery::Failed {
                        maybe_delivered: false,
                        ..
                    }
                ),
                "{status}: turned away, never delivered"
            );
        }
        for status in [500, 502, 504] {
            assert!(
                matches!(
                    classify(status, String::new()),
                    Delivery::Failed {
                        maybe_delivered: true,
                        ..
                    }
                ),
                "{status}: may have done the work"
            );
        }
    }

    #[test]
    fn when_a_receiver_is_named_by_plain_http_should_take_it_only_on_this_machine() {
        let timeout = Duration::from_secs(1);
        for local in [
            "http://127.0.0.1:9000/notices",
            "http://localhost/n",
            "http://host.docker.internal:8080",
            "http://[::1]:9000/n",
            "https://notices.example.com/v1",
        ] {
            let notifier = Notifier::new(local, timeout).expect(local);
            notifier.without_deduplication(local).expect(local);
        }
        for remote in [
            "http://notices.example.com/v1",
            "http://10.0.0.7/n",
            "http://127.0.0.1.example.com/n",
            "ftp://notices.example.com/",
        ] {
            let refused = Notifier::new(remote, timeout).expect_err(remote);
            assert!(refused.contains("NOTIFICATION_URL"), "{refused}");
            let notifier = Notifier::new("https://notices.example.com", timeout).expect("https");
            let refused = notifier.without_deduplication(remote).expect_err(remote);
            assert!(refused.contains("NOTIFICATION_STATUS_URL"), "{refused}");
        }
    }

    #[test]
    fn when_an_action_id_names_a_status_path_should_keep_it_one_segment() {
        assert_eq!(
            path_segment("collections_notification:acc_1:DPD_30_59:evt/1 x"),
            "collections_notification:acc_1:DPD_30_59:evt%2F1%20x"
        );
    }
}
