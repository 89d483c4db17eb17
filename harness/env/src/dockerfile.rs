//! A Dockerfile parser for the instructions benchmark tasks use.
//!
//! Handled: FROM (`AS NAME`, so multi-stage builds), RUN (shell and exec form, heredocs), COPY/ADD (`--chown`, `--chmod`,
//! `--from`, heredocs), WORKDIR, ENV (`a=b c=d` and `a b`), ARG (defaults), USER, SHELL, CMD and
//! ENTRYPOINT (what a compose sidecar runs), line continuations and comments. Ignored but
//! recorded: LABEL, EXPOSE, HEALTHCHECK, VOLUME, STOPSIGNAL, MAINTAINER. Anything else is [`EnvError::Unsupported`].
//! Variables are expanded later, while the build runs ([`expand`]), because their values
//! depend on the instructions before them.

use super::EnvError;

/// One instruction of a Dockerfile, where it stands and how it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// 1-based line of the instruction.
    pub line: usize,
    /// The instruction as written (continuations joined), for error messages.
    pub text: String,
    /// The instruction, parsed.
    pub instruction: Instruction,
}

/// A parsed Dockerfile instruction; variables in it are not yet expanded.
#[derive(Debug, Clone, PartialEq)]
pub enum Instruction {
    /// `FROM [--platform=P] IMAGE [AS NAME]`: the image (or an earlier stage's name) and this
    /// stage's name.
    From {
        /// The image reference, or an earlier stage's name.
        image: String,
        /// `AS NAME`: this stage's name, if given.
        alias: Option<String>,
    },
    /// `RUN`: a command run in the image being built (a heredoc becomes a shell command).
    Run(Command),
    /// `COPY` or `ADD`.
    Copy(Copy),
    /// `WORKDIR`: the directory as written.
    Workdir(String),
    /// `ENV`: name and value pairs, in order.
    Env(Vec<(String, String)>),
    /// `ARG NAME[=DEFAULT]`.
    Arg {
        /// The variable's name.
        name: String,
        /// Its value when no build arg gives one.
        default: Option<String>,
    },
    /// `USER`: the user (and group) as written.
    User(String),
    /// `SHELL`: the argv prefix of later shell-form commands.
    Shell(Vec<String>),
    /// What a container of the image runs: a compose sidecar's process.
    Cmd(Command),
    /// `ENTRYPOINT`: what CMD or a compose `command:` is passed to.
    Entrypoint(Command),
    /// Metadata the sandbox has no use for (EXPOSE, LABEL ...): keyword and arguments.
    Ignored(String, String),
}

/// A command as a Dockerfile writes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Shell form: text run by the build's shell.
    Shell(String),
    /// Exec form (a JSON array): the argv itself.
    Exec(Vec<String>),
}

/// A `COPY` or `ADD` instruction.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy {
    /// ADD (URLs and local archives) rather than COPY.
    pub add: bool,
    /// Source paths in the build context (or the `--from` stage); empty for a heredoc.
    pub sources: Vec<String>,
    /// Destination path as written.
    pub dest: String,
    /// `--chown=USER[:GROUP]`, as written.
    pub chown: Option<String>,
    /// `--chmod=MODE`, as written.
    pub chmod: Option<String>,
    /// `COPY <<EOF /dest`: the file's content.
    pub heredoc: Option<String>,
    /// `COPY --from=STAGE`: an earlier stage (by name or index) or an image reference.
    pub from: Option<String>,
}

const IGNORED: &[&str] = &[
    "LABEL",
    "EXPOSE",
    "HEALTHCHECK",
    "VOLUME",
    "STOPSIGNAL",
    "MAINTAINER",
];

fn bad(line: usize, msg: impl std::fmt::Display) -> EnvError {
    EnvError::SetupFailed {
        step: format!("Dockerfile line {line}"),
        message: msg.to_string(),
    }
}

