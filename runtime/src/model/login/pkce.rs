//! PKCE (RFC 7636, S256): the secret that proves the process redeeming an authorization code
//! is the one that asked for it, so a code seen by another program on the machine is useless.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// A verifier kept by us and the challenge sent in the authorize URL.
#[derive(Clone)]
pub struct Pkce {
    /// The secret kept by this process and sent when redeeming the code.
    pub verifier: String,
    /// `s256` of the verifier, sent in the authorize URL.
    pub challenge: String,
}

impl std::fmt::Debug for Pkce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pkce(<redacted>)")
    }
}

impl Pkce {
    /// A pair with a fresh random verifier.
    pub fn generate() -> Pkce {
        Pkce::from_verifier(random_token(64))
    }

    pub(crate) fn from_verifier(verifier: String) -> Pkce {
        let challenge = s256(&verifier);
        Pkce {
            verifier,
            challenge,
        }
    }
}

/// `BASE64URL(SHA256(verifier))`, without padding.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// `bytes` random bytes, base64url: PKCE verifiers and the `state` parameter.
pub fn random_token(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_matches_the_rfc_example() {
        // RFC 7636, appendix B.
        let p = Pkce::from_verifier("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into());
        assert_eq!(p.challenge, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
        let a = Pkce::generate();
        assert_ne!(a.verifier, Pkce::generate().verifier);
        assert!(!format!("{a:?}").contains(&a.verifier));
    }
}
