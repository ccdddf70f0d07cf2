//! `tests/guide/snippets.rs` holds every Rust snippet of `docs/guide.md`, each in a function
//! of its own (or a module, for whole items), after the lines an HTML comment before the
//! snippet gives it (`<!-- compiled with: … -->`, unseen on a rendered page); the `guide`
//! test target compiles it with the warnings a user would see denied. This checks that it is
//! what the guide says today; `FENCED_BLESS=1` rewrites it.

const GUIDE: &str = include_str!("../../../docs/guide.md");
const SNIPPETS: &str = include_str!("guide/snippets.rs");

/// `snippets.rs` as the guide's Rust blocks make it.
fn render(guide: &str) -> String {
    let mut out = String::from(
        "//! The Rust snippets of `docs/guide.md`, made by `tests/guide_snippets.rs` (`FENCED_BLESS=1`\n\
         //! rewrites this file): compiled by the `guide` target, never run.\n\n\
         use crate::world::*;\n",
    );
    let mut context = String::new();
    let mut items = false;
    let mut lines = guide.lines();
    let mut n = 0;
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("<!-- compiled with:") {
            context = rest.trim_end_matches("-->").trim().to_owned();
            continue;
        }
        if line.trim() == "<!-- compiled as items -->" {
            items = true;
            continue;
        }
        if line != "```rust" {
            if !line.trim().is_empty() && !line.starts_with("<!--") {
                context.clear();
                items = false;
            }
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        // Numbered in order, not by line: prose edits above a snippet change nothing here.
        n += 1;
        if items {
            out.push_str(&format!(
                "\n/// docs/guide.md, Rust snippet {n}.\nmod snippet_{n} {{\n    #[allow(unused_imports)]\n    use crate::world::*;\n\n"
            ));
            for l in &body {
                out.push_str(&indent(l));
            }
            out.push_str("}\n");
        } else {
            out.push_str(&format!(
                "\n/// docs/guide.md, Rust snippet {n}.\nasync fn snippet_{n}(client: Client, url: &'static str) -> Result<(), BoxError> {{\n    let _ = (&client, url);\n"
            ));
            if !context.is_empty() {
                out.push_str(&indent(&context));
            }
            for l in &body {
                out.push_str(&indent(l));
            }
            out.push_str("    #[allow(unreachable_code)]\n    Ok(())\n}\n");
        }
        context.clear();
        items = false;
    }
    out
}

fn indent(line: &str) -> String {
    if line.is_empty() {
        "\n".to_owned()
    } else {
        format!("    {line}\n")
    }
}

#[test]
fn the_compiled_snippets_are_the_guides() {
    let expected = render(GUIDE);
    if std::env::var_os("FENCED_BLESS").is_some() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/guide/snippets.rs");
        std::fs::write(path, &expected).unwrap();
        return;
    }
    assert!(
        SNIPPETS == expected,
        "docs/guide.md's snippets changed: FENCED_BLESS=1 cargo test -p fenced --test tests guide_snippets rewrites tests/guide/snippets.rs, which `--test guide` compiles"
    );
}