/// The steps of a Dockerfile's text, in order; refuses unknown instructions and malformed
/// lines.
pub fn parse(text: &str) -> Result<Vec<Step>, EnvError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        let trimmed = lines[i].trim();
        i += 1;
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        // Join continuation lines; comment and blank lines inside a continuation are dropped.
        let mut logical = String::new();
        let mut current = trimmed.to_string();
        while let Some(stripped) = current.trim_end().strip_suffix('\\') {
            logical.push_str(stripped);
            logical.push(' ');
            current = loop {
                let Some(next) = lines.get(i) else {
                    break String::new();
                };
                i += 1;
                let t = next.trim();
                if !(t.is_empty() || t.starts_with('#')) {
                    break t.to_string();
                }
            };
        }
        logical.push_str(current.trim_end());
        let (keyword, rest) = match logical.split_once(char::is_whitespace) {
            Some((k, r)) => (k.to_ascii_uppercase(), r.trim().to_string()),
            None => (logical.to_ascii_uppercase(), String::new()),
        };
        let heredoc = match heredoc_marker(&rest) {
            Some(marker) if keyword == "RUN" || keyword == "COPY" => {
                let mut body = Vec::new();
                loop {
                    let Some(next) = lines.get(i) else {
                        return Err(bad(start + 1, format!("heredoc {marker} never ends")));
                    };
                    i += 1;
                    if next.trim() == marker {
                        break;
                    }
                    body.push(*next);
                }
                Some((marker, body.join("\n")))
            }
            _ => None,
        };
        let instruction = instruction(&keyword, &rest, heredoc, start + 1)?;
        steps.push(Step {
            line: start + 1,
            text: logical,
            instruction,
        });
    }
    Ok(steps)
}

