//! `fenced completions SHELL` and `fenced man`: generated from the command line's own
//! definition (clap_complete, clap_mangen), so they never drift from `--help`.

use std::io::Write;
use std::path::Path;

use crate::args::command;
use crate::exit;

/// Prints the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> u8 {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut command(), "fenced", &mut out);
    match out.flush() {
        Ok(()) => exit::OK,
        Err(_) => exit::SOFTWARE,
    }
}

/// Prints the manual page on stdout, or writes `fenced.1` and one page per subcommand into
/// `dir`.
pub fn man(dir: Option<&Path>) -> u8 {
    let result = match dir {
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(command())
                .render(&mut out)
                .and_then(|()| out.flush())
        }
        Some(dir) => write_pages(dir),
    };
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            warn!("fenced: cannot write the manual: {e}");
            exit::CANT_CREATE
        }
    }
}

fn write_pages(dir: &Path) -> std::io::Result<()> {
    let all = command();
    let mut pages = vec![("fenced".to_owned(), all.clone())];
    for sub in all.get_subcommands() {
        let name = format!("fenced-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().display_name(name)));
    }
    for (name, page) in pages {
        let mut file = std::fs::File::create(dir.join(format!("{name}.1")))?;
        clap_mangen::Man::new(page).render(&mut file)?;
    }
    Ok(())
}
