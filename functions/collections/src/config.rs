//! The collections consumer's settings, read once at its cold start.

use std::time::Duration;

use servicing_settings::{ConfigError, FromSettings, Settings};
use servicing_store::StoreConfig;

use crate::CONSUMER;

/// How long one notification call may take (the lease on an action is twice this plus 2 s).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB table (`TABLE_NAME`, required).
    pub table: String,
    /// The customer-notification endpoint (`NOTIFICATION_URL`, required).
    pub notification_url: String,
    /// Whether the receiver honours `Idempotency-Key` (`NOTIFICATION_DEDUPLICATES`, default
    /// true). When it does not, an attempt whose outcome is unknown is never simply repeated:
    /// the next one asks the status endpoint first.
    pub receiver_deduplicates: bool,
    /// Where the receiver says whether it has an action (`NOTIFICATION_STATUS_URL`: `GET
    /// <url>/<actionId>` answers 200 `{"received": true|false}`); required when the receiver
    /// does not deduplicate.
    pub status_url: Option<String>,
    /// How calls are authenticated (`NOTIFICATION_AUTH`: `none`, `sigv4`, `bearer`, `hmac`).
    pub auth: NotificationAuth,
}

/// `NOTIFICATION_AUTH` and what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotificationAuth {
    None,
    /// Signed with the role's credentials for `service` (`NOTIFICATION_SIGV4_SERVICE`, default
    /// `execute-api`; `lambda` for a function URL) in the receiver's `region`
    /// (`NOTIFICATION_SIGV4_REGION`, from its ARN; default the function's).
    SigV4 {
        service: String,
        region: Option<String>,
    },
    /// The value of the Secrets Manager secret `NOTIFICATION_SECRET_ARN` as a bearer token.
    Bearer {
        secret_id: String,
    },
    /// Each call signed (HMAC-SHA256) with the value of the secret `NOTIFICATION_SECRET_ARN`.
    Hmac {
        secret_id: String,
    },
}

impl FromSettings for Config {
    fn from_settings(settings: &Settings) -> Result<Self, ConfigError> {
        let receiver_deduplicates = settings.flag("NOTIFICATION_DEDUPLICATES", true)?;
        let status_url = settings.optional("NOTIFICATION_STATUS_URL");
        if !receiver_deduplicates && status_url.is_none() {
            return Err(ConfigError::Missing("NOTIFICATION_STATUS_URL"));
        }
        let auth = match settings.optional("NOTIFICATION_AUTH").as_deref() {
            None | Some("none") => NotificationAuth::None,
            Some("sigv4") => NotificationAuth::SigV4 {
                service: settings
                    .optional("NOTIFICATION_SIGV4_SERVICE")
                    .unwrap_or_else(|| "execute-api".into()),
                region: settings.optional("NOTIFICATION_SIGV4_REGION"),
            },
            Some("bearer") => NotificationAuth::Bearer {
                secret_id: settings.required("NOTIFICATION_SECRET_ARN")?,
            },
            Some("hmac") => NotificationAuth::Hmac {
                secret_id: settings.required("NOTIFICATION_SECRET_ARN")?,
            },
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: "NOTIFICATION_AUTH",
                    rule: "none, sigv4, bearer or hmac".into(),
                    value: other.to_owned(),
                });
            }
        };
        Ok(Self {
            table: settings.required("TABLE_NAME")?,
            notification_url: settings.required("NOTIFICATION_URL")?,
            receiver_deduplicates,
            status_url,
            auth,
        })
    }
}

impl Config {
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig::new(&self.table, CONSUMER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_notification_url_is_missing_should_refuse_to_start() {
        let err = Config::from_lookup(|k| (k == "TABLE_NAME").then(|| "t".into()));
        assert_eq!(err, Err(ConfigError::Missing("NOTIFICATION_URL")));
    }

    #[test]
    fn when_calls_are_signed_should_need_the_secret_and_name_every_kind() {
        let with = |pairs: &'static [(&'static str, &'static str)]| {
            Config::from_lookup(move |k| {
                pairs
                    .iter()
                    .chain(&[("TABLE_NAME", "t"), ("NOTIFICATION_URL", "https://r")])
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| (*v).to_owned())
            })
        };
        assert_eq!(
            with(&[("NOTIFICATION_AUTH", "hmac")]).map(|c| c.auth),
            Err(ConfigError::Missing("NOTIFICATION_SECRET_ARN"))
        );
        assert_eq!(
            with(&[
                ("NOTIFICATION_AUTH", "hmac"),
                ("NOTIFICATION_SECRET_ARN", "arn:s")
            ])
            .map(|c| c.auth),
            Ok(NotificationAuth::Hmac {
                secret_id: "arn:s".into()
            })
        );
        let Err(ConfigError::Invalid { rule, .. }) = with(&[("NOTIFICATION_AUTH", "signed")])
        else {
            panic!("an unknown kind is refused");
        };
        assert_eq!(rule, "none, sigv4, bearer or hmac");
    }
}
