//! The content key of a fact: evidence that lets an auditor find one money movement asserted
//! under two identities (a provider's event and an API call for one payment, a file resent
//! with new ids), kept 7 years in the decision archive.
//!
//! Keyed: HMAC-SHA256 under a secret held in Secrets Manager. Its parts (account, amount,
//! currency, business time, payment reference) have little entropy, so a plain hash could be
//! tested against a guessed reference by anyone who reads the archive; a keyed one cannot
//! without the secret. The key's id (a digest of the secret, not the secret) prefixes each key,
//! so keys made under different secrets are never taken for a match.
//!
//! Evidence only: it NEVER suppresses, merges or deduplicates anything. Two genuine payments
//! of the same amount at the same time share a key; deduplication stays on
//! `(consumer, sourceSystem, sourceEventId)`.

use hmac::{Hmac, KeyInit, Mac};
use hmac_sha2::Sha256;
use sha2::Digest;

/// The shortest secret accepted, in bytes: HMAC-SHA256's own output size (RFC 2104 §3).
pub const MIN_SECRET_LEN: usize = 32;

/// What a content key is made of, as a decision record knows it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ContentParts {
    pub account_id: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// RFC 3339, UTC, as the consumer fingerprints it.
    pub event_time: String,
    /// The producer's payment reference, when the body has one (API payments do).
    pub reference: Option<String>,
}

impl std::fmt::Debug for ContentParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the payment reference: the key is keyed so that it cannot be guessed back.
        f.debug_struct("ContentParts")
            .field("account_id", &self.account_id)
            .field("amount_minor", &self.amount_minor)
            .field("currency", &self.currency)
            .field("event_time", &self.event_time)
            .field("reference", &self.reference.as_ref().map(|_| "<withheld>"))
            .finish()
    }
}

impl ContentParts {
    /// `accountId|amountMinor|currency|eventTime|reference`, a missing part as the empty string.
    fn text(&self) -> String {
        let amount = self.amount_minor.map(|a| a.to_string()).unwrap_or_default();
        format!(
            "{}|{amount}|{}|{}|{}",
            self.account_id,
            self.currency.as_deref().unwrap_or_default(),
            self.event_time,
            self.reference.as_deref().unwrap_or_default()
        )
    }
}

/// Makes content keys under one secret: `<key id>:<HMAC-SHA256 of the parts, lowercase hex>`.
#[derive(Clone)]
pub struct ContentKeyer {
    id: String,
    mac: Hmac<Sha256>,
}

impl std::fmt::Debug for ContentKeyer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "ContentKeyer({})", self.id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the content key secret has {0} bytes; at least {MIN_SECRET_LEN} are needed")]
pub struct SecretTooShort(pub usize);

impl ContentKeyer {
    pub fn new(secret: &[u8]) -> Result<Self, SecretTooShort> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(SecretTooShort(secret.len()));
        }
        // The check above is the only refusal: HMAC takes a key of any length (RFC 2104 §2).
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
            .expect("HMAC accepts a key of any length");
        // 32 bits of a digest of the secret name it without revealing it (a 256-bit secret).
        let digest = sha2::Sha256::digest([b"content-key-id\n".as_slice(), secret].concat());
        Ok(Self {
            id: hex::encode(&digest[..4]),
            mac,
        })
    }

    /// The secret's id: 8 lowercase hex digits.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn key(&self, parts: &ContentParts) -> String {
        let mut mac = self.mac.clone();
        mac.update(parts.text().as_bytes());
        format!("{}:{}", self.id, hex::encode(mac.finalize().into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_debug_form_withholds_the_payment_reference() {
        let shown = format!("{:?}", parts(Some("INV-2026-0042")));
        assert!(!shown.contains("INV-2026-0042"), "{shown}");
        assert!(shown.contains("<withheld>"), "{shown}");
    }

    const SECRET: &[u8; 32] = b"0123456789abcdef0123456789abcdef";

    fn parts(reference: Option<&str>) -> ContentParts {
        ContentParts {
            account_id: "acc_1".into(),
            amount_minor: Some(2500),
            currency: Some("EUR".into()),
            event_time: "2026-11-02T10:00:00Z".into(),
            reference: reference.map(str::to_owned),
        }
    }

    #[test]
    fn when_a_content_key_is_made_should_be_the_rfc_2104_hmac_of_the_pipe_joined_parts() {
        let keyer = ContentKeyer::new(SECRET).expect("secret");
        // printf 'content-key-id\n0123456789abcdef0123456789abcdef' | sha256sum | cut -c1-8
        // printf 'acc_1|2500|EUR|2026-11-02T10:00:00Z|INV-7' \
        //   | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef
        assert_eq!(
            keyer.key(&parts(Some("INV-7"))),
            "73c61139:dc126846bcddac7b8686afb8742dd7f7225ac2cf2feba343c99461ef9a293fa7"
        );
    }

    #[test]
    fn when_the_secret_differs_should_give_another_key_and_another_id() {
        let one = ContentKeyer::new(SECRET).expect("secret");
        let other = ContentKeyer::new(b"fedcba9876543210fedcba9876543210").expect("secret");
        assert_ne!(one.id(), other.id());
        assert_ne!(one.key(&parts(None))[9..], other.key(&parts(None))[9..]);
        // A missing part is written as the empty string.
        assert_eq!(one.key(&parts(None)), one.key(&parts(Some(""))));
    }

    #[test]
    fn when_the_secret_is_short_should_refuse_it_and_never_print_it() {
        assert_eq!(ContentKeyer::new(b"short").err(), Some(SecretTooShort(5)));
        let keyer = ContentKeyer::new(SECRET).expect("secret");
        assert!(!format!("{keyer:?}").contains("0123456789"));
    }
}
