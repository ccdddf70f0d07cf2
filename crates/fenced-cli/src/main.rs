//! `fenced`: run a program under a distributed lock on Redis, inspect and break locks, and
//! show the classic lock scenarios. `main` only parses, dispatches, and turns the outcome into an exit
//! code, in this one place.

/// `println!` that never panics: a closed stdout (`fenced list | head -1`) is not an error.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics: a closed stderr must not stop `fenced` from signalling,
/// releasing, or exiting with the right code.
macro_rules! warn {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod cmd;
mod exit;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;

use crate::args::Command;
use crate::exit::Failure;

fn main() -> ExitCode {
    // Arguments as the OS gave them: a name that is not UTF-8 is a usage error (exit 64), and
    // CMD's arguments reach CMD byte for byte.
    let argv: Vec<OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == cmd::supervise::SUBCOMMAND) {
        return ExitCode::from(cmd::supervise::main(&argv[2..]));
    }
    let cli = match args::parse(&argv) {
        Ok(cli) => cli,
        Err(e) => return ExitCode::from(usage_error(&e, &argv)),
    };
    // Generated from the command line's own definition; no Redis, no runtime.
    match &cli.command {
        Command::Completions { shell } => return ExitCode::from(cmd::docs::completions(*shell)),
        Command::Man { dir } => return ExitCode::from(cmd::docs::man(dir.as_deref())),
        _ => {}
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            warn!("fenced: cannot start the async runtime: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let outcome = runtime.block_on(async {
        match &cli.command {
            Command::Run(run) => cmd::run::run(&cli.global, run).await,
            Command::Elect(elect) => cmd::elect::elect(&cli.global, elect).await,
            Command::Leader { name, watch } => cmd::elect::leader(&cli.global, name, *watch).await,
            Command::Status { name } => cmd::inspect::status(&cli.global, name).await,
            Command::List { pattern } => cmd::inspect::list(&cli.global, pattern).await,
            Command::Doctor => cmd::doctor::doctor(&cli.global).await,
            Command::Top { pattern, interval } => {
                cmd::top::top(&cli.global, pattern, *interval).await
            }
            Command::Release {
                ticket: Some(ticket),
                ..
            } => cmd::ticket::release(&cli.global, ticket).await,
            Command::Release { name, force, .. } => {
                cmd::inspect::release(&cli.global, name.as_deref().unwrap_or(""), *force).await
            }
            Command::Extend { ticket, ttl } => cmd::ticket::extend(&cli.global, ticket, *ttl).await,
            Command::Demo => cmd::demo::demo(&cli.global).await,
            Command::Latch { name, action } => cmd::latch::latch(&cli.global, name, action).await,
            Command::Completions { .. } | Command::Man { .. } => Ok(exit::OK),
        }
    });
    // Do not wait for tasks still parked in the runtime (a pub/sub reader, say).
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Failure { code, message }) => {
            warn!("fenced: {}", one_line(&message));
            ExitCode::from(code)
        }
    }
}

/// A message folded onto one line: a server's multi-line parser error, say.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Prints a clap error as one line (help and version go out as they are) and picks the code.
fn usage_error(e: &clap::Error, argv: &[OsString]) -> u8 {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                exit::OK
            }
        }
        _ => {
            // The whole message, on one line: clap names what is missing on the lines after
            // the first. Its usage and help pointers are left out (the hint says where to look).
            let rendered = e.to_string();
            let said: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:"))
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect();
            let first = if said.is_empty() {
                "bad arguments".to_owned()
            } else {
                said.join(" ").trim_start_matches("error: ").to_owned()
            };
            let runs = ["run", "elect"]
                .into_iter()
                .find(|c| argv.iter().any(|a| a == *c));
            let hint = if let Some(sub) = runs.filter(|_| !argv.iter().any(|a| a == "--")) {
                if sub == "run" {
                    " (put `--` before the command: fenced run NAME -- CMD [ARGS...])"
                } else {
                    " (put `--` before the command: fenced elect NAME -- CMD [ARGS...])"
                }
            } else {
                " (see fenced --help)"
            };
            warn!("fenced: {}{hint}", one_line(&first));
            exit::USAGE
        }
    }
}
