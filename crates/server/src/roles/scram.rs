//! A role's password as PostgreSQL stores it: a SCRAM-SHA-256 verifier (RFC 5802, RFC 7677),
//! never the password itself.
//!
//! ```text
//!   SCRAM-SHA-256$<iterations>:<salt, base64>$<StoredKey, base64>:<ServerKey, base64>
//!
//!   SaltedPassword = PBKDF2-HMAC-SHA-256(SASLprep(password), salt, iterations)   (RFC 5802's Hi)
//!   StoredKey      = SHA-256(HMAC(SaltedPassword, "Client Key"))
//!   ServerKey      = HMAC(SaltedPassword, "Server Key")
//! ```
//!
//! This is `pg_authid.rolpassword`'s text (PostgreSQL's `src/backend/libpq/auth-scram.c`
//! writes and reads the same shape), so a verifier computed by PostgreSQL, or by a client
//! (`psql`'s `\password`, libpq's `PQencryptPasswordConn`), is accepted as it is, and one
//! written here works in PostgreSQL. A server holding only the verifier can check a client's
//! SCRAM proof (the proof XORed with the client signature gives ClientKey, whose SHA-256 must
//! be StoredKey) and prove itself with ServerKey, but cannot log in as the role: the
//! password, and the salted password, are not derivable from it.
//!
//! New verifiers get a random 16-byte salt and 4096 iterations, PostgreSQL's defaults
//! (`scram_iterations`). PBKDF2 is pgwire's (which applies SASLprep as PostgreSQL does, and
//! falls back to the raw bytes when the password is not valid SASLprep input, as PostgreSQL
//! does); the HMAC, hash and random bytes come from `ring`.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::rand::SecureRandom;
use ring::{digest, hmac};

/// The verifier's prefix, which names the mechanism.
const PREFIX: &str = "SCRAM-SHA-256$";

/// PostgreSQL's default iteration count for new verifiers.
pub const ITERATIONS: u32 = 4096;

/// PostgreSQL's salt length for new verifiers, in bytes.
pub const SALT_LEN: usize = 16;

/// SHA-256's output: the length of StoredKey and ServerKey.
const KEY_LEN: usize = 32;

/// A SCRAM-SHA-256 verifier.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; KEY_LEN],
    pub server_key: [u8; KEY_LEN],
}

impl fmt::Debug for Verifier {
    /// The keys are not shown (a verifier is a secret of sorts: it allows a dictionary attack).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

impl fmt::Display for Verifier {
    /// `pg_authid.rolpassword`'s text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PREFIX}{}:{}${}:{}",
            self.iterations,
            STANDARD.encode(&self.salt),
            STANDARD.encode(self.stored_key),
            STANDARD.encode(self.server_key)
        )
    }
}

/// The random bytes could not be had from the operating system.
#[derive(Debug, thiserror::Error)]
#[error("could not generate a random salt")]
pub struct NoRandom;

/// Fills `out` with unpredictable bytes from the operating system.
pub fn random_bytes(out: &mut [u8]) -> Result<(), NoRandom> {
    ring::rand::SystemRandom::new().fill(out).map_err(|_| NoRandom)
}