/// The terminator of a `<<EOF`, `<<-EOF` or `<<"EOF"` in the arguments.
fn heredoc_marker(rest: &str) -> Option<String> {
    let at = rest.find("<<")?;
    let word = rest[at + 2..].trim_start_matches('-');
    let word: String = word
        .chars()
        .take_while(|c| !c.is_whitespace())
        .filter(|c| *c != '"' && *c != '\'')
        .collect();
    (!word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(word)
}

fn instruction(
    keyword: &str,
    rest: &str,
    heredoc: Option<(String, String)>,
    line: usize,
) -> Result<Instruction, EnvError> {
    Ok(match keyword {
        "FROM" => from(rest, line)?,
        "RUN" => run(rest, heredoc, line)?,
        "COPY" | "ADD" => Instruction::Copy(copy(keyword, rest, heredoc, line)?),
        "WORKDIR" => Instruction::Workdir(rest.to_string()),
        "ENV" => Instruction::Env(parse_env(rest).ok_or_else(|| bad(line, "ENV needs a value"))?),
        "ARG" => {
            let word = split_words(rest).into_iter().next().unwrap_or_default();
            match word.split_once('=') {
                Some((n, d)) => Instruction::Arg {
                    name: n.to_string(),
                    default: Some(d.to_string()),
                },
                None => Instruction::Arg {
                    name: word,
                    default: None,
                },
            }
        }
        "USER" => Instruction::User(rest.to_string()),
        "SHELL" => Instruction::Shell(
            exec_form(rest).ok_or_else(|| bad(line, "SHELL needs a JSON array"))?,
        ),
        "CMD" | "ENTRYPOINT" => {
            let command = match exec_form(rest) {
                Some(argv) => Command::Exec(argv),
                None => Command::Shell(rest.trim().to_string()),
            };
            if keyword == "CMD" {
                Instruction::Cmd(command)
            } else {
                Instruction::Entrypoint(command)
            }
        }
        k if IGNORED.contains(&k) => Instruction::Ignored(k.to_string(), rest.to_string()),
        "ONBUILD" => Instruction::Ignored("ONBUILD".into(), rest.to_string()),
        other => {
            return Err(EnvError::Unsupported(format!(
                "Dockerfile line {line}: instruction {other}"
            )));
        }
    })
}

/// `FROM IMAGE [AS NAME]` (a `--platform` flag is read and left: the platform is fixed).
fn from(rest: &str, line: usize) -> Result<Instruction, EnvError> {
    // The platform is always linux/amd64 here; the flag has nothing to choose.
    let (_flags, rest) = split_flags(rest);
    let words = split_words(&rest);
    Ok(match words.as_slice() {
        [image] => Instruction::From {
            image: image.clone(),
            alias: None,
        },
        [image, kw, alias] if kw.eq_ignore_ascii_case("as") => Instruction::From {
            image: image.clone(),
            alias: Some(alias.clone()),
        },
        _ => {
            return Err(bad(
                line,
                format!("FROM {rest:?}: expected IMAGE [AS NAME]"),
            ));
        }
    })
}

/// `RUN`, in shell or exec form, with its heredoc when it has one.
fn run(
    rest: &str,
    heredoc: Option<(String, String)>,
    line: usize,
) -> Result<Instruction, EnvError> {
    let (flags, rest) = split_flags(rest);
    if flags.iter().any(|f| f.starts_with("--mount")) {
        return Err(EnvError::Unsupported(format!(
            "Dockerfile line {line}: RUN --mount is not supported"
        )));
    }
    Ok(match heredoc {
        // `RUN <<EOF` runs the body as a script; `RUN cmd <<EOF` is shell heredoc
        // syntax, which the shell handles when it gets the whole text.
        Some((_, body)) if rest.trim_start().starts_with("<<") => {
            Instruction::Run(Command::Shell(body))
        }
        Some((marker, body)) => {
            Instruction::Run(Command::Shell(format!("{rest}\n{body}\n{marker}")))
        }
        None => match exec_form(&rest) {
            Some(argv) => Instruction::Run(Command::Exec(argv)),
            None => Instruction::Run(Command::Shell(rest)),
        },
    })
}

/// `COPY` or `ADD` (`keyword`): flags, sources (or a heredoc) and the destination.
fn copy(
    keyword: &str,
    rest: &str,
    heredoc: Option<(String, String)>,
    line: usize,
) -> Result<Copy, EnvError> {
    let (flags, rest) = split_flags(rest);
    let mut copy = Copy {
        add: keyword == "ADD",
        sources: Vec::new(),
        dest: String::new(),
        chown: None,
        chmod: None,
        heredoc: None,
        from: None,
    };
    for flag in flags {
        if let Some(v) = flag.strip_prefix("--chown=") {
            copy.chown = Some(v.to_string());
        } else if let Some(v) = flag.strip_prefix("--chmod=") {
            copy.chmod = Some(v.to_string());
        } else if let Some(v) = flag.strip_prefix("--from=") {
            copy.from = Some(v.to_string());
        } else if flag.starts_with("--link") || flag.starts_with("--checksum") {
            // Layer-structure hints and a checksum we do not verify: harmless to skip.
        } else {
            return Err(EnvError::Unsupported(format!(
                "Dockerfile line {line}: {keyword} {flag}"
            )));
        }
    }
    let mut words = exec_form(&rest).unwrap_or_else(|| split_words(&rest));
    if let Some((_, body)) = heredoc {
        words.retain(|w| !w.starts_with("<<"));
        copy.heredoc = Some(format!("{body}\n"));
    }
    let Some(dest) = words.pop() else {
        return Err(bad(line, format!("{keyword} needs a destination")));
    };
    if words.is_empty() && copy.heredoc.is_none() {
        return Err(bad(line, format!("{keyword} needs a source")));
    }
    copy.dest = dest;
    copy.sources = words;
    Ok(copy)
}

/// Leading `--flag` words, and the rest.
fn split_flags(rest: &str) -> (Vec<String>, String) {
    let mut flags = Vec::new();
    let mut rest = rest.trim_start();
    while rest.starts_with("--") {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        flags.push(rest[..end].to_string());
        rest = rest[end..].trim_start();
    }
    (flags, rest.to_string())
}

/// `["a", "b"]`, or `None` for the shell form.
fn exec_form(rest: &str) -> Option<Vec<String>> {
    let t = rest.trim();
    if !t.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Vec<String>>(t).ok()
}

/// One word for `sh -c`, in single quotes, so the shell gives it back unchanged.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Whitespace-separated words; quotes group and are removed, backslash escapes one character.
pub(crate) fn split_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
                in_word = true;
            }
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// `ENV a=b c="d e"` or the legacy `ENV a b c` (value "b c").
fn parse_env(rest: &str) -> Option<Vec<(String, String)>> {
    let first = rest.split_whitespace().next()?;
    if !first.contains('=') {
        let (name, value) = rest.split_once(char::is_whitespace)?;
        let value = split_words(value).join(" ");
        return Some(vec![(name.to_string(), value)]);
    }
    let pairs: Vec<(String, String)> = split_words(rest)
        .into_iter()
        .filter_map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    (!pairs.is_empty()).then_some(pairs)
}

