//! The interactive shell: statements end with `;` and may span lines.

use std::path::PathBuf;

use datafusion::common::{DataFusionError, Result};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use crate::session::Session;

const HELP: &str = "\
Enter SQL statements ending with ';' (they may span several lines).
  SET prefetch.policy = 'off' | 'batched' | 'pipelined';   choose the scan policy
  SET prefetch.read_ahead_window = '64MiB';                 and the other prefetch.* settings
  SHOW prefetch.policy;   SHOW ALL;   SHOW TABLES;
  EXPLAIN ANALYZE SELECT …;   shows the prefetch_* scan metrics
  \\q, quit or Ctrl-D to exit; Ctrl-C clears the current statement.";

/// Read statements until `\q`, `quit`, `exit` or end of input, running each
/// as it completes. Errors are printed and the shell goes on.
pub fn run(runtime: &tokio::runtime::Runtime, session: &mut Session) -> Result<()> {
    let mut editor = DefaultEditor::new().map_err(readline_error)?;
    let history = history_file();
    if let Some(path) = &history {
        // No history yet is fine.
        let _ = editor.load_history(path);
    }
    session.summaries = true;
    eprintln!(
        "dfprefetch {}: every Parquet scan prefetches. \\? for help, \\q to quit.",
        env!("CARGO_PKG_VERSION")
    );
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "dfprefetch> "
        } else {
            "        ..> "
        };
        match editor.readline(prompt) {
            Ok(line) => {
                let trimmed = line.trim();
                if buffer.is_empty() {
                    match trimmed.trim_end_matches(';') {
                        "" => continue,
                        "\\q" | "quit" | "exit" => break,
                        "\\?" | "\\h" | "help" => {
                            eprintln!("{HELP}");
                            continue;
                        }
                        _ => {}
                    }
                }
                buffer.push_str(&line);
                buffer.push('\n');
                if trimmed.ends_with(';') {
                    let sql = std::mem::take(&mut buffer);
                    let _ = editor.add_history_entry(sql.trim());
                    if let Err(e) = runtime.block_on(session.run_sql(&sql)) {
                        eprintln!("Error: {e}");
                    }
                }
            }
            Err(ReadlineError::Interrupted) => buffer.clear(),
            Err(ReadlineError::Eof) => {
                // A last statement without its `;` still runs.
                if !buffer.trim().is_empty()
                    && let Err(e) = runtime.block_on(session.run_sql(&buffer))
                {
                    eprintln!("Error: {e}");
                }
                break;
            }
            Err(e) => return Err(readline_error(e)),
        }
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

/// `~/.dfprefetch_history`, when there is a home directory.
fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .map(|home| PathBuf::from(home).join(".dfprefetch_history"))
}

fn readline_error(e: ReadlineError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}
