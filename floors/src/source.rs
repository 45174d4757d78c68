//! A crate's source as the checks see it: its top-level modules, what the root re-exports, and
//! every path by which one top-level module names another.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};

/// One crate, read from its `src` folder.
#[derive(Debug)]
pub struct Crate {
    /// The `src` folder.
    pub src: PathBuf,
    /// The modules the crate root (`lib.rs`) declares, in order.
    pub modules: Vec<String>,
    /// Names the root re-exports (`pub use x::Thing;`), with the module they come from.
    pub reexports: BTreeMap<String, String>,
    /// The root's source text.
    pub root: String,
    files: Vec<(PathBuf, Vec<String>)>,
}

/// One module naming another: `from`'s source at `file` mentions `path`, which lands in `to`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
    pub path: String,
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} -> {}: {} names `{}`",
            self.from,
            self.to,
            self.file.display(),
            self.path
        )
    }
}

/// Why a crate could not be read.
#[derive(Debug)]
pub struct ReadError(pub String);

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReadError {}

impl Crate {
    /// Reads the crate whose root is `src/lib.rs` (a binary's: `src/main.rs`).
    pub fn read(src: impl AsRef<Path>) -> Result<Crate, ReadError> {
        let src = src.as_ref().to_path_buf();
        let library = src.join("lib.rs");
        let root_file = if library.exists() {
            library
        } else {
            src.join("main.rs")
        };
        let root = std::fs::read_to_string(&root_file)
            .map_err(|e| ReadError(format!("{}: {e}", root_file.display())))?;
        let tokens = parse(&root_file, &root)?;
        let modules = declared_modules(&tokens);
        let reexports = root_reexports(&tokens, &modules);
        let mut files = Vec::new();
        collect_files(&src, &src, &mut files)?;
        files.sort();
        Ok(Crate {
            src,
            modules,
            reexports,
            root,
            files,
        })
    }

    /// Every path by which a top-level module names another (the root names everything and
    /// is left out; a module naming itself is no edge).
    pub fn edges(&self) -> Result<Vec<Edge>, ReadError> {
        let mut edges = BTreeSet::new();
        for (file, module) in &self.files {
            let Some(top) = module.first() else { continue };
            if !self.modules.contains(top) {
                continue;
            }
            let text = std::fs::read_to_string(file)
                .map_err(|e| ReadError(format!("{}: {e}", file.display())))?;
            let tokens = parse(file, &text)?;
            let mut found = Vec::new();
            walk(&tokens, module, &mut found);
            for (target, path) in found {
                let to = self.module_of(&target);
                if let Some(to) = to
                    && to != *top
                {
                    let rel = file.strip_prefix(&self.src).unwrap_or(file);
                    edges.insert(Edge {
                        from: top.clone(),
                        to,
                        file: rel.to_path_buf(),
                        path,
                    });
                }
            }
        }
        Ok(edges.into_iter().collect())
    }

    /// The top-level module a root-level name belongs to, if any.
    fn module_of(&self, name: &str) -> Option<String> {
        if self.modules.iter().any(|m| m == name) {
            return Some(name.to_owned());
        }
        self.reexports.get(name).cloned()
    }
}

fn parse(file: &Path, text: &str) -> Result<Vec<TokenTree>, ReadError> {
    TokenStream::from_str(text)
        .map(|s| s.into_iter().collect())
        .map_err(|e| ReadError(format!("{}: not Rust tokens: {e}", file.display())))
}

/// `a.rs` and `a/mod.rs` are module `a`; `a/b.rs` is `a::b`; the roots are no module.
fn collect_files(
    src: &Path,
    dir: &Path,
    out: &mut Vec<(PathBuf, Vec<String>)>,
) -> Result<(), ReadError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| ReadError(format!("{}: {e}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(|e| ReadError(format!("{}: {e}", dir.display())))?
            .path();
        if path.is_dir() {
            collect_files(src, &path, out)?;
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let Ok(rel) = path.strip_prefix(src) else {
            continue;
        };
        let mut module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let Some(last) = module.pop() else { continue };
        if module.is_empty() && (last == "lib.rs" || last == "main.rs") {
            continue;
        }
        if module.first().is_some_and(|m| m == "bin") {
            continue;
        }
        if last != "mod.rs" {
            module.push(last.trim_end_matches(".rs").to_owned());
        }
        out.push((path, module));
    }
    Ok(())
}

/// `mod x;` and `mod x { … }` at the top of the root, whatever their visibility or attributes.
fn declared_modules(tokens: &[TokenTree]) -> Vec<String> {
    let mut modules = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        if is_ident(token, "mod")
            && let Some(TokenTree::Ident(name)) = tokens.get(i + 1)
        {
            modules.push(name.to_string());
        }
    }
    modules
}