/// Expand `$VAR`, `${VAR}`, `${VAR:-default}` and `${VAR:+alt}`; `\$` stays a literal `$`.
/// Unknown variables expand to nothing, as in Docker.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && chars.get(i + 1) == Some(&'$') {
            out.push('$');
            i += 2;
            continue;
        }
        if c != '$' {
            out.push(c);
            i += 1;
            continue;
        }
        if chars.get(i + 1) == Some(&'{') {
            let Some(close) = chars[i + 2..].iter().position(|&c| c == '}') else {
                out.extend(&chars[i..]);
                break;
            };
            let inner: String = chars[i + 2..i + 2 + close].iter().collect();
            i += close + 3;
            let (name, op) = match inner.find(':') {
                Some(at) => (&inner[..at], Some(&inner[at + 1..])),
                None => (inner.as_str(), None),
            };
            let value = lookup(name).filter(|v| !v.is_empty());
            match op {
                Some(word) if word.starts_with('-') => {
                    out.push_str(&value.unwrap_or_else(|| expand(&word[1..], lookup)));
                }
                Some(word) if word.starts_with('+') => {
                    if value.is_some() {
                        out.push_str(&expand(&word[1..], lookup));
                    }
                }
                _ => out.push_str(&value.unwrap_or_default()),
            }
            continue;
        }
        let name: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
            .collect();
        if name.is_empty() {
            out.push('$');
            i += 1;
        } else {
            i += 1 + name.chars().count();
            out.push_str(&lookup(&name).unwrap_or_default());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_common_instructions() {
        let text = "# comment\nFROM python:3.11-slim\nARG V=1\nENV A=b C=\"d e\"\nENV OLD style value\n\
                    WORKDIR /app\nCOPY --chown=root:root data.txt /app/\nRUN apt-get update && \\\n    # inner comment\n    echo hi\n\
                    RUN [\"echo\", \"x\"]\nCMD [\"bash\"]\nUSER nobody\n";
        let steps = parse(text).unwrap();
        let kinds: Vec<_> = steps.iter().map(|s| s.instruction.clone()).collect();
        assert_eq!(
            kinds[0],
            Instruction::From {
                image: "python:3.11-slim".into(),
                alias: None
            }
        );
        assert_eq!(
            kinds[1],
            Instruction::Arg {
                name: "V".into(),
                default: Some("1".into())
            }
        );
        assert_eq!(
            kinds[2],
            Instruction::Env(vec![("A".into(), "b".into()), ("C".into(), "d e".into())])
        );
        assert_eq!(
            kinds[3],
            Instruction::Env(vec![("OLD".into(), "style value".into())])
        );
        let Instruction::Copy(copy) = &kinds[5] else {
            panic!()
        };
        assert_eq!(copy.sources, vec!["data.txt".to_string()]);
        assert_eq!(copy.chown.as_deref(), Some("root:root"));
        assert_eq!(
            kinds[6],
            Instruction::Run(Command::Shell("apt-get update &&  echo hi".into()))
        );
        assert_eq!(steps[6].line, 8);
        assert_eq!(
            kinds[7],
            Instruction::Run(Command::Exec(vec!["echo".into(), "x".into()]))
        );
        assert_eq!(
            kinds[8],
            Instruction::Cmd(Command::Exec(vec!["bash".into()]))
        );
    }

    #[test]
    fn heredocs_and_unknowns() {
        let steps =
            parse("FROM x\nRUN <<EOF\necho a\necho b\nEOF\nCOPY <<EOT /etc/x.conf\nk=v\nEOT\n")
                .unwrap();
        assert_eq!(
            steps[1].instruction,
            Instruction::Run(Command::Shell("echo a\necho b".into()))
        );
        let Instruction::Copy(c) = &steps[2].instruction else {
            panic!()
        };
        assert_eq!(
            (c.dest.as_str(), c.heredoc.as_deref()),
            ("/etc/x.conf", Some("k=v\n"))
        );
        assert!(matches!(
            parse("FROM x\nFROBNICATE y\n"),
            Err(EnvError::Unsupported(_))
        ));
    }

    #[test]
    fn stages_and_copy_from() {
        let steps = parse(
            "FROM --platform=linux/amd64 debian:bookworm-slim AS build\nRUN true\n\
             FROM python:3.11-slim\nCOPY --from=build --chown=1:1 /out /app/out\n",
        )
        .unwrap();
        assert_eq!(
            steps[0].instruction,
            Instruction::From {
                image: "debian:bookworm-slim".into(),
                alias: Some("build".into())
            }
        );
        let Instruction::Copy(c) = &steps[3].instruction else {
            panic!("{:?}", steps[3])
        };
        assert_eq!(c.from.as_deref(), Some("build"));
        assert_eq!(c.chown.as_deref(), Some("1:1"));
        assert!(parse("FROM a b c d\n").is_err());
    }

    #[test]
    fn expands_variables() {
        let look = |n: &str| match n {
            "A" => Some("1".to_string()),
            "E" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            expand("$A/${A}/${B:-d}/${E:-e}/${A:+p}/${B:+q}/\\$A/$", &look),
            "1/1/d/e/p//$A/$"
        );
    }
}
