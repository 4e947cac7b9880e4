//! The `pinhook` binary: parses the command line, starts logging (`log::writer`'s thread) and
//! the async runtime, and hands each subcommand to the library. Prints errors on one line;
//! exits 2 on usage or start-up errors, 1 when `resolve` cannot resolve, and `check`'s own code.

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use pinhook::cli::{Cli, Command, InventoryArgs, InventoryOutput, LogFormat};
use pinhook::registry::credentials::exec;
use pinhook::text::one_line;
use pinhook::{app, certs, check};

/// mimalloc instead of glibc's malloc: malloc and free were about 12 % of the warm path's CPU
/// (issue 13), and glibc's arenas consolidate under two busy workers.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // pinhook starting a credential program for itself: cap, then become the program (only
    // returns when it could not).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == exec::LAUNCH) {
        let error = exec::launch(&args[2..]);
        eprintln!("pinhook: cannot start the credential program: {error}");
        return ExitCode::from(exec::LAUNCH_FAILED);
    }
    // First, before anything that could fail: `--help` and `--version` must always work.
    let cli = Cli::parse();
    // Every credential program runs through this binary, its memory capped.
    match std::env::current_exe() {
        Ok(binary) => exec::launch_through(binary),
        Err(e) => {
            eprintln!("pinhook: cannot find its own binary ({e}): credential programs run uncapped")
        }
    }
    // Flushes the log lines still queued when it is dropped, at the end of main.
    let _log_guard = init_tracing(cli.log_format);
    pinhook::install_crypto_provider();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("pinhook: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pinhook: {}", one_line(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}

/// Logs to stderr through `log::writer`'s thread (a request's worker only queues its line; the
/// thread writes at the lowest priority, never dropping a line). Colours only on a terminal,
/// and not with `NO_COLOR`.
fn init_tracing(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    use std::io::IsTerminal as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("PINHOOK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (writer, guard) = pinhook::log::writer::spawn(std::io::stderr());
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    match format {
        LogFormat::Text => {
            let subscriber = pinhook::log::line::text_format(filter, ansi, writer.clone());
            if !ansi {
                // The per-review summary line goes to the same writer, formatted by `log::line`.
                pinhook::log::line::install_writer(writer);
            }
            subscriber.init();
        }
        LogFormat::Json => pinhook::log::json::json_format(filter, ansi, writer).init(),
    }
    guard
}

async fn run(command: Command) -> Result<ExitCode> {
    match command {
        Command::Serve(args) => {
            app::build(args.into_config()?).await?.run().await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Resolve(args) => {
            let config = args.into_config()?;
            match app::resolve(&config).await? {
                Ok(pinned) => {
                    println!("{pinned}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    let reason = pinhook::error::error_chain(&e);
                    let message = format!("cannot resolve {}: {reason}", config.image);
                    eprintln!("pinhook: {}", one_line(&message));
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Certs(args) => {
            let issued = certs::issue(&args.into_config())?;
            eprintln!("{}", issued.summary());
            // stdout carries only the caBundle, so scripts can capture it.
            println!("{}", issued.ca_bundle);
            Ok(ExitCode::SUCCESS)
        }
        Command::Check(args) => Ok(ExitCode::from(check::run(args.into_config()?).await?)),
        Command::Watch(args) => {
            pinhook::watch::controller::run(args.into_config()?).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Inventory(args) => inventory(args).await,
    }
}

/// `pinhook inventory`: 0 with rows, 1 when nothing matched, 2 when the cluster cannot be read.
async fn inventory(args: InventoryArgs) -> Result<ExitCode> {
    let access = match args.kubeconfig {
        Some(path) => pinhook::kube_client::KubeAccess::Kubeconfig(path),
        None => pinhook::kube_client::KubeAccess::Infer,
    };
    let Some(client) = pinhook::kube_client::kube_client(access).await? else {
        anyhow::bail!("no Kubernetes API configured (give --kubeconfig or set KUBECONFIG)");
    };
    let mut inventory = pinhook::watch::controller::inventory::read(
        &client,
        args.namespace.as_deref(),
        args.report_api.into(),
    )
    .await?;
    if let Some(digest) = &args.digest {
        inventory = inventory.with_digest(digest);
    }
    match args.output {
        InventoryOutput::Table => print!("{}", inventory.to_table()),
        InventoryOutput::Json => println!("{}", inventory.to_json()?),
    }
    if inventory.images.is_empty() {
        eprintln!("pinhook: no running image matched");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