/// The names of `pub use x::…;` statements at the top of the root, mapped to module `x`.
fn root_reexports(tokens: &[TokenTree], modules: &[String]) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut i = 0;
    while i < tokens.len() {
        if is_ident(&tokens[i], "use") {
            let end = tokens[i..]
                .iter()
                .position(|t| is_punct(t, ';'))
                .map_or(tokens.len(), |p| i + p);
            let statement = &tokens[i + 1..end];
            let mut names = Vec::new();
            idents(statement, &mut names);
            let module = names
                .iter()
                .find(|n| !matches!(n.as_str(), "crate" | "self"))
                .filter(|n| modules.contains(n))
                .cloned();
            if let Some(module) = module {
                for name in names {
                    if !matches!(name.as_str(), "crate" | "self" | "as") && name != module {
                        map.entry(name).or_insert_with(|| module.clone());
                    }
                }
            }
            i = end;
        }
        i += 1;
    }
    map
}

fn idents(tokens: &[TokenTree], out: &mut Vec<String>) {
    for token in tokens {
        match token {
            TokenTree::Ident(ident) => out.push(ident.to_string()),
            TokenTree::Group(group) => {
                let inner: Vec<TokenTree> = group.stream().into_iter().collect();
                idents(&inner, out);
            }
            _ => {}
        }
    }
}

/// Every root-level name `tokens` reach through `crate::…` or `super::…` from inside
/// `module`, with the path as written (in order of appearance).
fn walk(tokens: &[TokenTree], module: &[String], out: &mut Vec<(String, String)>) {
    let mut i = 0;
    while i < tokens.len() {
        let token = &tokens[i];
        // `mod name { … }`: one level deeper.
        if is_ident(token, "mod")
            && let (Some(TokenTree::Ident(name)), Some(TokenTree::Group(body))) =
                (tokens.get(i + 1), tokens.get(i + 2))
            && body.delimiter() == Delimiter::Brace
        {
            let mut inner_module = module.to_vec();
            inner_module.push(name.to_string());
            let inner: Vec<TokenTree> = body.stream().into_iter().collect();
            walk(&inner, &inner_module, out);
            i += 3;
            continue;
        }
        let after_dollar = i > 0 && is_punct(&tokens[i - 1], '$');
        let after_path = i >= 2 && is_path_sep(tokens, i - 2);
        if is_ident(token, "crate") && !after_dollar && !after_path && is_path_sep(tokens, i + 1) {
            reach(tokens, i + 3, "crate::".to_owned(), out);
            i += 3;
            continue;
        }
        if is_ident(token, "super") && !after_path {
            // `super::super::…`: how far up, and where the chain continues.
            let mut climbs = 0;
            let mut j = i;
            let mut written = String::new();
            while is_ident_at(tokens, j, "super") && is_path_sep(tokens, j + 1) {
                climbs += 1;
                written.push_str("super::");
                j += 3;
            }
            if climbs > 0 && climbs >= module.len() {
                reach(tokens, j, written, out);
            }
            i = j.max(i + 1);
            continue;
        }
        if let TokenTree::Group(group) = token {
            let inner: Vec<TokenTree> = group.stream().into_iter().collect();
            walk(&inner, module, out);
        }
        i += 1;
    }
}

/// The root-level names at `tokens[at]`: one identifier, or each item of a `{…}` group.
fn reach(tokens: &[TokenTree], at: usize, written: String, out: &mut Vec<(String, String)>) {
    match tokens.get(at) {
        Some(TokenTree::Ident(name)) => {
            let mut path = format!("{written}{name}");
            let mut j = at + 1;
            while is_path_sep(tokens, j) {
                match tokens.get(j + 2) {
                    Some(TokenTree::Ident(next)) => {
                        path.push_str("::");
                        path.push_str(&next.to_string());
                        j += 3;
                    }
                    _ => {
                        path.push_str("::…");
                        break;
                    }
                }
            }
            out.push((name.to_string(), path));
        }
        Some(TokenTree::Group(group)) if group.delimiter() == Delimiter::Brace => {
            let inner: Vec<TokenTree> = group.stream().into_iter().collect();
            for item in inner.split(|t| is_punct(t, ',')) {
                if let Some(TokenTree::Ident(name)) = item.first() {
                    let name = name.to_string();
                    if name != "self" {
                        out.push((name.clone(), format!("{written}{{{name}…}}")));
                    }
                }
            }
        }
        _ => {}
    }
}

fn is_ident(token: &TokenTree, name: &str) -> bool {
    matches!(token, TokenTree::Ident(ident) if ident == name)
}

fn is_ident_at(tokens: &[TokenTree], at: usize, name: &str) -> bool {
    tokens.get(at).is_some_and(|t| is_ident(t, name))
}

fn is_punct(token: &TokenTree, c: char) -> bool {
    matches!(token, TokenTree::Punct(p) if p.as_char() == c)
}

/// `::` at `tokens[at..at + 2]`.
fn is_path_sep(tokens: &[TokenTree], at: usize) -> bool {
    matches!(
        (tokens.get(at), tokens.get(at + 1)),
        (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)))
            if a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':'
    )
}
