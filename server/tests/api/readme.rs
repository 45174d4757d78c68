//! The README and the reference in `docs/` name only what exists: every `aperture …` command
//! and flag in their code (checked against the built binary's `--help`, subcommand by
//! subcommand), every `APERTURE_*` setting (checked against the settings the binary and the
//! code read, and against the table of `docs/configuration.md`, which must list every setting
//! `--help` shows, with the flag `--help` gives it), every `scripts/…` the README names, and
//! every relative link and anchor.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the server crate is in the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and the reference pages. The dated history of the benchmarks is a record of
/// what was run then, not a reference, and is left out.
fn documents() -> Vec<(String, String)> {
    let root = root();
    let mut docs = vec![("README.md".to_owned(), read(&root.join("README.md")))];
    let mut pages: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| !p.ends_with("benchmarks-history.md"))
        .collect();
    pages.sort();
    for page in pages {
        let name = format!("docs/{}", page.file_name().unwrap().to_string_lossy());
        docs.push((name, read(&page)));
    }
    docs
}

/// One command as its `--help` describes it.
#[derive(Debug, Default)]
struct Help {
    subcommands: BTreeSet<String>,
    /// Each flag (`--addr`, `-f`), whether it takes a value, and its environment variable.
    flags: BTreeMap<String, (bool, Option<String>)>,
}

/// Every command of the binary, by its path (`[]`, `["journal", "verify"]`, …).
fn commands() -> &'static BTreeMap<Vec<String>, Help> {
    static TREE: OnceLock<BTreeMap<Vec<String>, Help>> = OnceLock::new();
    TREE.get_or_init(|| {
        let mut tree = BTreeMap::new();
        let mut todo = vec![Vec::<String>::new()];
        while let Some(path) = todo.pop() {
            let help = help(&path);
            for sub in &help.subcommands {
                let mut next = path.clone();
                next.push(sub.clone());
                todo.push(next);
            }
            tree.insert(path, help);
        }
        tree
    })
}

