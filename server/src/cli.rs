//! The `aperture` command line (CONTRACT §10).

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use app::dto::{CreateTokenRequest, CreateUserRequest};

use crate::auth::password::Passwords;
use crate::config::Config;
use crate::startup::{Application, Bootstrap};
use crate::store::{self, Store};

/// Aperture: the authorization layer between AI agents and their tools.
#[derive(Debug, Parser)]
#[command(name = "aperture", version, about)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct GlobalArgs {
    /// Folder for local state (the SQLite database by default).
    #[arg(
        long,
        env = "APERTURE_DATA_DIR",
        default_value = "./data",
        global = true
    )]
    data_dir: PathBuf,
    /// `sqlite://path` or `postgres://…`; default: SQLite in the data folder.
    #[arg(long, env = "APERTURE_DATABASE_URL", global = true)]
    database_url: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway, the API and the dashboard.
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate,
    /// Operator commands for users.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Operator commands for API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "APERTURE_ADDR", default_value = "127.0.0.1:3000")]
    addr: SocketAddr,
    /// Folder with the built dashboard (`pkg/` inside).
    #[arg(long, env = "APERTURE_SITE_ROOT", default_value = "target/site")]
    site_root: PathBuf,
    /// Mark cookies `Secure` and use the `__Host-` prefix (set when served over TLS).
    #[arg(long, env = "APERTURE_SECURE_COOKIES")]
    secure_cookies: bool,
    /// Create user `admin` (every scope, tenant `default`) on a database with no user.
    #[arg(
        long,
        env = "APERTURE_BOOTSTRAP_ADMIN_PASSWORD",
        hide_env_values = true
    )]
    bootstrap_admin_password: Option<String>,
}

#[derive(Debug, Subcommand)]
enum AdminCommand {
    /// Create a dashboard user (password from a prompt, or from stdin with --password-stdin).
    CreateUser {
        /// Tenant (created when missing).
        #[arg(long)]
        tenant: String,
        /// Sign-in name.
        #[arg(long)]
        username: String,
        /// A scope to grant; repeat for more.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Read the password from standard input instead of prompting.
        #[arg(long)]
        password_stdin: bool,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Create an API token; the secret is printed once, alone on the last line.
    Create {
        /// Tenant (created when missing).
        #[arg(long)]
        tenant: String,
        /// Actor of the calls made with the token.
        #[arg(long)]
        actor: String,
        /// A scope to grant; repeat for more.
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// A label.
        #[arg(long)]
        name: Option<String>,
        /// Expiry, RFC 3339.
        #[arg(long)]
        expires_at: Option<String>,
    },
}

impl GlobalArgs {
    fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| Config::new(&self.data_dir).database_url)
    }
}

/// Parses the command line and runs it.
pub async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(&cli.global, args).await,
        Command::Migrate => {
            let store = Store::connect(&cli.global.database_url()).await?;
            store.migrate().await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Admin {
            command:
                AdminCommand::CreateUser {
                    tenant,
                    username,
                    scopes,
                    password_stdin,
                },
        } => {
            let password = read_password(password_stdin)?;
            let store = operator_store(&cli.global, &tenant).await?;
            let passwords = tokio::task::spawn_blocking(|| Passwords::new(1)).await??;
            let request = CreateUserRequest {
                username,
                password,
                scopes,
            };
            let user =
                crate::users::create_unchecked(&store, &passwords, &tenant, "operator", &request)
                    .await
                    .map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
            println!(
                "created user {} in tenant {tenant} with scopes {}",
                user.username,
                user.scopes.join(" ")
            );
            Ok(())
        }
        Command::Token {
            command:
                TokenCommand::Create {
                    tenant,
                    actor,
                    scopes,
                    name,
                    expires_at,
                },
        } => {
            let store = operator_store(&cli.global, &tenant).await?;
            let request = CreateTokenRequest {
                actor_id: actor,
                scopes,
                name,
                expires_at,
            };
            let created = crate::tokens::create_unchecked(&store, &tenant, "operator", &request)
                .await
                .map_err(|e| anyhow::anyhow!(e.into_app_error()))?;
            println!(
                "created token {} for actor {} in tenant {tenant} with scopes {}",
                created.token.id,
                created.token.actor_id,
                created.token.scopes.join(" ")
            );
            println!("the secret is shown once; store it now:");
            println!("{}", created.secret);
            Ok(())
        }
    }
}

async fn serve(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = Config::new(&global.data_dir);
    config.addr = args.addr;
    config.database_url = global.database_url();
    config.site_root = args.site_root;
    config.secure_cookies = args.secure_cookies;
    config.bootstrap_admin_password = args.bootstrap_admin_password;
    let app = Application::build(config).await?;
    if *app.bootstrap() == Bootstrap::NeedsAdmin {
        println!(
            "No user exists yet. Create the first admin with\n  \
             aperture admin create-user --tenant default --username admin --scope agent_tool_exposure:admin\n\
             or restart with APERTURE_BOOTSTRAP_ADMIN_PASSWORD set."
        );
    }
    println!("Aperture listening on http://127.0.0.1:{}", app.port());
    app.run_until_stopped().await
}

/// Connects, migrates and makes sure the tenant exists (operator commands).
async fn operator_store(global: &GlobalArgs, tenant: &str) -> anyhow::Result<Store> {
    anyhow::ensure!(
        store::tenants::is_valid_id(tenant),
        "tenant ids are 1–64 characters of a-z, 0-9, _ and -"
    );
    let store = Store::connect(&global.database_url()).await?;
    store.migrate().await?;
    store::tenants::ensure(&store, tenant).await?;
    Ok(store)
}

fn read_password(from_stdin: bool) -> anyhow::Result<String> {
    if from_stdin {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the password from stdin")?;
        Ok(text.trim_end_matches(['\r', '\n']).to_owned())
    } else {
        let first = rpassword::prompt_password("Password: ").context("reading the password")?;
        let second = rpassword::prompt_password("Repeat: ").context("reading the password")?;
        anyhow::ensure!(first == second, "the passwords differ");
        Ok(first)
    }
}
