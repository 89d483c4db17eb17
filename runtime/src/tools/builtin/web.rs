//! `web_fetch`: a page's text for a person's session. It runs in GEODE's own process, outside
//! the command sandbox, so it is a tool of its own under the session's policy (a `sensitive`
//! call: a URL can carry what the model read) and is never bound in a benchmark trial, whose
//! network is the sandbox's to decide.

use std::time::Duration;

use super::*;

/// Bytes of a response read at most; the text shown is cut further.
const BODY_CAP: usize = 2 * 1024 * 1024;
/// Characters of text returned.
const TEXT_CAP: usize = 60_000;
const TIMEOUT: Duration = Duration::from_secs(30);
const REDIRECTS: usize = 5;

/// Fetches a URL and returns its text (HTML reduced to its text).
#[derive(Debug, Clone, Copy, Default)]
pub struct WebFetchTool;

/// The input of `web_fetch`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchInput {
    /// An http or https URL.
    pub url: String,
}

impl WebFetchTool {
    pub(crate) fn spec() -> ToolSpec {
        ToolSpec {
            name: "web_fetch".to_string(),
            description: "Fetch an http(s) URL with GET and return its status, content type and \
                text (HTML reduced to its text, cut at 60000 characters). For documentation and \
                pages the task needs; not for files in the workspace."
                .to_string(),
            input_schema: input_schema::<WebFetchInput>(),
            safety: SafetyLevel::Sensitive,
            personal_data: PersonalDataClass::None,
            resource_keys: ResourceKeyRule::None,
            path_args: Vec::new(),
            effectful: false,
            command_arg: None,
            deadline_arg: None,
        }
    }

    /// Bound as `builtin:web_fetch`, for the sessions of a person (not in [`builtin_tools`]).
    pub fn bound() -> BoundTool {
        BoundTool {
            binding: "builtin:web_fetch".to_string(),
            spec: Self::spec(),
            handler: Arc::new(WebFetchTool),
        }
    }

    async fn run(&self, input: WebFetchInput, ctx: &ToolContext) -> Result<ToolOutput, ToolOutput> {
        let url = reqwest::Url::parse(&input.url)
            .map_err(|e| ToolOutput::error(format!("url {:?}: {e}", input.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolOutput::error(format!(
                "url {:?}: only http and https are fetched",
                input.url
            )));
        }
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT.min(ctx.deadline))
            .redirect(reqwest::redirect::Policy::limited(REDIRECTS))
            .user_agent(concat!("geode/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ToolOutput::error(format!("http client: {e}")))?;
        let fetch = async {
            let mut response = client.get(url.clone()).send().await?;
            let status = response.status();
            let kind = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let mut body = Vec::new();
            let mut cut = false;
            while let Some(chunk) = response.chunk().await? {
                body.extend_from_slice(&chunk);
                if body.len() >= BODY_CAP {
                    body.truncate(BODY_CAP);
                    cut = true;
                    break;
                }
            }
            Ok::<_, reqwest::Error>((status, kind, body, cut))
        };
        let (status, kind, body, cut) = tokio::select! {
            r = fetch => r.map_err(|e| ToolOutput::error(format!("GET {url}: {e}")))?,
            () = ctx.cancel.cancelled() => return Err(ToolOutput::error("cancelled")),
        };
        let raw = String::from_utf8_lossy(&body);
        let mut text = if kind.contains("html") {
            html_text(&raw)
        } else {
            raw.into_owned()
        };
        let mut note = String::new();
        if cut || text.chars().count() > TEXT_CAP {
            text = text.chars().take(TEXT_CAP).collect();
            note = "\n[... cut ...]".into();
        }
        Ok(ToolOutput {
            content: format!("{status} {kind}\n\n{text}{note}"),
            is_error: !status.is_success(),
            images: Vec::new(),
        })
    }
}
handler!(WebFetchTool, WebFetchInput);

/// The text of an HTML page: scripts, styles and tags dropped, the common entities decoded,
/// block ends as line breaks, blank space collapsed and blank lines dropped.
fn html_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let lower = html.to_ascii_lowercase();
    let mut i = 0;
    while i < html.len() {
        let rest = &lower[i..];
        if let Some(skip) = ["<script", "<style"]
            .iter()
            .find(|t| rest.starts_with(**t))
            .map(|t| format!("</{}", &t[1..]))
        {
            i = lower[i..]
                .find(&skip)
                .and_then(|end| lower[i + end..].find('>').map(|gt| i + end + gt + 1))
                .unwrap_or(html.len());
            continue;
        }
        if rest.starts_with('<') {
            let end = rest.find('>').map_or(html.len(), |gt| i + gt + 1);
            let tag = &lower[i..end];
            if ["<br", "</p", "</div", "</li", "</h", "</tr", "<p"]
                .iter()
                .any(|t| tag.starts_with(t))
            {
                out.push('\n');
            }
            i = end;
            continue;
        }
        let next = rest.find('<').map_or(html.len(), |lt| i + lt);
        out.push_str(&html[i..next]);
        i = next;
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    decoded
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::html_text;

    /// A benchmark trial's tools are `builtin_tools`: its network is the sandbox's to decide.
    #[test]
    fn trials_never_get_it() {
        assert!(
            !super::builtin_tools()
                .iter()
                .any(|t| t.spec.name == "web_fetch")
        );
    }

    #[test]
    fn html_reads_as_its_text() {
        let page = "<html><head><style>p{x:y}</style><script>var a = '<p>';</script></head>\
                    <body><h1>Title</h1><p>One &amp; two</p><p>three&nbsp;four</p></body></html>";
        assert_eq!(html_text(page), "Title\nOne & two\nthree four");
    }
}
