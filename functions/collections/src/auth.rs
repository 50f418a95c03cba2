//! How the notification receiver knows a call is ours, chosen per destination in the template
//! (`NotificationAuth`): nothing (a receiver inside the network boundary, the local one), AWS
//! Signature V4 with the function's role (a receiver behind API Gateway's IAM authorizer or a
//! Lambda function URL), a bearer token kept in Secrets Manager and rotated there without a
//! redeploy, or an HMAC-SHA256 signature of each request under such a secret (the receiver
//! proves the body and the time, and no token crosses the wire). No credential is ever logged
//! or recorded.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use hmac_sha2::Sha256;
use http_body_util::Full;
use tokio::sync::Mutex;

/// How long a secret's value is used before it is read again (a rotation reaches every warm
/// instance within this, or at its receiver's first 401/403).
const SECRET_REUSE: Duration = Duration::from_secs(300);

#[derive(Clone)]
pub enum Auth {
    None,
    /// Signed for `service` (`execute-api`, `lambda`) in `region` with the role's credentials.
    SigV4 {
        credentials: SharedCredentialsProvider,
        region: String,
        service: String,
    },
    /// `Authorization: Bearer <the secret's current value>`.
    Bearer(Arc<SecretToken>),
    /// `Servicing-Signature: t=<unix seconds>,v1=<hex>`, keyed by the secret's current value
    /// ([`signature`]).
    Hmac(Arc<SecretToken>),
}

/// The header an `Hmac` call is signed in.
pub const SIGNATURE_HEADER: &str = "servicing-signature";

/// The shortest signing secret accepted, in bytes: HMAC-SHA256's output size (RFC 2104 §3).
pub const MIN_SIGNING_SECRET: usize = 32;

/// What a request's `v1` signature covers: the time (a receiver refuses one more than 5
/// minutes from its clock), the method and the request-target exactly as sent — the path
/// percent-encoded as on the wire, with its query (a status question is not a notice) — the
/// `Idempotency-Key` (empty on a status question: a captured notice cannot be replayed under
/// another key) and the exact body bytes.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    pub t: u64,
    pub method: &'a str,
    pub target: &'a str,
    pub idempotency_key: &'a str,
    pub body: &'a [u8],
}

/// The `v1` signature: lowercase hex of HMAC-SHA256 under `secret` over
/// `<t>\n<METHOD>\n<request-target>\n<Idempotency-Key>\n<body>`. What a receiver recomputes.
pub fn signature(secret: &[u8], signed: &Signed<'_>) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length");
    let Signed {
        t,
        method,
        target,
        idempotency_key,
        body,
    } = signed;
    mac.update(format!("{t}\n{method}\n{target}\n{idempotency_key}\n").as_bytes());
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("Auth::None"),
            Auth::SigV4 {
                region, service, ..
            } => write!(f, "Auth::SigV4({service}, {region})"),
            Auth::Bearer(token) => write!(f, "Auth::Bearer({})", token.secret_id),
            Auth::Hmac(secret) => write!(f, "Auth::Hmac({})", secret.secret_id),
        }
    }
}

/// A Secrets Manager secret's value, read when first needed and again after [`SECRET_REUSE`]
/// or after the receiver refused it.
pub struct SecretToken {
    client: aws_sdk_secretsmanager::Client,
    secret_id: String,
    cached: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for SecretToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value.
        write!(f, "SecretToken({})", self.secret_id)
    }
}

impl SecretToken {
    pub fn new(client: aws_sdk_secretsmanager::Client, secret_id: &str) -> Self {
        Self {
            client,
            secret_id: secret_id.to_owned(),
            cached: Mutex::new(None),
        }
    }

