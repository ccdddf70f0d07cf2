#[fenced::locked(client = client, name = "x", ttl = "10 parsecs")]
async fn bad_ttl(client: &fenced::Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
