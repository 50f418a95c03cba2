//! Who is asking, and under which key: the caller from the authorizer context, the request's
//! one `Idempotency-Key`, and the operation id derived from both. Apart from the routes because
//! the command and the status read both scope what they store and read by it.

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use sha2::{Digest, Sha256};

use crate::command::{IdempotencyKey, KeyError, Principal};

/// The caller, as the idempotency scope and the events' `sourceSystem` know it: an IAM user by
/// its ARN, an assumed role by the role (never by the session, which changes per task, pod and
/// credential refresh: a retry from another session of the role is the same caller), a JWT
/// caller by its issuer and `sub` (else `client_id`), so two issuers' users never share a scope.
pub fn principal(request: &Request) -> Option<Principal> {
    let RequestContext::ApiGatewayV2(context) = request.request_context_ref()? else {
        return None;
    };
    let authorizer = context.authorizer.as_ref()?;
    if let Some(iam) = &authorizer.iam
        && let Some(arn) = iam.user_arn.as_deref().or(iam.caller_id.as_deref())
    {
        return Principal::new(iam_caller(arn));
    }
    let claims = &authorizer.jwt.as_ref()?.claims;
    let issuer = claims.get("iss").map(String::as_str).unwrap_or_default();
    let subject = match (claims.get("sub"), claims.get("client_id")) {
        (Some(sub), _) if !sub.is_empty() => format!("sub:{sub}"),
        (_, Some(client)) if !client.is_empty() => format!("client:{client}"),
        _ => return None,
    };
    Principal::new(format!("jwt:{issuer}|{subject}"))
}

/// `arn:<partition>:sts::<account>:assumed-role/<role>/<session>` is scoped as the role,
/// `arn:<partition>:iam::<account>:role/<role>` (role names are unique within an account, so
/// the name identifies the role whatever its path); any other ARN as it is.
fn iam_caller(arn: &str) -> String {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    if let [prefix, partition, "sts", "", account, resource] = parts.as_slice()
        && let Some(rest) = resource.strip_prefix("assumed-role/")
        && let Some((role, _session)) = rest.split_once('/')
    {
        return format!("{prefix}:{partition}:iam::{account}:role/{role}");
    }
    arn.to_owned()
}

/// The payment's operation id: `op_` + the first 24 hex of sha256(scope + "\n" + key). The
/// outbox event's `eventId` and the idempotency record's key (with the caller's scope): a
/// status read derives the record from it and the caller, no lookup of the key needed.
pub fn operation_id(principal: &Principal, key: &IdempotencyKey) -> String {
    format!(
        "op_{}",
        &hex::encode(Sha256::digest(
            format!("{}\n{}", principal.scope(), key.as_str()).as_bytes()
        ))[..24]
    )
}

/// The request's one `Idempotency-Key`. Payload 2.0 joins duplicate headers into one value
/// (commas, which [`IdempotencyKey::parse`] refuses); a request that still holds two header
/// values (another payload format) is refused the same way, never read as its first.
pub(crate) fn idempotency_key(request: &Request) -> Result<IdempotencyKey, KeyError> {
    let mut values = request.headers().get_all("idempotency-key").iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(KeyError::multiple());
    }
    IdempotencyKey::parse(first.map(|v| v.as_bytes()))
}

#[cfg(test)]
mod tests;