    async fn value(&self) -> Result<String, String> {
        let mut cached = self.cached.lock().await;
        if let Some((value, read)) = cached.as_ref()
            && read.elapsed() < SECRET_REUSE
        {
            return Ok(value.clone());
        }
        let answer = self
            .client
            .get_secret_value()
            .secret_id(&self.secret_id)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot read the receiver's secret ({}): {}",
                    self.secret_id,
                    aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
                )
            })?;
        let value = answer
            .secret_string()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("the secret {} holds no string", self.secret_id))?
            .to_owned();
        *cached = Some((value.clone(), Instant::now()));
        Ok(value)
    }

    /// The value as a signing key: refused when too short to be one.
    async fn signing_key(&self) -> Result<String, String> {
        let key = self.value().await?;
        if key.len() < MIN_SIGNING_SECRET {
            return Err(format!(
                "the receiver's signing secret {} is {} bytes, at least {MIN_SIGNING_SECRET} are needed",
                self.secret_id,
                key.len()
            ));
        }
        Ok(key)
    }

    /// The receiver refused the value: read it again next time (it may have been rotated).
    async fn forget(&self) {
        *self.cached.lock().await = None;
    }
}

impl Auth {
    /// Adds the credentials to `request` (its body is `body`). An error is a call not made.
    pub(crate) async fn apply(
        &self,
        request: &mut http::Request<Full<Bytes>>,
        body: &[u8],
    ) -> Result<(), String> {
        match self {
            Auth::None => Ok(()),
            Auth::Bearer(token) => {
                let value =
                    http::HeaderValue::from_str(&format!("Bearer {}", token.value().await?))
                        .map_err(|_| {
                            "the receiver's token is not a valid header value".to_owned()
                        })?;
                request
                    .headers_mut()
                    .insert(http::header::AUTHORIZATION, value);
                Ok(())
            }
            Auth::Hmac(secret) => {
                let key = secret.signing_key().await?;
                let t = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_err(|_| "the clock is before 1970".to_owned())?
                    .as_secs();
                let target = request
                    .uri()
                    .path_and_query()
                    .map_or("/", http::uri::PathAndQuery::as_str);
                let idempotency_key = request
                    .headers()
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                let v1 = signature(
                    key.as_bytes(),
                    &Signed {
                        t,
                        method: request.method().as_str(),
                        target,
                        idempotency_key,
                        body,
                    },
                );
                let value = http::HeaderValue::from_str(&format!("t={t},v1={v1}"))
                    .expect("digits and hex are a valid header value");
                request.headers_mut().insert(SIGNATURE_HEADER, value);
                Ok(())
            }
            Auth::SigV4 {
                credentials,
                region,
                service,
            } => {
                let credentials = credentials
                    .provide_credentials()
                    .await
                    .map_err(|e| format!("no credentials to sign with: {e}"))?;
                let identity = credentials.into();
                let params = aws_sigv4::sign::v4::SigningParams::builder()
                    .identity(&identity)
                    .region(region)
                    .name(service)
                    .time(SystemTime::now())
                    .settings(aws_sigv4::http_request::SigningSettings::default())
                    .build()
                    .map_err(|e| format!("cannot sign: {e}"))?
                    .into();
                let headers: Vec<(&str, &str)> = request
                    .headers()
                    .iter()
                    .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
                    .collect();
                let uri = request.uri().to_string();
                let signable = aws_sigv4::http_request::SignableRequest::new(
                    request.method().as_str(),
                    uri,
                    headers.into_iter(),
                    aws_sigv4::http_request::SignableBody::Bytes(body),
                )
                .map_err(|e| format!("cannot sign: {e}"))?;
                let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)
                    .map_err(|e| format!("cannot sign: {e}"))?
                    .into_parts();
                instructions.apply_to_request_http1x(request);
                Ok(())
            }
        }
    }

    /// Makes sure the credentials are at hand (a bearer token read, role credentials
    /// resolved), so that adding them to a call takes no request: done before the lease is
    /// renewed for the call.
    pub(crate) async fn prepare(&self) -> Result<(), String> {
        match self {
            Auth::None => Ok(()),
            Auth::Bearer(token) => token.value().await.map(|_| ()),
            Auth::Hmac(secret) => secret.signing_key().await.map(|_| ()),
            Auth::SigV4 { credentials, .. } => credentials
                .provide_credentials()
                .await
                .map(|_| ())
                .map_err(|e| format!("no credentials to sign with: {e}")),
        }
    }

    /// The receiver answered `status`: a refused secret (a bearer token, a signing key) is
    /// read again next time.
    pub(crate) async fn answered(&self, status: u16) {
        if let (Auth::Bearer(token) | Auth::Hmac(token), 401 | 403) = (self, status) {
            token.forget().await;
        }
    }
}
