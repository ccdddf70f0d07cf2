//! The README's program is a program: the README shows `examples/readme.rs` whole, and it
//! runs against a real server.

use crate::support::{client, raw, server};

#[allow(dead_code)]
#[path = "../examples/readme.rs"]
mod example;

/// The README's test of code that takes a lock, run as the README shows it.
#[path = "readme_testing.rs"]
mod readme_testing;

const EXAMPLE: &str = include_str!("../examples/readme.rs");
const README_TEST: &str = include_str!("readme_testing.rs");
const README: &str = include_str!("../../../README.md");

/// The README's first Rust block.
fn readme_program() -> &'static str {
    let start = README.find("```rust\n").map(|i| i + "```rust\n".len());
    let start = start.unwrap_or_else(|| panic!("the README shows no Rust program"));
    let len = README[start..].find("```").unwrap_or(0);
    &README[start..start + len]
}

#[test]
fn the_readme_shows_the_example_program_whole() {
    assert_eq!(
        readme_program(),
        EXAMPLE,
        "README.md's program and crates/fenced/examples/readme.rs differ"
    );
}

#[test]
fn the_readme_shows_its_test_with_a_throwaway_server_whole() {
    assert!(
        README.contains(&format!("```rust\n{README_TEST}```")),
        "README.md's test and crates/fenced/tests/readme_testing.rs differ"
    );
}

#[tokio::test]
async fn the_readme_program_sells_one_under_a_fencing_token() {
    let s = server();
    example::sell_one(&s.url()).await.unwrap();
    // It wrote the stock under its first grant's token, and released both grants.
    let c = client(&s).await;
    assert!(
        c.lock("product:10100101")
            .status()
            .await
            .unwrap()
            .holder
            .is_none()
    );
    let mut conn = raw(&s).await;
    let count: Option<String> = redis::cmd("HGET")
        .arg("fenced:res:{stock:10100101}")
        .arg("count")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(count.as_deref(), Some("19"));
}
