//! Every Rust snippet of `docs/guide.md` compiles, with the warnings a user would see denied
//! (`snippets.rs`, made from the guide by the `tests` target's `guide_snippets`).
#![deny(warnings)]
// A snippet's last value is often shown, not used; its functions are compiled, not called.
#![allow(unused_variables, dead_code)]
// The guide's snippets may `expect` a task's join, as applications do.
#![allow(clippy::expect_used)]

// As the guide writes them: the check in `guide_snippets.rs` compares them byte for byte.
#[rustfmt::skip]
mod snippets;
mod world;
