#[fenced::locked(client = client, name = "x")]
fn not_async(client: &fenced::Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
