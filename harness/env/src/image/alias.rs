//! Registry aliases: two names for one set of images. ECR Public's `docker/library`
//! repositories are Docker Hub's official images, republished by Docker under another
//! registry's name, and Harbor's public tasks name their bases that way
//! (`public.ecr.aws/docker/library/python:3.13-slim-bookworm@sha256:...`). Without the rule
//! such a base is an unknown registry's image: no mirror of Docker Hub serves it, and no
//! stand-in exists for it, though it is the very image `python:3.13-slim-bookworm` names.
//!
//! An alias rule maps one repository prefix onto another, both ways. Base resolution asks for
//! a reference under each of its names before any mirror or stand-in is tried (see
//! `env/base.rs`), and a digest pin travels with the name: whichever name serves the image,
//! its manifest is verified against the pinned digest.

use std::fmt;

use super::{ImageError, Reference};

/// The rule every configuration has: ECR Public's Docker official images are Docker Hub's.
pub const BUILT_IN: (&str, &str) = ("public.ecr.aws/docker/library", "docker.io/library");

/// A registry and a repository prefix: `public.ecr.aws` + `docker/library`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Prefix {
    registry: String,
    path: String,
}

impl Prefix {
    /// `REGISTRY[/PATH]`, where REGISTRY is a host as in a reference (a dot or a port, or
    /// `localhost`) and PATH is repository components: no tag, no digest.
    fn parse(text: &str) -> Result<Prefix, String> {
        let (registry, path) = text.split_once('/').unwrap_or((text, ""));
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(
                "must start with its registry's host (`docker.io/library`, not `library`)".into(),
            );
        }
        // The components are a reference's; a name below the prefix lets one be checked.
        let probe = if path.is_empty() {
            format!("{registry}/x")
        } else {
            format!("{registry}/{path}/x")
        };
        let reference = Reference::parse(&probe).map_err(|_| {
            "is not REGISTRY/REPOSITORY-PREFIX (lowercase components, no tag, no digest)"
                .to_string()
        })?;
        Ok(Prefix {
            registry: reference.registry().to_string(),
            path: path.to_string(),
        })
    }

    /// The part of `reference`'s repository below this prefix (`debian` of `library/debian`),
    /// when the prefix is its.
    fn rest_of<'r>(&self, reference: &'r Reference) -> Option<&'r str> {
        if reference.registry() != self.registry {
            return None;
        }
        let repository = reference.repository();
        if self.path.is_empty() {
            return Some(repository);
        }
        repository
            .strip_prefix(&self.path)?
            .strip_prefix('/')
            .filter(|rest| !rest.is_empty())
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.registry)
        } else {
            write!(f, "{}/{}", self.registry, self.path)
        }
    }
}

/// The alias rules of one configuration: the built-in one, then `[images] aliases`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Aliases {
    rules: Vec<(Prefix, Prefix)>,
}

impl Default for Aliases {
    /// The built-in rule alone.
    fn default() -> Self {
        let (a, b) = BUILT_IN;
        Aliases::none()
            .with(a, b)
            .unwrap_or_else(|_| Aliases::none())
    }
}

impl Aliases {
    /// No rule at all (tests of the other sources).
    pub fn none() -> Self {
        Aliases { rules: Vec::new() }
    }

    /// These rules and `from` <-> `to` (`"public.ecr.aws/docker/library"`,
    /// `"docker.io/library"`). An error says which side is not a registry and repository
    /// prefix.
    pub fn with(mut self, from: &str, to: &str) -> Result<Self, ImageError> {
        let bad = |text: &str, reason: String| ImageError::BadReference {
            reference: text.to_string(),
            reason,
        };
        let a = Prefix::parse(from).map_err(|r| bad(from, r))?;
        let b = Prefix::parse(to).map_err(|r| bad(to, r))?;
        if a == b {
            return Err(bad(from, "an alias of itself".into()));
        }
        if !self.rules.contains(&(a.clone(), b.clone()))
            && !self.rules.contains(&(b.clone(), a.clone()))
        {
            self.rules.push((a, b));
        }
        Ok(self)
    }

