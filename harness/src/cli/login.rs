//! `geode login openai` / `geode logout openai`: the ChatGPT (Codex subscription) sign-in that
//! the `openai-codex:MODEL` route uses. The flows live in `geode_runtime::model::login`; this
//! module only shows the URL or the device code, tries a browser, and reports the outcome.

use super::exit::Exit;
use std::path::Path;
use std::time::Duration;

use clap::{Args, ValueEnum};
use geode_runtime::model::credentials::Env;
use geode_runtime::model::login::{BrowserLogin, CALLBACK_PORT, OAuthClient, OAuthSettings};

/// How long a sign-in may wait for the user (Codex's device codes live 15 minutes).
const MAX_WAIT: Duration = Duration::from_secs(15 * 60);

/// Providers with a sign-in. Only OpenAI (the ChatGPT subscription) has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoginProvider {
    Openai,
}

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The provider to sign in to: `openai` (the ChatGPT subscription).
    provider: LoginProvider,
    /// Sign in with a device code (a machine without a browser): open the printed URL on any
    /// device and enter the code.
    #[arg(long)]
    device: bool,
}

#[derive(Debug, Args)]
pub struct LogoutArgs {
    /// The provider whose sign-in is removed: `openai`.
    provider: LoginProvider,
}

fn settings(provider: LoginProvider) -> OAuthSettings {
    match provider {
        LoginProvider::Openai => OAuthSettings::from_env(&Env::from_process()),
    }
}

pub async fn login(args: LoginArgs) -> anyhow::Result<Exit> {
    let settings = settings(args.provider);
    let store = settings.store();
    let client = OAuthClient::new(settings)?;
    let tokens = if args.device {
        let code = client.request_device_code().await?;
        say!(
            "To sign in to ChatGPT, open {} on any device and enter the code {} \
             (it expires in 15 minutes; never share it).",
            code.verification_url,
            code.user_code
        );
        client.complete_device(&code, MAX_WAIT).await?
    } else {
        let login = BrowserLogin::start(&client, CALLBACK_PORT).await?;
        say!(
            "Open this URL to sign in to ChatGPT (no browser here? use --device):\n{}",
            login.url
        );
        open_browser(&login.url);
        login.finish(&client, MAX_WAIT).await?
    };
    store.save(&tokens)?;
    println!(
        "signed in to ChatGPT; openai-codex:MODEL routes may be used (tokens in {})",
        store.path().display()
    );
    Ok(Exit::Success)
}

pub fn logout(args: LogoutArgs) -> anyhow::Result<Exit> {
    let store = settings(args.provider).store();
    if store.remove()? {
        println!("signed out: removed {}", store.path().display());
    } else {
        println!("not signed in (no {})", store.path().display());
    }
    Ok(Exit::Success)
}

/// Hand the URL to `xdg-open` when there is one; the printed URL is the fallback either way.
fn open_browser(url: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths).any(|d| Path::new(&d).join("xdg-open").is_file())
        })
        .unwrap_or(false);
    if !found {
        return;
    }
    let spawned = std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        tracing::debug!("xdg-open failed: {e}");
    }
}
