//! `llmload history DIR... [--out DIR] [--label KEY] [--format json]`: many runs of a plan in
//! the order they ran (history.md, history.html, history.json), and the runs that stand out.

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::history::render;
use crate::history::{self, HistoryOptions};

#[derive(clap::Args, Debug)]
pub(super) struct HistoryArgs {
    /// Run directories (left by `llmload run --out`), or folders holding them (searched four
    /// levels deep); a shell glob (`runs/*`) gives many.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Where history.md, history.html and history.json go (created if missing).
    #[arg(long, value_name = "DIR", default_value = "history")]
    out: PathBuf,
    /// Name each run by this label of `llmload run --label KEY=VALUE` (e.g. `commit`) instead
    /// of its start time; runs stay in the order they started.
    #[arg(long, value_name = "KEY")]
    label: Option<String>,
    /// What the terminal gets: `text` (the runs that stand out) or `json` (history.json).
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

pub(super) fn history(args: &HistoryArgs) -> Result<u8> {
    let options = HistoryOptions {
        label: args.label.clone(),
    };
    let history = history::build(&args.runs, &options)?;
    let files = render::render(&history)?;
    std::fs::create_dir_all(&args.out).map_err(|e| Error::io("create", &args.out, e))?;
    for (name, text) in [
        ("history.md", &files.markdown),
        ("history.html", &files.html),
        ("history.json", &files.json),
    ] {
        let path = args.out.join(name);
        crate::files::write_whole(&path, |out| std::io::Write::write_all(out, text.as_bytes()))
            .map_err(|e| Error::io("write", &path, e))?;
    }
    if args.format == "json" {
        print!("{}", files.json);
    } else {
        print!("{}", render::terminal(&history));
        println!("history: {}", args.out.join("history.html").display());
    }
    // A history informs; each run's own verdict is what gates.
    Ok(0)
}
