#[fenced::locked(client = client, name = "x", fair = "yes")]
async fn unknown(client: &fenced::Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