    /// The other names of `reference` (same tag, same digest), in rule order, never itself.
    pub fn alternatives(&self, reference: &Reference) -> Vec<Reference> {
        let mut out: Vec<Reference> = Vec::new();
        for (a, b) in &self.rules {
            for (from, to) in [(a, b), (b, a)] {
                let Some(rest) = from.rest_of(reference) else {
                    continue;
                };
                let mut text = format!("{to}/{rest}");
                if let Some(tag) = reference.tag() {
                    text.push(':');
                    text.push_str(tag);
                }
                if let Some(digest) = reference.digest() {
                    text.push('@');
                    text.push_str(digest);
                }
                // Every part came from valid references; a name past the length limit has no
                // alias rather than a wrong one.
                if let Ok(other) = Reference::parse(&text)
                    && other != *reference
                    && !out.contains(&other)
                {
                    out.push(other);
                }
            }
        }
        out
    }

    /// The rules, as `FROM <-> TO` (for messages).
    pub fn describe(&self) -> Vec<String> {
        self.rules
            .iter()
            .map(|(a, b)| format!("{a} <-> {b}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn names(aliases: &Aliases, raw: &str) -> Vec<String> {
        aliases
            .alternatives(&Reference::parse(raw).unwrap())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn ecr_public_s_docker_library_is_docker_hub_s_both_ways() {
        let aliases = Aliases::default();
        assert_eq!(
            names(
                &aliases,
                "public.ecr.aws/docker/library/debian:bookworm-slim"
            ),
            ["docker.io/library/debian:bookworm-slim"]
        );
        let pinned = format!("public.ecr.aws/docker/library/python:3.13-slim@sha256:{HEX}");
        assert_eq!(
            names(&aliases, &pinned),
            [format!("docker.io/library/python:3.13-slim@sha256:{HEX}")]
        );
        // Docker Hub's short names are the same repositories.
        assert_eq!(
            names(&aliases, "debian"),
            ["public.ecr.aws/docker/library/debian:latest"]
        );
        assert_eq!(
            names(&aliases, &format!("debian@sha256:{HEX}")),
            [format!("public.ecr.aws/docker/library/debian@sha256:{HEX}")]
        );
        // Other repositories of either registry have no alias.
        assert!(names(&aliases, "public.ecr.aws/docker/other/debian:1").is_empty());
        assert!(names(&aliases, "public.ecr.aws/docker/library").is_empty());
        assert!(names(&aliases, "org/app:1").is_empty());
        assert!(names(&aliases, "ghcr.io/docker/library/debian:1").is_empty());
    }

    #[test]
    fn configured_rules_add_to_the_built_in_one() {
        let aliases = Aliases::default()
            .with("mirror.gcr.io/library", "docker.io/library")
            .unwrap()
            .with("localhost:5000/hub", "docker.io")
            .unwrap();
        assert_eq!(
            names(&aliases, "python:3.11-slim"),
            [
                "public.ecr.aws/docker/library/python:3.11-slim",
                "mirror.gcr.io/library/python:3.11-slim",
                "localhost:5000/hub/library/python:3.11-slim",
            ]
        );
        assert_eq!(
            names(&aliases, "localhost:5000/hub/org/app:2"),
            ["docker.io/org/app:2"]
        );
        // A rule given twice, or reversed, is one rule.
        let again = aliases
            .clone()
            .with("docker.io/library", "public.ecr.aws/docker/library")
            .unwrap();
        assert_eq!(again, aliases);
    }

    #[test]
    fn a_side_that_is_not_a_registry_prefix_is_refused_naming_it() {
        for (from, to) in [
            ("library", "docker.io/library"),
            ("public.ecr.aws/docker/library:latest", "docker.io/library"),
            (
                "public.ecr.aws/docker/library",
                &*format!("docker.io/library@sha256:{HEX}"),
            ),
            ("public.ecr.aws/Docker", "docker.io/library"),
            ("docker.io/library", "docker.io/library"),
            ("public.ecr.aws/docker//library", "docker.io/library"),
        ] {
            let err = Aliases::none().with(from, to).unwrap_err().to_string();
            assert!(err.contains(from) || err.contains(to), "{from} {to}: {err}");
        }
    }
}