/// Runs `aperture <path> --help` and reads its sections.
fn help(path: &[String]) -> Help {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aperture"));
    command.args(path).arg("--help");
    for (name, _) in std::env::vars() {
        if name.starts_with("APERTURE_") {
            command.env_remove(name);
        }
    }
    let out = command.output().expect("run aperture --help");
    assert!(
        out.status.success(),
        "aperture {} --help: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("help is UTF-8");
    let mut help = Help::default();
    let mut section = "";
    let mut current: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = match line {
                "Commands:" => "commands",
                "Options:" => "options",
                _ => "",
            };
            current = None;
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        match section {
            "commands" if indent == 2 => {
                let name = trimmed.split_whitespace().next().unwrap_or_default();
                if name != "help" {
                    help.subcommands.insert(name.to_owned());
                }
            }
            "options" if (2..=6).contains(&indent) && trimmed.starts_with('-') => {
                // `-f, --file <FILE>` or `--addr <ADDR>` or `--once`.
                let takes_value = trimmed.contains('<');
                let head = trimmed.split(" <").next().unwrap_or_default();
                current = None;
                for flag in head.split(", ") {
                    let flag = flag
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    help.flags.insert(flag.clone(), (takes_value, None));
                    if flag.starts_with("--") {
                        current = Some(flag);
                    }
                }
            }
            "options" => {
                if let (Some(flag), Some(at)) = (&current, trimmed.find("[env: ")) {
                    let name: String = trimmed[at + 6..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if let Some(entry) = help.flags.get_mut(flag) {
                        entry.1 = Some(name);
                    }
                }
            }
            _ => {}
        }
    }
    help
}

/// The code of a Markdown document: each command of its fenced blocks (a line ending with
/// `\`, or an indented line starting with `[` or `-`, continues the one before; a JSON block is
/// one snippet) and each inline code span (newlines read as spaces), in order.
fn code(markdown: &str) -> Vec<String> {
    let mut snippets = Vec::new();
    let mut prose = String::new();
    let mut fenced: Option<Vec<String>> = None;
    let mut json = false;
    for line in markdown.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            match fenced.take() {
                Some(lines) => snippets.extend(lines),
                None => {
                    fenced = Some(Vec::new());
                    json = info.trim() == "json";
                }
            }
            prose.push('\n');
            continue;
        }
        match &mut fenced {
            Some(lines) => {
                let continues = json
                    || lines.last().is_some_and(|l: &String| l.ends_with('\\'))
                    || (line.starts_with(' ')
                        && (line.trim_start().starts_with('[')
                            || line.trim_start().starts_with('-')));
                match lines.last_mut() {
                    Some(last) if continues => {
                        last.push(' ');
                        last.push_str(line.trim());
                    }
                    _ => lines.push(line.to_owned()),
                }
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    // Inline code: text between single backticks (a paragraph's newlines are spaces in it).
    let mut rest = prose.as_str();
    while let Some(start) = rest.find('`') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('`') else { break };
        snippets.push(after[..end].replace('\n', " "));
        rest = &after[end + 1..];
    }
    snippets
}

/// A word of a command line without the quotes, brackets and punctuation around it.
fn bare(token: &str) -> &str {
    token.trim_matches(|c| "\"'`[](){},;.…".contains(c))
}

/// An `aperture …` invocation: the subcommand path it names and its flags, or why its path is
/// not one.
type Invocation = Result<(Vec<String>, Vec<String>), String>;

/// Every `aperture …` invocation of a snippet. Fails for a word where a subcommand belongs
/// that is none.
fn invocations(snippet: &str) -> Vec<Invocation> {
    let tree = commands();
    let tokens: Vec<&str> = snippet.split_whitespace().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let word = tokens[i].trim_end_matches(|c| "\"',".contains(c));
        i += 1;
        if !(word == "aperture" || word.ends_with("/aperture")) {
            continue;
        }
        let mut path = Vec::<String>::new();
        let mut flags = Vec::new();
        let mut error = None;
        while i < tokens.len() {
            let raw = tokens[i];
            let token = bare(raw);
            let next_is_option = tokens
                .get(i + 1)
                .is_some_and(|t| t.starts_with(['-', '[', '(']));
            // The command ends where the shell's next one begins, at `--` (what follows is
            // another program's), and at a comment.
            let ends = raw == "--"
                || raw.starts_with('#')
                || matches!(raw, "&&" | "||" | ";" | ">" | ">>" | "<" | "2>&1")
                || (raw == "|" && !next_is_option)
                || raw.ends_with(';');
            if ends {
                break;
            }
            i += 1;
            let node = &tree[&path];
            if token.starts_with('-') && token.len() > 1 {
                let flag = token.split('=').next().unwrap_or(token).to_owned();
                if flag
                    .trim_start_matches('-')
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    let takes_value = node.flags.get(&flag).is_some_and(|f| f.0);
                    flags.push(flag);
                    if takes_value && !token.contains('=') {
                        i += 1;
                    }
                }
                continue;
            }
            let is_word = !token.is_empty()
                && token.starts_with(|c: char| c.is_ascii_lowercase())
                && token
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if is_word && !node.subcommands.is_empty() {
                if node.subcommands.contains(token) {
                    path.push(token.to_owned());
                } else {
                    let mut named = path.clone();
                    named.push(token.to_owned());
                    error = Some(format!(
                        "`aperture {}`: no such subcommand (there are: {})",
                        named.join(" "),
                        node.subcommands
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    break;
                }
            }
        }
        found.push(match error {
            Some(e) => Err(e),
            None => Ok((path, flags)),
        });
    }
    found
}

#[test]
fn every_command_and_flag_the_readme_and_docs_name_exists() {
    let tree = commands();
    assert!(
        tree.contains_key(&vec!["journal".to_owned(), "verify".to_owned()]),
        "the help of the command tree was read: {:?}",
        tree.keys().collect::<Vec<_>>()
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for (name, text) in documents() {
        for snippet in code(&text) {
            for invocation in invocations(&snippet) {
                checked += 1;
                match invocation {
                    Err(e) => problems.push(format!("{name}: {e} (in `{snippet}`)")),
                    Ok((path, flags)) => {
                        let node = &tree[&path];
                        for flag in flags {
                            if !node.flags.contains_key(&flag) {
                                problems.push(format!(
                                    "{name}: `aperture {}` has no flag {flag} (in `{snippet}`)",
                                    path.join(" ")
                                ));
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} invocations found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every `APERTURE_…` name in a text.
fn settings_named(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("APERTURE_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        let name = name.trim_end_matches('_');
        if name.len() > "APERTURE_".len() {
            names.insert(name.to_owned());
        }
    }
    names
}

/// The settings the code reads: each variable `--help` shows, and each `"APERTURE_…"` string
/// of the workspace's Rust code (read with `std::env::var` by the binary, the tests and the
/// benchmarks) and of the scripts.
fn settings_of_the_code() -> BTreeSet<String> {
    let mut names: BTreeSet<String> = commands()
        .values()
        .flat_map(|h| h.flags.values().filter_map(|f| f.1.clone()))
        .collect();
    let root = root();
    let mut todo = vec![root.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !file.starts_with('.') && !["target", "node_modules", "docs"].contains(&&*file) {
                    todo.push(path);
                }
            } else if file.ends_with(".rs") {
                let text = read(&path);
                names.extend(
                    settings_named(&text)
                        .into_iter()
                        .filter(|n| text.contains(&format!("\"{n}\""))),
                );
            }
        }
    }
    for dir in [root.join("scripts"), root.join(".ci")] {
        for entry in std::fs::read_dir(&dir).expect("scripts") {
            names.extend(settings_named(&read(&entry.expect("entry").path())));
        }
    }
    names
}

/// The rows of `docs/configuration.md`'s tables: each variable with its flag column.
fn settings_table() -> BTreeMap<String, String> {
    let text = read(&root().join("docs/configuration.md"));
    text.lines()
        .filter(|l| l.starts_with("| `APERTURE_"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let name = cells[0]
                .trim_start_matches("| ")
                .trim_matches('`')
                .to_owned();
            (name, cells.get(1).copied().unwrap_or_default().to_owned())
        })
        .collect()
}

#[test]
fn every_setting_the_readme_names_exists_and_the_table_lists_them_all() {
    let code = settings_of_the_code();
    let table = settings_table();
    let mut problems = Vec::new();
    for (name, text) in documents() {
        for setting in settings_named(&text) {
            if !code.contains(&setting) {
                problems.push(format!("{name} names {setting}, which nothing reads"));
            } else if name == "README.md" && !table.contains_key(&setting) {
                problems.push(format!(
                    "README.md names {setting}, which docs/configuration.md does not list"
                ));
            }
        }
    }
    // Every setting `--help` shows is in the table, with the flag `--help` gives it.
    let tree = commands();
    for (path, help) in tree {
        for (flag, (_, env)) in &help.flags {
            let Some(env) = env else { continue };
            let Some(column) = table.get(env) else {
                problems.push(format!(
                    "docs/configuration.md does not list {env} (aperture {} {flag})",
                    path.join(" ")
                ));
                continue;
            };
            let global = tree[&Vec::new()].flags.contains_key(flag);
            let expected = if global {
                format!("`{flag}`")
            } else {
                format!("`{} {flag}`", path.join(" "))
            };
            if column.trim() != expected {
                problems.push(format!(
                    "docs/configuration.md: the flag of {env} is {expected}, not {column}"
                ));
            }
        }
    }
    for name in table.keys() {
        if !code.contains(name) {
            problems.push(format!(
                "docs/configuration.md lists {name}, which nothing reads"
            ));
        }
    }
    assert!(table.len() > 30, "the settings table was read: {table:?}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_is_short_and_names_only_scripts_that_exist() {
    let root = root();
    let readme = read(&root.join("README.md"));
    let lines = readme.lines().count();
    assert!(lines <= 300, "README.md has {lines} lines, at most 300");
    let mut named = BTreeSet::new();
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("scripts/") {
        let name: String = rest[at + 8..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        rest = &rest[at + 8..];
        if !name.is_empty() {
            named.insert(name);
        }
    }
    assert!(named.contains("run") && named.contains("test"), "{named:?}");
    let missing: Vec<_> = named
        .iter()
        .filter(|n| !root.join("scripts").join(n).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "README.md names missing scripts: {missing:?}"
    );
}

/// The anchors of a Markdown page's headings, as GitHub makes them.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen = BTreeMap::<String, usize>::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let slug: String = line
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        anchors.insert(match *n {
            0 => slug,
            n => format!("{slug}-{n}"),
        });
        *n += 1;
    }
    anchors
}

#[test]
fn relative_links_of_the_readme_and_docs_resolve() {
    let root = root();
    let mut problems = Vec::new();
    let mut pages = documents();
    pages.push((
        "docs/benchmarks-history.md".to_owned(),
        read(&root.join("docs/benchmarks-history.md")),
    ));
    pages.push(("CHANGELOG.md".to_owned(), read(&root.join("CHANGELOG.md"))));
    for (name, text) in &pages {
        let dir = root.join(name).parent().unwrap().to_path_buf();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target, None),
            };
            let path = if file.is_empty() {
                root.join(name)
            } else {
                dir.join(file)
            };
            if !path.exists() {
                problems.push(format!("{name}: {target} does not exist"));
                continue;
            }
            if let Some(anchor) = anchor
                && path.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&path)).contains(anchor)
            {
                problems.push(format!("{name}: {target}: no such heading"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
