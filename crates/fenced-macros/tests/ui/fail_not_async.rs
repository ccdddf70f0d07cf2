use fenced::Client;

#[fenced::locked(client = client, name = "x")]
fn not_async(client: &Client) -> fenced::Result<()> {
    Ok(())
}

fn main() {}