/// Whether two keys are equal, looking at every byte whatever the first difference.
fn same_bytes(a: &[u8; KEY_LEN], b: &[u8; KEY_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Verifier {
    /// Reads `pg_authid.rolpassword`'s text; `None` unless it is a well-formed verifier
    /// (positive iteration count, a non-empty base64 salt, two base64 keys of 32 bytes).
    pub fn parse(s: &str) -> Option<Verifier> {
        let rest = s.strip_prefix(PREFIX)?;
        let (iterations_salt, keys) = rest.split_once('$')?;
        let (iterations, salt) = iterations_salt.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        if !iterations.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let iterations: u32 = iterations.parse().ok().filter(|&n| n > 0)?;
        let salt = STANDARD.decode(salt).ok().filter(|s| !s.is_empty())?;
        let key = |k: &str| -> Option<[u8; KEY_LEN]> { STANDARD.decode(k).ok()?.try_into().ok() };
        Some(Verifier { iterations, salt, stored_key: key(stored)?, server_key: key(server)? })
    }

    /// The verifier of `password` with this salt and iteration count.
    pub fn compute(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        let salted = pgwire::api::auth::sasl::scram::gen_salted_password(password, salt, iterations as usize);
        let key = hmac::Key::new(hmac::HMAC_SHA256, &salted);
        let client_key = hmac::sign(&key, b"Client Key");
        let server_key = hmac::sign(&key, b"Server Key");
        let stored_key = digest::digest(&digest::SHA256, client_key.as_ref());
        let mut v = Verifier { iterations, salt: salt.to_vec(), stored_key: [0; KEY_LEN], server_key: [0; KEY_LEN] };
        v.stored_key.copy_from_slice(stored_key.as_ref());
        v.server_key.copy_from_slice(server_key.as_ref());
        v
    }

    /// A new verifier of `password`: a fresh random salt, PostgreSQL's iteration count.
    pub fn generate(password: &str) -> Result<Verifier, NoRandom> {
        let mut salt = [0u8; SALT_LEN];
        random_bytes(&mut salt)?;
        Ok(Verifier::compute(password, &salt, ITERATIONS))
    }

    /// Whether `password` is the one this verifies (by recomputing it with this salt).
    pub fn verifies(&self, password: &str) -> bool {
        let other = Verifier::compute(password, &self.salt, self.iterations);
        same_bytes(&other.stored_key, &self.stored_key) & same_bytes(&other.server_key, &self.server_key)
    }

    /// What a login for a role that has no verifier (an unknown role, or one without a
    /// password) is challenged with, so the exchange looks like any other and fails only at
    /// the proof, as PostgreSQL's mock authentication does: the salt is derived from the name
    /// and a per-server secret (the same for every attempt at that name, unpredictable
    /// without the secret), and the keys are random, so no proof can match.
    pub fn mock(secret: &[u8], user: &str) -> Verifier {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(secret);
        ctx.update(user.as_bytes());
        let salt = ctx.finish().as_ref()[..SALT_LEN].to_vec();
        let mut v = Verifier { iterations: ITERATIONS, salt, stored_key: [0; KEY_LEN], server_key: [0; KEY_LEN] };
        // Without randomness the keys stay zero: still no proof's SHA-256 is all zeros.
        let _ = random_bytes(&mut v.stored_key);
        let _ = random_bytes(&mut v.server_key);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Produced by PostgreSQL 15.x (`initdb -A scram-sha-256`, then `CREATE ROLE alice LOGIN
    /// PASSWORD 'alicepw'`; `SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'`).
    const POSTGRES_ALICE: &str = "SCRAM-SHA-256$4096:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=";

    /// Also PostgreSQL 15's: `initdb --pwfile` holding `pw`, the bootstrap superuser's.
    const POSTGRES_PW: &str = "SCRAM-SHA-256$4096:AMlZx9XubwMUI3DtlDTp4A==$iwIgFzrsuhBcSElmGfRL4+DrDKpeIRO7a0gyxmLpU+I=:xGvsTYrNMT9OnAgp7B69GlpiZij+rNv4FraF20b8TNs=";

    #[test]
    fn computes_what_postgresql_15_stores() {
        for (password, expected) in [("alicepw", POSTGRES_ALICE), ("pw", POSTGRES_PW)] {
            let theirs = Verifier::parse(expected).expect("PostgreSQL's verifier parses");
            assert_eq!(theirs.iterations, 4096);
            assert_eq!(theirs.salt.len(), 16);
            let ours = Verifier::compute(password, &theirs.salt, theirs.iterations);
            assert_eq!(ours.to_string(), expected);
            assert!(theirs.verifies(password));
            assert!(!theirs.verifies("not it"));
        }
    }

    #[test]
    fn generated_verifiers_have_fresh_salts_and_round_trip() {
        let a = Verifier::generate("secret").unwrap();
        let b = Verifier::generate("secret").unwrap();
        assert_ne!(a.salt, b.salt);
        assert_eq!((a.iterations, a.salt.len()), (4096, 16));
        assert_eq!(Verifier::parse(&a.to_string()), Some(a.clone()));
        assert!(a.verifies("secret"));
        assert!(!format!("{a:?}").contains(&STANDARD.encode(a.stored_key)));
    }

    #[test]
    fn malformed_verifiers_are_refused() {
        let good = POSTGRES_ALICE;
        assert!(Verifier::parse(good).is_some());
        for bad in [
            "",
            "alicepw",
            "SCRAM-SHA-256$4096:bad",
            "SCRAM-SHA-256$0:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=",
            "SCRAM-SHA-256$-1:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=",
            "SCRAM-SHA-256$4096:$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=",
            "SCRAM-SHA-256$4096:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=",
            "SCRAM-SHA-256$4096:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=",
            "SCRAM-SHA-256$4096:DQT6IQxZ2yd8KNaRMlwvCQ==$!!!:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=",
            "md5c5e5d9e1ec0a8a0ab4a5e5d1c6f2f8b7",
        ] {
            assert_eq!(Verifier::parse(bad), None, "{bad:?}");
        }
        // Every prefix of a good verifier is refused, and none panics.
        for i in 0..good.len() {
            assert_eq!(Verifier::parse(&good[..i]), None);
        }
    }

    #[test]
    fn a_mock_verifier_has_a_stable_salt_per_name() {
        let secret = [7u8; 32];
        let (a, b) = (Verifier::mock(&secret, "nobody"), Verifier::mock(&secret, "nobody"));
        assert_eq!(a.salt, b.salt);
        assert_ne!(a.salt, Verifier::mock(&secret, "someone").salt);
        assert_ne!(a.stored_key, b.stored_key);
    }
}
