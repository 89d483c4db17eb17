//! Image references as a Dockerfile's `FROM` or a user writes them (`debian:bookworm-slim`,
//! `ghcr.io/org/x@sha256:...`), normalised the way docker does, so that one image has one name in
//! the store whichever way it was spelled.

use std::fmt;

use super::ImageError;

/// The registry docker means when a reference names none.
pub const DOCKER_HUB: &str = "docker.io";

/// A parsed, normalised image reference: `registry/repository[:tag][@sha256:hex]`.
///
/// A reference with neither tag nor digest gets the tag `latest`; one pinned by digest alone
/// keeps no tag (the digest names the image, as in docker).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl Reference {
    /// Parses `[registry[:port]/]repo[:tag][@sha256:<64 hex>]`.
    pub fn parse(text: &str) -> Result<Reference, ImageError> {
        let bad = |reason: &str| ImageError::BadReference {
            reference: text.to_string(),
            reason: reason.to_string(),
        };
        if text.is_empty() {
            return Err(bad("empty reference"));
        }
        if text.len() > 255 + 128 + 72 {
            return Err(bad("longer than any valid reference"));
        }
        let (rest, digest) = match text.rsplit_once('@') {
            Some((rest, digest)) => (rest, Some(parse_digest(digest).map_err(|r| bad(&r))?)),
            None => (text, None),
        };
        // A ':' after the last '/' starts the tag; one before it belongs to `registry:port`.
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                (&rest[..at], Some(&rest[at + 1..]))
            }
            None => (rest, None),
        };
        if let Some(tag) = tag
            && !valid_tag(tag)
        {
            return Err(bad(&format!(
                "tag {tag:?} must be 1-128 of [A-Za-z0-9_.-], not starting with '.' or '-'"
            )));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, path)) if is_registry(first) => (first, path),
            _ => (DOCKER_HUB, name),
        };
        if registry.is_empty() || !valid_registry(registry) {
            return Err(bad(&format!("registry {registry:?} is not a host[:port]")));
        }
        let registry = if registry == "index.docker.io" || registry == "registry-1.docker.io" {
            DOCKER_HUB
        } else {
            registry
        };
        if path.is_empty() {
            return Err(bad("no repository name"));
        }
        if let Some(component) = path.split('/').find(|c| !valid_component(c)) {
            return Err(bad(&format!(
                "repository component {component:?} must be lowercase letters and digits, \
                 separated by '.', '_', '__' or '-'"
            )));
        }
        let repository = if registry == DOCKER_HUB && !path.contains('/') {
            format!("library/{path}")
        } else {
            path.to_string()
        };
        if registry.len() + 1 + repository.len() > 255 {
            return Err(bad("name longer than 255 characters"));
        }
        let tag = match (tag, &digest) {
            (Some(tag), _) => Some(tag.to_string()),
            (None, Some(_)) => None,
            (None, None) => Some("latest".to_string()),
        };
        Ok(Reference {
            registry: registry.to_string(),
            repository,
            tag,
            digest,
        })
    }

    /// `docker.io`, `ghcr.io`, `localhost:5000`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// `library/debian`, `org/x`.
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// `None` only for a reference pinned by digest alone.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// `sha256:<64 hex>`, when pinned.
    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// What to ask the registry's manifest endpoint for: the digest when pinned (a tag can
    /// move, a digest cannot), else the tag.
    pub fn manifest_key(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }

    /// The same name without its digest pin: the tag it named (`latest` when none).
    pub fn without_digest(&self) -> Reference {
        Reference {
            tag: Some(self.tag.clone().unwrap_or_else(|| "latest".to_string())),
            digest: None,
            ..self.clone()
        }
    }

    /// The same repository at another digest (an index entry, a loaded manifest).
    pub fn with_digest(&self, digest: &str) -> Result<Reference, ImageError> {
        let digest = parse_digest(digest).map_err(|reason| ImageError::BadReference {
            reference: format!("{self}@{digest}"),
            reason,
        })?;
        Ok(Reference {
            digest: Some(digest),
            ..self.clone()
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Reference {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reference::parse(s)
    }
}

/// Docker's rule: the first component names a registry when it looks like a host (a dot, a
/// port) or is `localhost`; otherwise it is part of a Docker Hub repository (`org/x`).
fn is_registry(first: &str) -> bool {
    first.contains('.') || first.contains(':') || first == "localhost"
}

fn valid_registry(registry: &str) -> bool {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    let host_ok = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

/// One path component: `[a-z0-9]+` runs joined by one separator (`.`, `_`, `__` or dashes).
fn valid_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &component[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

fn valid_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

/// `sha256:<64 lowercase hex>`, the only algorithm the store verifies.
pub(crate) fn parse_digest(digest: &str) -> Result<String, String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!(
            "digest {digest:?} has no algorithm (want sha256:<hex>)"
        ));
    };
    if algorithm != "sha256" {
        return Err(format!(
            "digest algorithm {algorithm:?} is not supported (only sha256)"
        ));
    }
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!(
            "digest {digest:?} is not sha256:<64 lowercase hex>"
        ));
    }
    Ok(digest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// One row of the table: what is written, and what it must normalise to.
    struct Case<'a> {
        text: &'a str,
        registry: &'a str,
        repository: &'a str,
        tag: Option<&'a str>,
        digest: Option<&'a str>,
        display: &'a str,
    }

    /// `c.text` parses to what `c` says, and its canonical form parses back to the same.
    fn check(c: Case) {
        let text = c.text;
        let r = Reference::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(r.registry(), c.registry, "{text}");
        assert_eq!(r.repository(), c.repository, "{text}");
        assert_eq!(r.tag(), c.tag, "{text}");
        assert_eq!(r.digest(), c.digest, "{text}");
        assert_eq!(r.to_string(), c.display, "{text}");
        assert_eq!(Reference::parse(&r.to_string()).unwrap(), r, "{text}");
    }

    #[test]
    fn parses_and_normalises_like_docker() {
        for (text, registry, repository, tag, display) in [
            (
                "debian:bookworm-slim",
                "docker.io",
                "library/debian",
                Some("bookworm-slim"),
                "docker.io/library/debian:bookworm-slim",
            ),
            (
                "debian",
                "docker.io",
                "library/debian",
                Some("latest"),
                "docker.io/library/debian:latest",
            ),
            (
                "org/app:1.2",
                "docker.io",
                "org/app",
                Some("1.2"),
                "docker.io/org/app:1.2",
            ),
            (
                "ghcr.io/org/x",
                "ghcr.io",
                "org/x",
                Some("latest"),
                "ghcr.io/org/x:latest",
            ),
            (
                "localhost/x:t",
                "localhost",
                "x",
                Some("t"),
                "localhost/x:t",
            ),
            (
                "localhost:5000/a/b/c:dev",
                "localhost:5000",
                "a/b/c",
                Some("dev"),
                "localhost:5000/a/b/c:dev",
            ),
            (
                "127.0.0.1:5000/img",
                "127.0.0.1:5000",
                "img",
                Some("latest"),
                "127.0.0.1:5000/img:latest",
            ),
            (
                "index.docker.io/library/python:3.12",
                "docker.io",
                "library/python",
                Some("3.12"),
                "docker.io/library/python:3.12",
            ),
            (
                "docker.io/ubuntu",
                "docker.io",
                "library/ubuntu",
                Some("latest"),
                "docker.io/library/ubuntu:latest",
            ),
            (
                "my-org/my_app__x",
                "docker.io",
                "my-org/my_app__x",
                Some("latest"),
                "docker.io/my-org/my_app__x:latest",
            ),
        ] {
            check(Case {
                text,
                registry,
                repository,
                tag,
                digest: None,
                display,
            });
        }
    }

    #[test]
    fn parses_references_pinned_by_digest() {
        let digest = format!("sha256:{HEX}");
        check(Case {
            text: &format!("debian@{digest}"),
            registry: "docker.io",
            repository: "library/debian",
            tag: None,
            digest: Some(&digest),
            display: &format!("docker.io/library/debian@{digest}"),
        });
        check(Case {
            text: &format!("ghcr.io/org/x:v1@{digest}"),
            registry: "ghcr.io",
            repository: "org/x",
            tag: Some("v1"),
            digest: Some(&digest),
            display: &format!("ghcr.io/org/x:v1@{digest}"),
        });
    }

    #[test]
    fn manifest_key_prefers_the_digest() {
        let r = Reference::parse(&format!("x:1@sha256:{HEX}")).unwrap();
        assert_eq!(r.manifest_key(), format!("sha256:{HEX}"));
        assert_eq!(Reference::parse("x:1").unwrap().manifest_key(), "1");
    }

    #[test]
    fn rejects_bad_references_naming_them() {
        for text in [
            "",
            "Debian:12",
            "debian:",
            "debian:-x",
            "debian:.x",
            "debian@sha256:abc",
            "debian@md5:0123",
            &format!("debian@sha512:{HEX}"),
            "a//b",
            "/debian",
            "debian/",
            "de--bian_",
            "ex ample.com/x",
            "example.com:port/x",
            "a...b",
        ] {
            match Reference::parse(text) {
                Err(ImageError::BadReference { reference, .. }) => assert_eq!(reference, text),
                other => panic!("{text:?} should be refused, got {other:?}"),
            }
        }
        let err = Reference::parse("Debian:12").unwrap_err().to_string();
        assert!(err.contains("\"Debian:12\""), "{err}");
    }
}
