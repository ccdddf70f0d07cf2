#[fenced::locked(name = "x")]
async fn no_client() -> fenced::Result<()> {
    Ok(())
}

fn main() {}
